"""Submitting a sweep, and following many jobs, on a local cluster.

(1) A 100-task sweep as one job array (one sbatch call) against 100 separate submissions: time to
submit and time until every task's result is back. (2) Scheduler calls to follow 100 jobs: one
poll of all their states costs one squeue and one sacct call, whatever the number of jobs.

    python bench/bench_submit.py [--tasks 100]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


def square(x: int) -> int:
    return x * x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100)
    options = parser.parse_args()
    os.environ["CLUSTERKIT_HOME"] = tempfile.mkdtemp(prefix="ck-bench-")
    import cloudpickle

    from clusterkit.jobs.submit import map_array, submit_function
    from clusterkit.jobs.tracking import tracker_for
    from clusterkit import ClusterRequest, create_cluster

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = create_cluster(ClusterRequest("bench", provider="local", nodes=4, cpus_per_node=4))
    try:
        started = time.perf_counter()
        array = map_array(square, range(options.tasks), cluster="bench", time_minutes=5)
        array_submit = time.perf_counter() - started
        assert [h.result(timeout=600) for h in array] == [x * x for x in range(options.tasks)]
        array_total = time.perf_counter() - started

        started = time.perf_counter()
        separate = [submit_function(square, x, cluster="bench", time_minutes=5) for x in range(options.tasks)]
        separate_submit = time.perf_counter() - started
        assert [h.result(timeout=600) for h in separate] == [x * x for x in range(options.tasks)]
        separate_total = time.perf_counter() - started

        tracker = tracker_for(cluster.slurm())
        before = tracker.scheduler_calls
        tracker.snapshot(fresh=True)
        states = {h.job_id: h.state for h in array + separate}  # served from that one snapshot
        calls_per_poll = tracker.scheduler_calls - before
        print(json.dumps({
            "tasks": options.tasks,
            "array_submit_s": round(array_submit, 2), "separate_submit_s": round(separate_submit, 2),
            "submit_ratio_array_vs_separate": round(array_submit / separate_submit, 3),
            "array_all_results_s": round(array_total, 2), "separate_all_results_s": round(separate_total, 2),
            "jobs_followed": len(states), "scheduler_calls_per_poll": calls_per_poll,
        }))
    finally:
        cluster.delete()


if __name__ == "__main__":
    main()

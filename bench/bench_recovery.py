"""Recovery from a node crash on the local cluster, with the resilient training example.

Measures, in the same run: Slurm's own detection-and-requeue time (crash -> the job back in the
queue), when Slurm starts it again, clusterkit's recovery time (crash -> first heartbeat of the
resumed training), the difference (target <= 15 s), and the steps lost (target <= one checkpoint
interval).

    python bench/bench_recovery.py [--checkpoint-every 10]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--steps", type=int, default=80)
    options = parser.parse_args()
    os.environ["CLUSTERKIT_HOME"] = tempfile.mkdtemp(prefix="ck-bench-")
    from clusterkit.jobs.spec import job_from_dict
    from clusterkit.jobs.submit import submit_job
    from clusterkit.providers.local import LocalCluster, processes
    from clusterkit.resilience.heartbeat import read_heartbeats

    workdir = Path(tempfile.mkdtemp(prefix="ck-bench-run-"))
    (workdir / "examples").symlink_to(REPO / "examples")
    cluster = LocalCluster.create("bench", nodes=4, cpus_per_node=2)
    try:
        spec = job_from_dict({
            "name": "bench-recovery", "instance": "local", "nodes": 2, "processes_per_node": 1,
            "launcher": "torchrun", "command": ["examples/train_resilient.py"], "checkpoint_dir": "run",
            "max_restarts": 3, "supervise": True, "time": "10", "logs": {"output": "train_%j.out"},
            "env": {"TRAIN_STEPS": str(options.steps), "STEP_SECONDS": "0.2",
                    "CHECKPOINT_EVERY": str(options.checkpoint_every)},
        })
        handle = submit_job(spec, "bench", workdir=workdir)
        beats_root = workdir / "run" / ".clusterkit" / "heartbeats"
        first_try = beats_root / f"{handle.job_id}.0.0"

        def last_step(directory: Path) -> int:
            beats = read_heartbeats(directory) if directory.is_dir() else {}
            return max((beat.step for beat in beats.values()), default=0)

        crash_at = options.checkpoint_every * 2 + options.checkpoint_every // 2
        processes.wait_until(lambda: last_step(first_try) >= crash_at, 120, "training to reach the crash step",
                             interval=0.05)
        nodes = cluster.slurm().run("scontrol", "show", "hostnames",
                                  cluster.slurm().job_details(handle.job_id)["NodeList"]).stdout.split()
        step_at_crash = last_step(first_try)
        crashed = time.time()
        cluster.crash_node(nodes[-1])
        processes.wait_until(lambda: handle.tracker.state(handle.job_id, fresh=True) in ("PENDING", "REQUEUED"),
                             120, "Slurm to requeue the job", interval=0.1)
        requeued = time.time()
        processes.wait_until(lambda: handle.tracker.state(handle.job_id, fresh=True) == "RUNNING", 120,
                             "Slurm to start the job again", interval=0.1)
        running_again = time.time()
        resumed_dir = beats_root / f"{handle.job_id}.1.0"
        processes.wait_until(lambda: bool(read_heartbeats(resumed_dir)) if resumed_dir.is_dir() else False,
                             180, "the resumed training's first step", interval=0.05)
        first_resumed = min(beat.time for beat in read_heartbeats(resumed_dir).values())
        resumed_step = min(beat.step for beat in read_heartbeats(resumed_dir).values()) - 1
        assert handle.wait(timeout=300) == "COMPLETED"
        slurm_time, recovery = requeued - crashed, first_resumed - crashed
        print(json.dumps({
            "slurm_detect_and_requeue_s": round(slurm_time, 1), "crash_to_first_resumed_step_s": round(recovery, 1),
            "clusterkit_overhead_s": round(recovery - slurm_time, 1), "overhead_target_s": 15,
            "slurm_restart_s": round(running_again - crashed, 1),
            "job_start_to_first_resumed_step_s": round(first_resumed - running_again, 1),
            "step_at_crash": step_at_crash, "resumed_from_step": resumed_step,
            "steps_lost": step_at_crash - resumed_step, "checkpoint_interval": options.checkpoint_every,
        }))
    finally:
        cluster.start_node(nodes[-1]) if "nodes" in locals() else None
        cluster.delete()


if __name__ == "__main__":
    main()

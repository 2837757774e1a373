"""No false positive: a healthy supervised run with slow checkpoint saves, beside busy loops, at ParallelCluster's
timings, for as long as asked (the issue's soak is 20 minutes). Liveness beacons and hang detection must find no
node gone and restart nothing.

The resilient training example runs supervised (hang detection on) on 2 of 4 nodes of a fresh local cluster at
`--timings parallelcluster`, with spares: 1; each checkpoint save takes 3x a step (SAVE_SECONDS), and `--busy`
busy loops run beside it. At the end it counts: the supervisor's decisions other than `completed`, nodes marked
DOWN or drained, the cluster agent's acts (marked_down, let_go) and its probes that were answered (a beacon late
but its node alive: the cost of a loaded machine, never a node), and the run's attempts. It exits 1 unless the run
completed in one attempt with no decision but `completed` and no node marked.

    python bench/bench_no_false_positive.py [--minutes 20] [--busy 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEP_S = 0.5


def busy_loop() -> None:
    while True:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--busy", type=int, default=2)
    args = parser.parse_args()

    from clusterkit import ClusterRequest, create_cluster, runtime
    from clusterkit.jobs.spec import job_from_dict
    from clusterkit.jobs.submit import submit
    from clusterkit.resilience.agent import read_agent_log

    steps = max(20, int(args.minutes * 60 / (STEP_S * (1 + 3 / 10))))  # a save of 3 steps every 10 steps
    cluster = create_cluster(ClusterRequest("soak", provider="local", nodes=4, timings="parallelcluster",
                                            replace_nodes=False))
    loops = [multiprocessing.Process(target=busy_loop, daemon=True) for _ in range(args.busy)]
    for loop in loops:
        loop.start()
    started = time.time()
    try:
        workdir = Path(tempfile.mkdtemp(prefix="ck-soak-"))
        (workdir / "examples").symlink_to(REPO / "examples")
        spec = job_from_dict({
            "name": "soak", "instance": "local", "nodes": 2, "processes_per_node": 1, "launcher": "torchrun",
            "command": ["examples/train_resilient.py"], "checkpoint_dir": "run", "max_restarts": 3,
            "time": str(int(args.minutes * 3 + 10)), "supervise": {"hang_timeout": 60, "spares": 1},
            "logs": {"output": "soak_%j.out"},
            "env": {"TRAIN_STEPS": str(steps), "STEP_SECONDS": str(STEP_S), "SAVE_SECONDS": str(3 * STEP_S),
                    "CHECKPOINT_EVERY": "10"},
        })
        handle = submit(spec, cluster.name, workdir=workdir)
        print(f"{steps} steps of {STEP_S} s, saves of {3 * STEP_S} s every 10 steps, {args.busy} busy loops, "
              f"job {handle.job_id}", flush=True)
        state = handle.wait(timeout=args.minutes * 60 * 4 + 600, poll=5)
        elapsed = time.time() - started
        made = runtime.read_decisions(workdir / "run" / runtime.STATE_DIR_NAME / runtime.DECISIONS_FILE)
        others = [d for d in made if d.get("decision") != runtime.COMPLETED]
        marked = [n for n in cluster.slurm().nodes() if n.base_state in ("down", "drain", "drng")]
        acts = [e for e in read_agent_log(cluster.agent_log) if e.job == handle.job_id]
        answered = [e for e in acts if e.event == "answered"]
        agent_marks = [e for e in acts if e.event in ("marked_down", "let_go")]
        attempts = handle.attempts()
        print(f"ran {elapsed / 60:.1f} min; state {state}; attempts {len(attempts)}; decisions other than completed: "
              f"{len(others)}; nodes down or drained: {[n.name for n in marked]}; agent marks: {len(agent_marks)}; "
              f"agent probes answered: {len(answered)}", flush=True)
        for decision in others:
            print(f"  decision: {decision.get('decision')}: {decision.get('evidence')}")
        for event in agent_marks:
            print(f"  agent: {event.event} {event.node}: {event.evidence}")
        ok = state == "COMPLETED" and len(attempts) == 1 and not others and not marked and not agent_marks
        print("no false positive" if ok else "FALSE POSITIVE or failed run")
        return 0 if ok else 1
    finally:
        for loop in loops:
            loop.terminate()
        cluster.delete()


if __name__ == "__main__":
    raise SystemExit(main())

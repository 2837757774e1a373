"""A supervised run through many time-limit requeues, again and again, under CPU load: does `status` call it COMPLETED?

The resilient training example runs supervised on 2 nodes of a fresh local cluster with a 1-minute limit, the
warning 30 s before it (`signal: USR1@30`) and a restart budget of one: 150 steps of 0.5 s need several attempts,
each saved on the warning and requeued (planned requeues spend no budget). `--busy` busy loops run beside it. Per
run it prints the attempts `clusterkit status` shows, the supervisor's last decision, Slurm's state of the last
attempt (its batch script's: FAILED 0:10 where the warning's SIGUSR1 killed the exiting supervisor) and the state
`status` reports; then "K/N COMPLETED", and it exits 1 unless every run was reported COMPLETED. The evidence of each
run (sacct -D, decisions.jsonl, status, the job's log) is kept under --evidence.

    python bench/bench_time_limit_loop.py [--runs 10] [--busy 2] [--evidence DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SACCT_FIELDS = "JobID,State,ExitCode,Submit,Eligible,Start,End,NodeList,Reason"


def busy_loop() -> None:
    while True:
        pass


def one_run(cluster, index: int, steps: int, evidence: Path) -> tuple[int, str, str, str]:  # noqa: ANN001
    """The attempts `status` shows, the supervisor's last decision, Slurm's state of the last attempt (its batch
    script's) and the state `status` reports."""
    from clusterkit import runtime
    from clusterkit.jobs.spec import job_from_dict
    from clusterkit.jobs.submit import submit

    workdir = Path(tempfile.mkdtemp(prefix=f"ck-bench-limit-{index}-"))
    (workdir / "examples").symlink_to(REPO / "examples")
    workdir.chmod(0o777)
    spec = job_from_dict({
        "name": "bench-time-limit", "instance": "local", "nodes": 2, "processes_per_node": 1,
        "launcher": "torchrun", "command": ["examples/train_resilient.py"], "checkpoint_dir": "run",
        "supervise": True, "max_restarts": 1, "time": "1", "signal": "USR1@30", "logs": {"output": "train_%j.out"},
        "env": {"TRAIN_STEPS": str(steps), "STEP_SECONDS": "0.5", "CHECKPOINT_EVERY": "100000"},
    })
    handle = submit(spec, cluster.name, workdir=workdir)
    handle.wait(timeout=3600, poll=2)
    shown = subprocess.run([sys.executable, "-m", "clusterkit", "status", handle.job_id, "--cluster", cluster.name,
                            "-o", "json"], capture_output=True, text=True, timeout=120)
    status = json.loads(shown.stdout) if shown.returncode == 0 else {"state": f"error: {shown.stderr.strip()}",
                                                                      "attempts": []}
    made = runtime.read_decisions(workdir / "run" / runtime.STATE_DIR_NAME / runtime.DECISIONS_FILE)
    sacct = cluster.slurm().run("sacct", "-D", "-X", "-P", "-o", SACCT_FIELDS, "-j", handle.job_id,
                                check=False).stdout
    kept = evidence / f"run{index}-job{handle.job_id}"
    kept.mkdir(parents=True)
    (kept / "sacct.txt").write_text(sacct)
    (kept / "decisions.jsonl").write_text("".join(json.dumps(d) + "\n" for d in made))
    (kept / "status.json").write_text(json.dumps(status, indent=2) + "\n")
    (kept / "train.out").write_text(handle.stdout())
    last = str(made[-1].get("decision")) if made else "none"
    slurm_said = (f"{status['attempts'][-1]['state']} {status['attempts'][-1]['exit_code']}".strip()
                  if status["attempts"] else "none")
    return len(status["attempts"]), last, slurm_said, str(status["state"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of the scenario (default 10)")
    parser.add_argument("--busy", type=int, default=2, help="busy loops beside the runs (default 2)")
    parser.add_argument("--steps", type=int, default=150, help="training steps of 0.5 s (default 150)")
    parser.add_argument("--evidence", type=Path, default=None, help="where each run's evidence goes (default: a tmp "
                                                                     "directory, printed)")
    options = parser.parse_args()
    evidence = options.evidence or Path(tempfile.mkdtemp(prefix="ck-bench-limit-evidence-"))
    os.environ["CLUSTERKIT_HOME"] = tempfile.mkdtemp(prefix="ck-bench-")
    from clusterkit import ClusterRequest, create_cluster

    cluster = create_cluster(ClusterRequest("bench", provider="local", nodes=4, cpus_per_node=2))
    loops = [multiprocessing.Process(target=busy_loop, daemon=True) for _ in range(options.busy)]
    completed = 0
    try:
        for loop in loops:
            loop.start()
        for index in range(options.runs):
            attempts, last, slurm_said, state = one_run(cluster, index, options.steps, evidence)
            completed += state == "COMPLETED"
            print(f"run {index + 1}: {attempts} attempts, supervisor's last decision {last}, last attempt's batch "
                  f"script {slurm_said}, reported {state}", flush=True)
    finally:
        for loop in loops:
            loop.terminate()
        cluster.delete()
    print(f"evidence: {evidence}")
    print(f"{completed}/{options.runs} COMPLETED")
    return 0 if completed == options.runs else 1


if __name__ == "__main__":
    sys.exit(main())

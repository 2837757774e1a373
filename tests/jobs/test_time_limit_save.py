"""On the real local cluster: the save after a warning (`signal: USR1@90`) gets the time the spec gives it, not
torchrun's own 30 s window after a signal. The ranks' save takes 45 s; torch's window is pinned at 30 s
(TORCH_ELASTIC_SHUTDOWN_TIMEOUT=30, as fixed in the torch versions that do not read the variable: the GPU
recipe's 2.7, Neuron's 2.9), so only the stop request, which reaches the ranks before any signal reaches
torchrun, lets the checkpoint commit. Then the job is requeued and resumes from that checkpoint, with and
without the supervisor.

The warning is sent as slurmctld sends it (to the batch shell: `scancel --batch --signal=USR1`), a few steps into
the training, so that the test does not wait out a time limit: far from the limit, the supervisor takes it for a
preemption (the same save, then a requeue)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from clusterkit import runtime
from clusterkit.jobs.spec import job_from_dict
from clusterkit.jobs.submit import submit
from clusterkit.providers.local import processes
from clusterkit.resilience import CheckpointManager

from tests.conftest import RESILIENT_STEPS

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
SAVE_SECONDS = 45  # longer than torchrun's 30 s window after a signal


def slow_save_spec(name: str, **fields: object) -> dict:
    return {"name": name, "instance": "local", "nodes": 2, "processes_per_node": 1, "launcher": "torchrun",
            "command": ["examples/train_resilient.py"], "checkpoint_dir": "run", "time": "10", "signal": "USR1@90",
            "env": {"TRAIN_STEPS": str(RESILIENT_STEPS), "STEP_SECONDS": "0.5", "CHECKPOINT_EVERY": "100000",
                    "SAVE_SECONDS": str(SAVE_SECONDS), "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "30"},
            "logs": {"output": "train_%j.out"}, **fields}


@pytest.fixture(scope="module")
def slow_saves(local_cluster, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Both jobs, side by side (two nodes each), each warned a few steps in: name -> (handle, workdir, seconds
    from the warning to the saved checkpoint)."""
    runs = {}
    for spec in (slow_save_spec("slow-save"), slow_save_spec("slow-save-supervised", supervise=True)):
        workdir = tmp_path_factory.mktemp(spec["name"])
        (workdir / "examples").symlink_to(REPO / "examples")
        workdir.chmod(0o777)
        runs[spec["name"]] = [submit(job_from_dict(spec), local_cluster.name, workdir=workdir), workdir, None]
    warned = {}
    for name, (handle, _, _) in runs.items():
        processes.wait_until(lambda: "training: world 2, starting" in handle.stdout(), 120, f"{name} to train",
                             interval=0.2)
        time.sleep(2)  # a few steps in
        local_cluster.slurm().run("scancel", "--batch", "--signal=USR1", handle.job_id)
        warned[name] = time.monotonic()
    for name, run in runs.items():
        processes.wait_until(lambda: "checkpoint saved" in run[0].stdout(), 180, f"{name}'s save", interval=0.5)
        run[2] = time.monotonic() - warned[name]
    return {name: tuple(run) for name, run in runs.items()}


def assert_saved_past_torchruns_window_and_resumed(handle, workdir: Path, took: float, digest: str) -> str:
    assert handle.wait(timeout=300, poll=1) == "COMPLETED", handle.stdout()[-3000:]
    log = handle.stdout()
    (stop,) = [line for line in log.splitlines() if "; checkpoint saved" in line]
    assert "on the stop request" in stop, log[-3000:]
    step = int(stop.split("stopping at step ")[1].split()[0])
    assert took >= SAVE_SECONDS > 30, took  # torchrun would have killed the ranks 30 s into their save
    assert "death signal" not in log, log[-3000:]  # torchrun never got a signal
    assert f"resuming from step {step}" in log and len(handle.attempts()) == 2, log[-3000:]
    checkpoint = CheckpointManager(workdir / "run").latest(verify="full")
    assert checkpoint is not None and checkpoint.step == step
    assert (workdir / "run/final_weights.sha256").read_text().strip() == digest
    return log


def test_an_unsupervised_job_saves_for_longer_than_torchruns_window(slow_saves, uninterrupted_digest):
    handle, workdir, took = slow_saves["slow-save"]
    log = assert_saved_past_torchruns_window_and_resumed(handle, workdir, took, uninterrupted_digest)
    assert "asking the step's ranks to save and stop" in log and "requeueing job" in log
    assert "asking the step to save and stop (SIGTERM)" not in log


def test_a_supervised_job_saves_for_longer_than_torchruns_window(slow_saves, uninterrupted_digest):
    handle, workdir, took = slow_saves["slow-save-supervised"]
    log = assert_saved_past_torchruns_window_and_resumed(handle, workdir, took, uninterrupted_digest)
    assert "clusterkit supervisor: asking the ranks to save and stop" in log
    decisions = [entry["decision"] for entry in runtime.read_decisions(workdir / "run/.clusterkit/decisions.jsonl")]
    assert decisions == ["preempted", "completed"], decisions

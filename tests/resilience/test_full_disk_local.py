"""On the real local cluster: a checkpoint file system that fills up mid-run stops the run with the
reason recorded and shown, the last good checkpoint stays loadable, and after space is freed a
resubmission resumes bit-identical."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit import runtime
from clusterkit.jobs.spec import job_from_dict
from clusterkit.jobs.submit import submit
from clusterkit.providers.local import processes
from clusterkit.resilience import CheckpointManager
from tests.conftest import RESILIENT_STEPS as STEPS

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """A job directory whose `run` is a 50 MB tmpfs, mounted after the cluster was created."""
    (tmp_path / "examples").symlink_to(REPO / "examples")
    tmp_path.chmod(0o777)
    run = tmp_path / "run"
    run.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=50m,mode=0777", "tmpfs", str(run)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield tmp_path
    finally:
        subprocess.run(["umount", "--lazy", str(run)], check=True)


def fill(directory: Path) -> Path:
    """Write until the file system says ENOSPC; the filler file, to free the space later."""
    filler = directory / "filler"
    with open(filler, "ab", buffering=0) as stream:
        try:
            while True:
                stream.write(b"\0" * 2**20)
        except OSError as error:
            assert error.errno == 28  # ENOSPC
    return filler


def test_a_full_checkpoint_disk_stops_the_run_with_the_reason_and_a_resubmission_resumes(
        local_cluster, workdir, uninterrupted_digest):
    spec = {"name": "full-disk", "instance": "local", "nodes": 2, "processes_per_node": 1, "launcher": "torchrun",
            "command": ["examples/train_resilient.py"], "checkpoint_dir": "run", "time": "10", "supervise": True,
            "env": {"TRAIN_STEPS": str(STEPS), "STEP_SECONDS": "0.3", "CHECKPOINT_EVERY": "10"},
            "logs": {"output": "train_%j.out"}}
    handle = submit(job_from_dict(spec), local_cluster.name, workdir=workdir)
    processes.wait_until(lambda: "checkpoint at step 10" in handle.stdout(), 120, "the first checkpoint",
                         interval=0.2)
    filler = fill(workdir / "run")
    assert handle.wait(timeout=180, poll=0.5) == "FAILED"

    log = handle.stdout()
    assert "no space left on the device" in log
    assert not re.search(r'File "[^"]*(clusterkit|train_resilient)', log), log[-3000:]  # no traceback of ours
    (decision,) = [d for d in runtime.read_decisions(workdir / "run/.clusterkit/decisions.jsonl")]
    assert decision["decision"] == runtime.CHECKPOINT_STORAGE_FULL and decision["free_bytes"] < 2**20
    status = subprocess.run([sys.executable, "-m", "clusterkit", "status", handle.job_id, "--cluster",
                             local_cluster.name, "--output", "json"], capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert runtime.CHECKPOINT_STORAGE_FULL in json.dumps(json.loads(status.stdout))

    manager = CheckpointManager(workdir / "run")
    last_good = manager.latest()
    assert last_good is not None and last_good.step >= 10
    assert manager.load(last_good)["step"] == last_good.step

    os.unlink(filler)
    again = submit(job_from_dict(spec), local_cluster.name, workdir=workdir)
    assert again.wait(timeout=240, poll=0.5) == "COMPLETED", again.stdout()[-3000:]
    assert f"resuming from step {last_good.step}" in again.stdout()
    assert (workdir / "run/final_weights.sha256").read_text().strip() == uninterrupted_digest
    # The resubmission, as the decision advised, continues the run's history: nothing charged, nothing rewritten.
    made = runtime.read_decisions(workdir / "run/.clusterkit/decisions.jsonl")
    assert [(d["decision"], d["job_id"]) for d in made] == [(runtime.CHECKPOINT_STORAGE_FULL, handle.job_id),
                                                            (runtime.COMPLETED, again.job_id)], made
    assert json.loads((workdir / "run/.clusterkit/supervisor.json").read_text())["failures"] == 0
    earlier = subprocess.run([sys.executable, "-m", "clusterkit", "status", handle.job_id, "--cluster",
                              local_cluster.name, "--output", "json"], capture_output=True, text=True, timeout=60)
    assert [a["classification"] for a in json.loads(earlier.stdout)["attempts"]] == [runtime.CHECKPOINT_STORAGE_FULL]

"""examples/train_resilient.py as one process (no torchrun, no Slurm): a stop signal that arrives
while it is still starting, and a full disk."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from clusterkit.resilience.checkpoint import CheckpointManager

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_resilient.py"


def start(run_dir: Path, **settings: str) -> subprocess.Popen[str]:
    with socket.socket() as probe:  # a free port for the one-process rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), CLUSTERKIT_CHECKPOINT_DIR=str(run_dir), STEP_SECONDS="0")
    env.update(settings)
    return subprocess.Popen([sys.executable, str(EXAMPLE)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler installed for `signum` (SigCgt in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def signalled_before_torch_is_loaded(run_dir: Path) -> subprocess.Popen[str] | None:
    """Start the example and send SIGUSR1 as soon as it has a handler for it; the process, or None
    if torch was already loaded by then (the handler came late, or this poll did)."""
    process = start(run_dir, TRAIN_STEPS="1000")
    deadline = time.monotonic() + 60
    while not catches(process.pid, signal.SIGUSR1):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.0005)
    if "libtorch" in Path(f"/proc/{process.pid}/maps").read_text():
        process.kill()
        process.communicate()
        return None
    process.send_signal(signal.SIGUSR1)
    return process


def test_a_stop_signal_during_start_up_ends_in_a_checkpoint(tmp_path: Path) -> None:
    # The handler comes about 60 ms before torch's libraries load here; three tries, so that one
    # slow poll on a busy machine does not fail the test.
    for _ in range(3):
        process = signalled_before_torch_is_loaded(tmp_path)
        if process is not None:
            break
    else:
        raise AssertionError("the example installs its stop handler only after importing torch")
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert "stopping at step 1 on a signal; checkpoint saved" in stdout
    checkpoint = CheckpointManager(tmp_path).latest(verify="full")
    assert checkpoint is not None and checkpoint.step == 1


def test_a_full_disk_ends_the_run_with_one_line(tiny_filesystem: Path) -> None:
    with open(tiny_filesystem / "filler", "wb", buffering=0) as filler:  # leave no room for a checkpoint
        try:
            while True:
                filler.write(b"\0" * 4096)
        except OSError:
            pass
    process = start(tiny_filesystem / "run", TRAIN_STEPS="3", CHECKPOINT_EVERY="1")
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 1
    assert stderr.strip().splitlines() == [stderr.strip()], stderr  # one line, no traceback
    assert "no space left on the device holding" in stderr


def test_checkpoint_every_auto_settles_on_an_interval_and_says_why(tmp_path: Path) -> None:
    process = start(tmp_path, TRAIN_STEPS="60", STEP_SECONDS="0.02", CHECKPOINT_EVERY="auto",
                    CLUSTERKIT_FAILURES_PER_GPU_HOUR="3600")  # a failure every second: saves every few steps
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert "checkpoint at step 11 " in stdout  # the first save, before any cost is measured
    chosen = [line for line in stdout.splitlines() if line.startswith("training: checkpoint every ")]
    assert chosen and "a failure comes every 1 s (3.6e+03 per GPU-hour, $CLUSTERKIT_FAILURES_PER_GPU_HOUR" in chosen[0]
    # The choice moves with the measured step and save times (on a loaded machine, after the last save too): the
    # saves keep to one of the intervals it said.
    said = {int(line.split()[3]) for line in chosen}
    saves = [int(line.split()[3]) for line in stdout.splitlines() if line.startswith("checkpoint at step ")]
    assert len(saves) >= 3 and saves[-1] - saves[-2] in said, (saves, chosen)


def test_step_log_holds_every_step_and_when_it_was_done(tmp_path: Path) -> None:
    # The chaos bench's ground truth (bench/bench_goodput.py): rank 0's own record of each step.
    log = tmp_path / "steps.log"
    before = time.time()
    process = start(tmp_path / "run", TRAIN_STEPS="12", CHECKPOINT_EVERY="5", STEP_LOG=str(log))
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    entries = [(int(step), float(at)) for step, at in (line.split() for line in log.read_text().splitlines())]
    assert [step for step, _ in entries] == list(range(1, 13))
    times = [at for _, at in entries]
    assert before <= times[0] and times == sorted(times) and times[-1] <= time.time()

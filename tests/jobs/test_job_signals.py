"""The time-limit warning, offline: the rendered script (real bash, fake Slurm) asks the running step to
save and stop, through its stop request where its ranks read one and else through scancel, sees the task end
as asked, and requeues the job; a step that ran to its end is not requeued."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterkit import runtime
from clusterkit.jobs.render import render_sbatch

from tests.fakes import FakeSlurm
from tests.jobs.helpers import make_spec

# torchrun that trains until SIGTERM, then exits 1 as torchrun does; scancel that delivers the signal
# to it and to the task's shell (Slurm signals every process of the step); scontrol that records a
# requeue.
TORCHRUN = """#!/bin/bash
echo $$ > "$CK_SHIM_LOG/torchrun.pid"
echo $PPID > "$CK_SHIM_LOG/task.pid"
trap 'echo TERM >> "$CK_SHIM_LOG/torchrun.signals"; exit 1' TERM
sleep 30 &
wait
"""
SCANCEL = """#!/bin/bash
printf '%s\\0' "$@" > "$CK_SHIM_LOG/scancel.argv"
kill -"${1#--signal=}" "$(< "$CK_SHIM_LOG/torchrun.pid")" "$(< "$CK_SHIM_LOG/task.pid")"
"""
# A torchrun whose ranks read stop requests (the real stop_requested()); on the request it "saves" for
# CK_SAVE_SECONDS and exits 0, or with CK_IGNORE_REQUEST keeps on training. A signal ends it with exit 1.
LISTENING_TORCHRUN = f"""#!{sys.executable}
import os, pathlib, signal, sys, time
from clusterkit.resilience import stop_requested
log = pathlib.Path(os.environ["CK_SHIM_LOG"])
def on_signal(*_):
    with open(log / "torchrun.signals", "a") as signals:
        signals.write("TERM\\n")
    sys.exit(1)
signal.signal(signal.SIGTERM, on_signal)
stop_requested()
(log / "task.pid").write_text(str(os.getppid()))
(log / "torchrun.pid").write_text(str(os.getpid()))
deadline = time.monotonic() + float(os.environ.get("CK_TRAIN_SECONDS", "60"))
while time.monotonic() < deadline:
    if not os.environ.get("CK_IGNORE_REQUEST") and stop_requested(min_interval_s=0):
        time.sleep(float(os.environ["CK_SAVE_SECONDS"]))
        (log / "saved").write_text("at the request\\n")
        sys.exit(0)
    time.sleep(0.05)
"""
SCONTROL = """#!/bin/bash
case $1 in
  show) echo localhost ;;
  requeue) echo "$2" > "$CK_SHIM_LOG/requeued" ;;
esac
"""


def install(fake: FakeSlurm, name: str, text: str) -> None:
    path = fake.bin / name
    path.unlink(missing_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def wait_for(path: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("supervised", [False, True])
def test_the_warning_stops_the_step_gracefully_then_requeues(fake_slurm: FakeSlurm, supervised: bool) -> None:
    for name, text in (("torchrun", TORCHRUN), ("scancel", SCANCEL), ("scontrol", SCONTROL)):
        install(fake_slurm, name, text)
    # A checkpoint_dir, so the job has a stop request: this torchrun does not read it, and is signalled at once.
    fields = {"signal": "USR1@60", "time": "10", "nodes": 2, "checkpoint_dir": "run"}
    if supervised:
        # The supervisor's part, as far as the script sees it: it runs the step's shell, and on the
        # warning sends that shell SIGTERM (then would requeue itself).
        install(fake_slurm, "python3", '#!/bin/bash\nwhile [[ $1 != -- ]]; do shift; done; shift\n'
                                       '"$@" & step=$!\ntrap \'kill -TERM $step\' USR1\n'
                                       'wait $step; wait $step; echo "step exit $?" > "$CK_SHIM_LOG/step.exit"\n')
        fields["supervise"] = True
    script = fake_slurm.root / "job.sbatch"
    script.write_text(render_sbatch(make_spec(**fields)))
    env = {"PATH": str(fake_slurm.bin), "HOME": str(fake_slurm.root), "CK_SHIM_LOG": str(fake_slurm.log),
           "CK_SRUN_COPIES": "1", "SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "localhost"}
    batch = subprocess.Popen(["/bin/bash", str(script)], cwd=fake_slurm.root, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        wait_for(fake_slurm.log / "torchrun.pid")
        batch.send_signal(signal.SIGUSR1)  # Slurm's --signal=B:USR1@60
        wait_for(fake_slurm.log / ("step.exit" if supervised else "requeued"))
    finally:
        os.killpg(batch.pid, signal.SIGKILL)  # the script waits for Slurm to end it after a requeue
        output = batch.communicate(timeout=10)[0]
    assert "asking the step's ranks" not in output
    assert (fake_slurm.log / "scancel.argv").read_text().split("\0")[:-1] == ["--signal=TERM", "42"]
    assert (fake_slurm.log / "torchrun.signals").read_text() == "TERM\n"  # once
    assert "the task stopped as asked (exit " in output  # torchrun's 1, or the signal's 143 if bash lost it
    if supervised:
        assert (fake_slurm.log / "step.exit").read_text() == "step exit 0\n"
    else:
        assert (fake_slurm.log / "requeued").read_text() == "42\n"
        assert "requeueing job 42" in output


def run_warned(fake: FakeSlurm, torchrun: str, warn_after: str, done: str, **env: str) -> tuple[str, float, int]:
    """Run the rendered script of an unsupervised 2-node torchrun job with `signal: USR1@20` (its ranks get
    20 - 15 = 5 s to answer the request), send it the warning once `warn_after` appears in the shim log, and
    wait for `done` there (or for the script's end): the script's output, the seconds from the warning to
    `done`, and the script's exit status (None while it waits for Slurm to end it after a requeue)."""
    for name, text in (("torchrun", torchrun), ("scancel", SCANCEL), ("scontrol", SCONTROL)):
        install(fake, name, text)
    fake.link("rm", shutil.which("rm") or "/bin/rm")  # the script removes an earlier attempt's request
    script = fake.root / "job.sbatch"
    script.write_text(render_sbatch(make_spec(signal="USR1@20", time="10", nodes=2, checkpoint_dir="run")))
    batch = subprocess.Popen(["/bin/bash", str(script)], cwd=fake.root, text=True, start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env={"PATH": str(fake.bin), "HOME": str(fake.root),
                                  "CK_SHIM_LOG": str(fake.log), "CK_SRUN_COPIES": "1", "SLURM_JOB_ID": "42",
                                  "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "localhost", **env})
    try:
        wait_for(fake.log / warn_after)
        batch.send_signal(signal.SIGUSR1)  # Slurm's --signal=B:USR1@20
        warned = time.monotonic()
        deadline = warned + 30
        while not (fake.log / done).exists() and batch.poll() is None:
            assert time.monotonic() < deadline, f"{done} never appeared"
            time.sleep(0.05)
        took = time.monotonic() - warned
        code = batch.poll()
    finally:
        if batch.poll() is None:
            os.killpg(batch.pid, signal.SIGKILL)  # the script waits for Slurm to end it after a requeue
        output = batch.communicate(timeout=10)[0]
    return output, took, code


def test_ranks_that_read_stop_requests_save_past_torchruns_window_with_no_signal(fake_slurm: FakeSlurm) -> None:
    # The save takes 3 s of the 5 the request leaves; torchrun never gets a signal, so its own window (30 s in the
    # torch versions without TORCH_ELASTIC_SHUTDOWN_TIMEOUT) cannot cut it short.
    output, _, _ = run_warned(fake_slurm, LISTENING_TORCHRUN, "torchrun.pid", "requeued", CK_SAVE_SECONDS="3")
    assert (fake_slurm.log / "saved").read_text() == "at the request\n"
    assert not (fake_slurm.log / "scancel.argv").exists() and not (fake_slurm.log / "torchrun.signals").exists()
    assert "asking the step's ranks to save and stop (run/.clusterkit/stop-request); SIGTERM in 5 s" in output
    assert (fake_slurm.log / "requeued").read_text() == "42\n"
    assert (fake_slurm.root / "run/.clusterkit/stop-request.taken").exists()


def test_ranks_that_do_not_answer_the_request_in_time_are_signalled(fake_slurm: FakeSlurm) -> None:
    output, took, _ = run_warned(fake_slurm, LISTENING_TORCHRUN, "torchrun.pid", "requeued", CK_IGNORE_REQUEST="1")
    assert (fake_slurm.log / "torchrun.signals").read_text() == "TERM\n"
    assert (fake_slurm.log / "scancel.argv").read_text().split("\0")[:-1] == ["--signal=TERM", "42"]
    assert 5 <= took < 15, took  # the request's 5 s, then the signal
    assert "the step still runs 5 s after the stop request" in output and "requeueing job 42" in output


def test_a_step_that_runs_to_its_end_after_the_warning_is_not_requeued(fake_slurm: FakeSlurm) -> None:
    # Its training ends 2 s after the warning (the last steps, a slow teardown): it never takes the request.
    output, _, code = run_warned(fake_slurm, LISTENING_TORCHRUN, "torchrun.pid", "requeued", CK_IGNORE_REQUEST="1",
                                 CK_TRAIN_SECONDS="2")
    assert code == 0, output
    assert not (fake_slurm.log / "requeued").exists() and not (fake_slurm.log / "scancel.argv").exists()
    assert "the step ended by itself (exit 0) before the warning stopped it: no requeue" in output


@pytest.mark.parametrize(("fields", "expected"), [
    ({"signal": "USR1@90", "supervise": True}, {"signal_lead": 90.0, "max_time_limit_requeues": 100,
                                                  "max_preemptions": -1}),
    ({"supervise": {"max_time_limit_requeues": 3, "max_preemptions": 0}},
     {"signal_lead": None, "max_time_limit_requeues": 3, "max_preemptions": 0}),
])
def test_the_supervisor_is_told_the_warnings_lead_and_its_budgets(fields: dict, expected: dict) -> None:
    """The lead tells a time limit from a preemption; the bounds reach the supervisor as the spec says."""
    script = render_sbatch(make_spec(**fields))
    line = next(line for line in script.splitlines() if runtime.SUPERVISOR_MODULE in line)
    words = shlex.split(line.rstrip("\\"))
    parsed = runtime.supervisor_parser().parse_args(words[words.index(runtime.SUPERVISOR_MODULE) + 1:-1])
    assert {name: getattr(parsed, name) for name in expected} == expected

"""The time-limit warning, offline: the rendered script (real bash, fake Slurm) asks the running step to
save and stop through scancel, sees the task end as asked, and requeues the job."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
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
    fields = {"signal": "USR1@60", "time": "10", "nodes": 2}
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
    assert (fake_slurm.log / "scancel.argv").read_text().split("\0")[:-1] == ["--signal=TERM", "42"]
    assert (fake_slurm.log / "torchrun.signals").read_text() == "TERM\n"  # once
    assert "the task stopped as asked (exit " in output  # torchrun's 1, or the signal's 143 if bash lost it
    if supervised:
        assert (fake_slurm.log / "step.exit").read_text() == "step exit 0\n"
    else:
        assert (fake_slurm.log / "requeued").read_text() == "42\n"
        assert "requeueing job 42" in output


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

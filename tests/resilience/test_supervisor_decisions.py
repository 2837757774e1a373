"""The supervisor's decisions with real step processes and a scripted Slurm (no daemons)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from clusterkit import runtime
from clusterkit.resilience import supervisor as supervisor_module
from clusterkit.resilience.run_state import Budget, RunState
from clusterkit.resilience.supervisor import Supervisor

from tests.fakes import ScriptedSlurm


@pytest.fixture(autouse=True)
def in_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    monkeypatch.setattr(supervisor_module.time, "sleep", lambda _: None)  # the wait after a requeue


def supervise(tmp_path: Path, step: str, slurm: ScriptedSlurm, **settings: object) -> tuple[int, list[dict]]:
    options = {"max_restarts": 3, "app_retries": 1, "hang_timeout": 0, "health_timeout": 10, "precheck": False}
    options.update(settings)
    supervisor = Supervisor([sys.executable, "-c", step], tmp_path / "state", slurm=slurm, **options)
    code = supervisor.run()
    return code, runtime.read_decisions(tmp_path / "state" / "decisions.jsonl")


def budget_of(tmp_path: Path) -> Budget:
    return RunState(tmp_path / "state").load()


def test_an_application_error_is_retried_then_stopped_without_requeue(tmp_path):
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    code, made = supervise(tmp_path, "raise SystemExit(3)", slurm)
    assert code == 3
    assert [d["decision"] for d in made] == ["application_error", "application_error"]
    assert "retrying the step (1 of 1)" in made[0]["evidence"] and "stopping" in made[1]["evidence"]
    assert slurm.requeued == [] and slurm.drained == []


def test_a_sick_node_is_drained_with_its_evidence_and_the_job_requeued(tmp_path):
    slurm = ScriptedSlurm(sick={"n2": "GPU 3 fell off the bus"}, queued={"42": "RUNNING"})
    code, made = supervise(tmp_path, "raise SystemExit(1)", slurm)
    assert [d["decision"] for d in made] == ["node_failure"] and made[0]["nodes"] == ["n2"]
    assert slurm.drained == [("n2", "clusterkit: injected-fault: GPU 3 fell off the bus")]
    assert slurm.requeued == ["42"]


def test_a_sick_node_found_beside_the_step_stops_it(tmp_path):
    slurm = ScriptedSlurm(sick={"n1": "EFA 2 of 4"}, queued={"42": "RUNNING"})
    marker = tmp_path / "finished"
    step = f"import time; time.sleep(30); open({str(marker)!r}, 'w')"
    code, made = supervise(tmp_path, step, slurm, precheck=True)
    assert made[0]["decision"] == "node_failure" and "the check beside the step" in made[0]["evidence"]
    assert "EFA 2 of 4" in made[0]["evidence"] and made[0]["nodes"] == ["n1"]
    assert not marker.exists() and slurm.requeued == ["42"] and slurm.drained == [("n1", "clusterkit: "
                                                                                       "injected-fault: EFA 2 of 4")]


def test_the_check_beside_the_step_does_not_hold_a_healthy_step_up(tmp_path):
    code, made = supervise(tmp_path, "raise SystemExit(0)", ScriptedSlurm(queued={"42": "RUNNING"}), precheck=True)
    assert code == 0 and [d["decision"] for d in made] == ["completed"]


def test_a_hang_is_detected_by_heartbeats_and_the_step_retried(tmp_path):
    marker = tmp_path / "hung-once"
    step = (f"import os, time, pathlib\nfrom clusterkit.resilience import heartbeat\n"
            f"m = pathlib.Path({str(marker)!r})\n"
            f"if m.exists(): raise SystemExit(0)\n"
            f"m.write_text('x'); heartbeat(7, min_interval_s=0); time.sleep(120)\n")
    code, made = supervise(tmp_path, step, ScriptedSlurm(queued={"42": "RUNNING"}), hang_timeout=1)
    assert code == 0
    assert [d["decision"] for d in made] == ["hang", "completed"]
    assert "made no progress past step 7" in made[0]["evidence"]


def test_a_restart_beyond_the_budget_stops(tmp_path, monkeypatch):
    state = RunState(tmp_path / "state")
    state.open()
    state.save(Budget(failures=3, attempts_seen=["42.0", "42.1", "42.2", "42.3"]))
    monkeypatch.setenv("SLURM_RESTART_COUNT", "4")
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    slurm.attempts["42"] = ["NODE_FAIL"] * 4 + ["RUNNING"]  # Slurm requeued attempt 3 after a node failure
    code, made = supervise(tmp_path, "raise SystemExit(0)", slurm)
    assert code == 1 and [(d["decision"], d["attempt"]) for d in made] == [("node_failure", "42.3"),
                                                                           ("budget_exhausted", "42.4")]
    assert "restart budget of 3 is spent" in made[-1]["evidence"]


def test_no_node_is_judged_while_slurm_ends_the_job(tmp_path):
    slurm = ScriptedSlurm(sick={"n1": "unreachable"}, queued={"42": "COMPLETING"})
    code, made = supervise(tmp_path, "raise SystemExit(1)", slurm)
    assert [d["decision"] for d in made] == ["terminated"]
    assert slurm.drained == [] and slurm.requeued == []


WAIT_FOR_THE_SIGNAL = ("import os, signal, sys, time\n"
                       "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # 'saves', then leaves\n"
                       "os.kill(os.getppid(), signal.SIGUSR1)\n"
                       "time.sleep(60)\n")


def test_a_warning_before_the_time_limit_is_a_planned_requeue_not_a_failure(tmp_path):
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    slurm.seconds_left = 58  # the warning came 60 s before the limit, as --signal=B:USR1@60 asks
    code, made = supervise_with_signals(tmp_path, WAIT_FOR_THE_SIGNAL, slurm, signal_lead=60, max_restarts=0)
    assert [d["decision"] for d in made] == ["time_limit"] and slurm.requeued == ["42"]
    assert "with 58 s left" in made[0]["evidence"]
    budget = budget_of(tmp_path)
    assert (budget.failures, budget.time_limit_requeues) == (0, 1)  # max_restarts 0 did not stop it


def test_a_warning_far_from_the_limit_is_a_preemption_without_a_bound(tmp_path):
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    slurm.seconds_left = 3 * 3600
    for _ in range(3):
        code, made = supervise_with_signals(tmp_path, WAIT_FOR_THE_SIGNAL, slurm, signal_lead=60)
    assert [d["decision"] for d in made] == ["preempted"] * 3 and budget_of(tmp_path).preemptions == 3


def test_the_next_attempt_after_a_planned_requeue_spends_nothing(tmp_path, monkeypatch):
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    slurm.seconds_left = 50
    supervise_with_signals(tmp_path, WAIT_FOR_THE_SIGNAL, slurm, signal_lead=60)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    code, made = supervise(tmp_path, "raise SystemExit(0)", slurm, max_restarts=0)
    assert code == 0 and [d["decision"] for d in made] == ["time_limit", "completed"]
    assert budget_of(tmp_path).attempts_seen == ["42.0", "42.1"] and budget_of(tmp_path).failures == 0


def test_an_attempt_slurm_ended_with_node_fail_spends_the_failure_budget(tmp_path, monkeypatch):
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    state = RunState(tmp_path / "state")
    state.open()
    state.save(Budget(attempts_seen=["42.0"]))
    slurm.attempts["42"] = ["NODE_FAIL", "RUNNING"]
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    code, made = supervise(tmp_path, "raise SystemExit(0)", slurm)
    assert [(d["decision"], d["attempt"]) for d in made] == [("node_failure", "42.0"), ("completed", "42.1")]
    assert budget_of(tmp_path).failures == 1


def test_a_time_limit_bound_stops_endless_requeues(tmp_path):
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    slurm.seconds_left = 30
    code, made = supervise_with_signals(tmp_path, WAIT_FOR_THE_SIGNAL, slurm, signal_lead=60,
                                        max_time_limit_requeues=0)
    assert code == 1 and [d["decision"] for d in made] == ["budget_exhausted"] and slurm.requeued == []
    assert "bound on time-limit requeues of 0" in made[0]["evidence"]


def supervise_with_signals(tmp_path: Path, step: str, slurm: ScriptedSlurm, **settings: object):
    """`supervise`, with the supervisor's USR1 handler installed as its main() installs it."""
    import signal as signals
    import threading

    options = {"max_restarts": 3, "app_retries": 1, "hang_timeout": 0, "health_timeout": 10, "precheck": False}
    options.update(settings)
    supervisor = Supervisor([sys.executable, "-c", step], tmp_path / "state", slurm=slurm, **options)
    previous = signals.signal(signals.SIGUSR1,
                              lambda *_: threading.Thread(target=supervisor.warned, daemon=True).start())
    try:
        code = supervisor.run()
    finally:
        signals.signal(signals.SIGUSR1, previous)
    return code, runtime.read_decisions(tmp_path / "state" / "decisions.jsonl")


@pytest.mark.parametrize("saves", [True, False])
def test_the_evidence_of_a_requeue_says_whether_the_step_saved(tmp_path, saves: bool):
    checkpoints = tmp_path / "run"
    (checkpoints / "step-00000005").mkdir(parents=True)
    on_stop = f"os.mkdir({str(checkpoints / 'step-00000007')!r}); sys.exit(0)" if saves else "sys.exit(1)"
    step = WAIT_FOR_THE_SIGNAL.replace("lambda *_: sys.exit(0)", f"lambda *_: exec({on_stop!r})")
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    slurm.seconds_left = 58
    code, made = supervise_with_signals(tmp_path, step, slurm, signal_lead=60, checkpoint_dir=checkpoints)
    assert [d["decision"] for d in made] == ["time_limit"]
    if saves:
        assert "the step saved step-00000007 (exit 0)" in made[0]["evidence"]
    else:
        assert "exited 1 with no new checkpoint; the next attempt repeats the steps since step-00000005" \
            in made[0]["evidence"]


def test_a_step_that_finished_before_the_warning_was_passed_on_is_complete(tmp_path, monkeypatch):
    # The warning lands just after the last step: the step exits 0 by itself before the supervisor looks.
    monkeypatch.setattr(supervisor_module, "WATCH_S", 30.0)
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    slurm.seconds_left = 58
    step = "import os, signal, time\nos.kill(os.getppid(), signal.SIGUSR1)\ntime.sleep(1)\n"
    code, made = supervise_with_signals(tmp_path, step, slurm, signal_lead=60)
    assert code == 0 and [d["decision"] for d in made] == ["completed"], made
    assert "it finished before the warning was passed on" in made[0]["evidence"]
    assert slurm.requeued == [] and budget_of(tmp_path).time_limit_requeues == 0


FINISHED_THEN_WARNED = ("import os, signal, time\n"
                        "from clusterkit.resilience import heartbeat\n"
                        "heartbeat(150, done=True)  # every rank (one here) finished its training\n"
                        "os.kill(os.getppid(), signal.SIGUSR1)\n"
                        "time.sleep(60)  # still tearing down (torchrun's exit barrier) when SIGTERM comes\n")


def test_a_step_stopped_after_every_rank_finished_is_complete_not_requeued(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    slurm.seconds_left = 58
    code, made = supervise_with_signals(tmp_path, FINISHED_THEN_WARNED, slurm, signal_lead=60)
    assert code == 0 and [d["decision"] for d in made] == ["completed"], made
    assert "every rank finished its training" in made[0]["evidence"]
    assert slurm.requeued == [] and budget_of(tmp_path).time_limit_requeues == 0


def test_a_step_stopped_before_every_rank_finished_is_requeued(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # rank 1 never said it was done
    monkeypatch.setenv("RANK", "0")
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    slurm.seconds_left = 58
    code, made = supervise_with_signals(tmp_path, FINISHED_THEN_WARNED, slurm, signal_lead=60)
    assert [d["decision"] for d in made] == ["time_limit"] and slurm.requeued == ["42"]


def test_an_attempt_of_a_run_that_completed_completes_without_starting_the_step(tmp_path, monkeypatch):
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    supervise(tmp_path, "raise SystemExit(0)", slurm)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # requeued anyway (a late requeue, an admin)
    marker = tmp_path / "started"
    code, made = supervise(tmp_path, f"open({str(marker)!r}, 'w')", slurm)
    assert code == 0 and not marker.exists()
    assert [(d["decision"], d["attempt"]) for d in made] == [("completed", "42.0"), ("completed", "42.1")]
    assert "attempt 42.0 completed the run; the step is not started again" in made[1]["evidence"]
    assert budget_of(tmp_path).failures == 0


def test_a_step_that_never_sends_a_heartbeat_is_a_hang_after_the_startup_timeout(tmp_path):
    marker = tmp_path / "stuck-once"
    step = (f"import pathlib, time\nm = pathlib.Path({str(marker)!r})\n"
            f"if m.exists(): raise SystemExit(0)\n"
            f"m.write_text('x'); time.sleep(120)  # stuck in the rendezvous, no heartbeat ever\n")
    code, made = supervise(tmp_path, step, ScriptedSlurm(queued={"42": "RUNNING"}), hang_timeout=0,
                           startup_timeout=2)
    assert code == 0 and [d["decision"] for d in made] == ["hang", "completed"], made
    assert "no rank sent a heartbeat within 2 s of the step's start" in made[0]["evidence"]
    assert budget_of(tmp_path).failures == 1


@pytest.mark.parametrize(("hang_timeout", "startup_timeout", "bound"),
                         [(0, None, 0), (8, None, 1800), (1000, None, 3000), (8, 60, 60), (600, 0, 0)])
def test_the_startup_bound_defaults_only_where_heartbeats_are_expected(hang_timeout, startup_timeout, bound):
    assert runtime.startup_timeout_for(hang_timeout, startup_timeout) == bound


def storage_full_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm: ScriptedSlurm) -> list[dict]:
    """Job 41 stops with checkpoint_storage_full (its disk full before the step); its decisions."""
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    with monkeypatch.context() as full:
        full.setattr(Supervisor, "storage_full", lambda self: "0.5 MiB free of 50 MiB on run")
        code, made = supervise(tmp_path, "raise SystemExit(0)", slurm)
    assert code == 1 and [d["decision"] for d in made] == ["checkpoint_storage_full"]
    return made


def test_a_resubmission_after_the_supervisors_own_stop_keeps_history_and_charges_nothing(tmp_path, monkeypatch):
    from clusterkit.jobs.attempts import merge_attempts
    from clusterkit.slurm import AccountingRecord

    slurm = ScriptedSlurm(queued={"43": "RUNNING"})
    slurm.attempts["41"] = ["FAILED"]
    storage_full_once(tmp_path, monkeypatch, slurm)
    monkeypatch.setenv("SLURM_JOB_ID", "43")  # space freed, then resubmitted, as the decision advised
    code, made = supervise(tmp_path, "raise SystemExit(0)", slurm)
    assert code == 0
    assert [(d["decision"], d["attempt"]) for d in made] == [("checkpoint_storage_full", "41.0"),
                                                             ("completed", "43.0")]
    assert budget_of(tmp_path).failures == 0 and budget_of(tmp_path).attempts_seen == ["41.0", "43.0"]
    earlier = merge_attempts("41", [AccountingRecord("41", "j", "FAILED", "1:0", "n1", "T1", "T2")], {}, made)
    assert [a.classification for a in earlier] == ["checkpoint_storage_full"]


def test_a_resubmission_after_slurm_ended_the_run_says_so_and_spends(tmp_path, monkeypatch):
    state = RunState(tmp_path / "state")
    state.open()
    state.save(Budget(attempts_seen=["41.0"]))
    slurm = ScriptedSlurm(queued={"43": "RUNNING"})
    slurm.attempts["41"] = ["NODE_FAIL"]  # not requeued by Slurm; `watch --resubmit` made job 43
    monkeypatch.setenv("SLURM_JOB_ID", "43")
    code, made = supervise(tmp_path, "raise SystemExit(0)", slurm)
    assert [(d["decision"], d["attempt"]) for d in made] == [("node_failure", "41.0"), ("completed", "43.0")]
    assert "attempt 41.0 ended NODE_FAIL and the run was resubmitted as job 43" in made[0]["evidence"]
    assert budget_of(tmp_path).failures == 1


@pytest.fixture
def step_output(tmp_path: Path):
    """The supervisor's stderr (which its step inherits) as a file, as in a Slurm job: the file's path."""
    import os

    path = tmp_path / "job.out"
    saved = os.dup(2)
    with open(path, "wb") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield path
    finally:
        os.dup2(saved, 2)
        os.close(saved)


TORCHRUN_REPORT = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train_resilient.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-01-01_00:00:00
  host      : n2
  rank      : 1 (local_rank: 0)
  exitcode  : -9 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4242
============================================================
"""


@pytest.mark.parametrize(("step", "earlier", "evidence"), [
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "",
     "the step killed by SIGKILL (out of memory?), step exited -9"),
    ("raise SystemExit(137)", "", "the step killed by SIGKILL (out of memory?), step exited 137"),
    (f"import sys; sys.stderr.write({TORCHRUN_REPORT!r}); raise SystemExit(1)", "",
     "rank 1 on n2 killed by SIGKILL (out of memory?), step exited 1"),
    ("import sys; sys.stderr.write('srun: error: n2: task 1: Killed\\n'); raise SystemExit(1)", "",
     "task 1 on n2 killed by SIGKILL (out of memory?), step exited 1"),
    ("raise SystemExit(3)", "srun: error: n1: task 0: Killed\n", "step exited 3 with all nodes healthy"),
], ids=["signal", "shell", "torchrun", "srun", "an-earlier-step"])
def test_a_rank_killed_by_sigkill_is_named_not_exited_1(tmp_path, step_output, step: str, earlier: str,
                                                        evidence: str):
    with open(step_output, "a") as log:  # what an earlier step of the job left in the log
        log.write(earlier)
    code, made = supervise(tmp_path, step, ScriptedSlurm(queued={"42": "RUNNING"}), app_retries=0)
    assert [d["decision"] for d in made] == ["application_error"]
    assert made[0]["evidence"].startswith(evidence), made[0]["evidence"]

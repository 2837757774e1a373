"""The supervisor's decisions: `decide()` against its docstring's table and at each boundary, then with real step
processes and a scripted Slurm (no daemons)."""

from __future__ import annotations

import dataclasses
import re
import sys
import time
from pathlib import Path

import pytest

from clusterkit import runtime
from clusterkit.jobs.recoveries import parse_tries
from clusterkit.resilience import decisions
from clusterkit.resilience import supervisor as supervisor_module
from clusterkit.resilience.decisions import Action, Health, Kind, Outcome, decide
from clusterkit.resilience.run_state import Budget, RunState
from clusterkit.resilience.supervisor import Supervisor

from tests.fakes import ScriptedSlurm

# ----- decide(): one case per row of its docstring's table ---------------------------------------------------------
NODES = ("n1", "n2")
BESIDE = Outcome(None, NODES, bad_nodes=(("n2", "GPU 3 fell off the bus"),))
ENDED = Outcome(143, NODES, terminated=True)
DONE = Outcome(0, NODES)
NEAR = Outcome(0, NODES, signalled=True, asked_to_stop=True, time_left=58, signal_lead=60,
               saved="the step saved step-00000007 (exit 0)")
FAR = dataclasses.replace(NEAR, time_left=3 * 3600)
HUNG = Outcome(None, NODES, hang_evidence="rank 1 on n2 made no progress past step 7 for 601 s")
EXITED = Outcome(3, NODES)
HEALTHY, ENDING, SICK = Health(), Health(job_ending=True), Health(bad_nodes=(("n1", "EFA 2 of 4"),))
BESIDE_SPARE = dataclasses.replace(BESIDE, spares=("n3",))
EXITED_SPARE = dataclasses.replace(EXITED, spares=("n3",))
FULL = Health(storage_full="0.5 MiB free of 50 MiB on /fsx/run", free_bytes=512 << 10)
LEFT = decisions.Budget(max_restarts=3, app_retries=1, max_time_limit_requeues=100, max_preemptions=5)
SPENT = dataclasses.replace(LEFT, failures=3, time_limit_requeues=100, preemptions=5)
APP_SPENT = dataclasses.replace(LEFT, application_failures=1)

TABLE = [  # outcome, health, budget -> decision, action, drained
    (BESIDE_SPARE, HEALTHY, LEFT, Kind.NODE_FAILURE, Action.RELAUNCH, True),
    (BESIDE, HEALTHY, LEFT, Kind.NODE_FAILURE, Action.REQUEUE, True),
    (BESIDE, HEALTHY, SPENT, Kind.BUDGET_EXHAUSTED, Action.STOP, True),
    (ENDED, HEALTHY, LEFT, Kind.TERMINATED, Action.LEAVE, False),
    (DONE, HEALTHY, SPENT, Kind.COMPLETED, Action.FINISH, False),
    (NEAR, HEALTHY, LEFT, Kind.TIME_LIMIT, Action.REQUEUE, False),
    (NEAR, HEALTHY, SPENT, Kind.BUDGET_EXHAUSTED, Action.STOP, False),
    (FAR, HEALTHY, LEFT, Kind.PREEMPTED, Action.REQUEUE, False),
    (FAR, HEALTHY, SPENT, Kind.BUDGET_EXHAUSTED, Action.STOP, False),
    (EXITED, ENDING, LEFT, Kind.TERMINATED, Action.LEAVE, False),
    (HUNG, FULL, LEFT, Kind.CHECKPOINT_STORAGE_FULL, Action.STOP, False),
    (EXITED_SPARE, SICK, LEFT, Kind.NODE_FAILURE, Action.RELAUNCH, True),
    (EXITED, SICK, LEFT, Kind.NODE_FAILURE, Action.REQUEUE, True),
    (HUNG, SICK, SPENT, Kind.BUDGET_EXHAUSTED, Action.STOP, True),
    (HUNG, HEALTHY, LEFT, Kind.HANG, Action.RETRY, False),
    (HUNG, HEALTHY, SPENT, Kind.BUDGET_EXHAUSTED, Action.STOP, False),
    (EXITED, HEALTHY, APP_SPENT, Kind.APPLICATION_ERROR, Action.STOP, False),
    (EXITED, HEALTHY, LEFT, Kind.APPLICATION_ERROR, Action.RETRY, False),
    (EXITED, HEALTHY, SPENT, Kind.BUDGET_EXHAUSTED, Action.STOP, False),
]
_ACTIONS = {"drain, relaunch": (Action.RELAUNCH, True), "drain, requeue": (Action.REQUEUE, True),
            "drain, stop": (Action.STOP, True),
            "leave": (Action.LEAVE, False), "finish": (Action.FINISH, False), "requeue": (Action.REQUEUE, False),
            "stop": (Action.STOP, False), "retry": (Action.RETRY, False)}


def documented_rows() -> list[tuple[str, Kind, Action, bool]]:
    """decide()'s docstring table: (the row as written, decision, action, drained)."""
    text = decide.__doc__ or ""
    lines = text[text.index("outcome "):].split("\n\n")[0].splitlines()[1:]
    rows = []
    for line in lines:
        *inputs, decision, action = re.split(r"\s{2,}", line.strip())
        rows.append((" / ".join(inputs), Kind(decision), *_ACTIONS[action]))
    return rows


def test_each_row_of_the_docstring_table_has_its_case_in_this_order():
    assert [row[1:] for row in documented_rows()] == [case[3:] for case in TABLE]


@pytest.mark.parametrize(("outcome", "health", "budget", "kind", "action", "drained"), TABLE,
                         ids=[row[0] for row in documented_rows()])
def test_decide_follows_its_table(outcome: Outcome, health: Health, budget: decisions.Budget, kind: Kind,
                                  action: Action, drained: bool):
    decision = decide(outcome, budget, health)
    assert (decision.kind, decision.action, bool(decision.drain)) == (kind, action, drained), decision
    assert decision.stopped == (action in (Action.FINISH, Action.STOP))


@pytest.mark.parametrize(("outcome", "health", "budget", "exit_code"), [
    (DONE, HEALTHY, LEFT, 0), (NEAR, HEALTHY, LEFT, 1), (BESIDE, HEALTHY, SPENT, 1), (HUNG, HEALTHY, SPENT, 1),
    (EXITED, HEALTHY, SPENT, 3), (EXITED, HEALTHY, APP_SPENT, 3), (HUNG, FULL, LEFT, 1), (EXITED, FULL, LEFT, 3),
    (ENDED, HEALTHY, LEFT, 143), (dataclasses.replace(ENDED, exit_code=None), HEALTHY, LEFT, 143),
    (Outcome(137, NODES, terminated=True), HEALTHY, LEFT, 137), (HUNG, ENDING, LEFT, 143),
], ids=["completed", "requeue", "node-spent", "hang-spent", "exit-spent", "app-stop", "full-hang", "full-exit",
        "terminated", "terminated-stopped", "terminated-137", "ending-hang"])
def test_the_supervisors_exit_status_is_the_steps_where_it_has_one(outcome: Outcome, health: Health,
                                                                    budget: decisions.Budget, exit_code: int):
    assert decide(outcome, budget, health).exit_code == exit_code


# ----- decide() with spare nodes -------------------------------------------------------------------------------------
def test_a_relaunch_takes_the_healthy_nodes_and_a_spare_for_each_bad_one_and_spends_a_restart():
    outcome = Outcome(1, ("n1", "n2", "n3"), spares=("n4", "n5"))
    sick = Health(bad_nodes=(("n2", "Slurm reports n2 down*"), ("n3", "health check could not run on n3")))
    decision = decide(outcome, LEFT, sick)
    assert decision.action is Action.RELAUNCH and decision.nodes == ("n1", "n4", "n5")
    assert [node for node, _ in decision.drain] == ["n2", "n3"] and decision.budget.failures == LEFT.failures + 1
    assert "relaunching the step on n1,n4,n5 (spare n4,n5) in the same allocation" in decision.evidence


def test_a_bad_spare_is_not_relaunched_onto_and_too_few_spares_requeue():
    outcome = Outcome(None, ("n1", "n2"), spares=("n3", "n4"), bad_nodes=(("n2", "GPU lost"), ("n3", "EFA down")))
    assert decide(outcome, LEFT, HEALTHY).nodes == ("n1", "n4")
    fewer = dataclasses.replace(outcome, spares=("n3",))
    decision = decide(fewer, LEFT, HEALTHY)
    assert decision.action is Action.REQUEUE and decision.nodes == ()
    assert "0 spare(s) left for 1 lost node(s): requeueing" in decision.evidence


def test_a_relaunch_with_the_restart_budget_spent_stops():
    decision = decide(BESIDE_SPARE, SPENT, HEALTHY)
    assert decision.kind is Kind.BUDGET_EXHAUSTED and decision.action is Action.STOP and decision.drain


# ----- decide() at its boundaries ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("outcome", "health", "allowed"), [
    (EXITED, HEALTHY, Kind.APPLICATION_ERROR), (HUNG, HEALTHY, Kind.HANG), (EXITED, SICK, Kind.NODE_FAILURE),
    (BESIDE, HEALTHY, Kind.NODE_FAILURE)], ids=["application", "hang", "bad-node", "bad-node-beside"])
@pytest.mark.parametrize(("failures", "spent"), [(2, False), (3, True)], ids=["one-left", "used-up"])
def test_the_restart_budget_is_spent_when_the_failures_reach_max_restarts(outcome: Outcome, health: Health,
                                                                          allowed: Kind, failures: int, spent: bool):
    decision = decide(outcome, dataclasses.replace(LEFT, failures=failures, app_retries=10), health)  # max_restarts 3
    assert decision.kind is (Kind.BUDGET_EXHAUSTED if spent else allowed) and decision.budget.failures == 3
    assert decision.evidence.endswith("; the restart budget of 3 is spent") == spent


def test_no_restart_at_all_with_a_budget_of_0():
    assert decide(HUNG, decisions.Budget(max_restarts=0, app_retries=1), HEALTHY).kind is Kind.BUDGET_EXHAUSTED


@pytest.mark.parametrize(("before", "action", "words"), [(1, Action.RETRY, "retrying the step (2 of 2)"),
                                                         (2, Action.STOP, "3 times: the application fails; stopping")])
def test_the_application_is_retried_app_retries_times(before: int, action: Action, words: str):
    decision = decide(EXITED, dataclasses.replace(LEFT, app_retries=2, application_failures=before), HEALTHY)
    assert (decision.kind, decision.action, decision.budget.application_failures) == (
        Kind.APPLICATION_ERROR, action, before + 1)
    assert words in decision.evidence
    assert decision.budget.failures == (1 if action is Action.RETRY else 0)  # a stop spends no restart


def test_a_non_zero_exit_counts_against_the_application_even_when_the_budget_is_spent():
    assert decide(EXITED, SPENT, HEALTHY).budget.application_failures == 1


@pytest.mark.parametrize(("requeues", "kind"), [(99, Kind.TIME_LIMIT), (100, Kind.BUDGET_EXHAUSTED)])
def test_time_limit_requeues_stop_at_their_bound(requeues: int, kind: Kind):
    decision = decide(NEAR, dataclasses.replace(LEFT, time_limit_requeues=requeues), HEALTHY)
    assert decision.kind is kind and decision.budget.time_limit_requeues == 100
    if kind is Kind.BUDGET_EXHAUSTED:
        assert "the bound on time-limit requeues of 100 is spent" in decision.evidence


@pytest.mark.parametrize("outcome", [NEAR, FAR], ids=["time-limit", "preemption"])
def test_planned_requeues_spend_no_restart_and_without_a_bound_never_stop(outcome: Outcome):
    budget = dataclasses.replace(SPENT, max_time_limit_requeues=None, max_preemptions=None,
                                 time_limit_requeues=10**6, preemptions=10**6)
    decision = decide(outcome, budget, HEALTHY)
    assert decision.action is Action.REQUEUE and decision.budget.failures == 3  # the restart budget is spent
    assert (decision.budget.time_limit_requeues, decision.budget.preemptions) == (
        (10**6 + 1, 10**6) if outcome is NEAR else (10**6, 10**6 + 1))


@pytest.mark.parametrize(("left", "lead", "kind"), [
    (120, 60, Kind.TIME_LIMIT), (120.5, 60, Kind.PREEMPTED), (0, 60, Kind.TIME_LIMIT),
    (960, None, Kind.TIME_LIMIT), (960.5, None, Kind.PREEMPTED),  # no lead given: 900 s
    (None, 60, Kind.TIME_LIMIT), (None, None, Kind.PREEMPTED),  # the time left unknown
])
def test_a_warning_is_the_time_limits_up_to_its_lead_and_60_s(left: float | None, lead: float | None, kind: Kind):
    assert decide(dataclasses.replace(NEAR, time_left=left, signal_lead=lead), LEFT, HEALTHY).kind is kind


@pytest.mark.parametrize(("outcome", "kind"), [
    (Outcome(0, NODES, signalled=True), Kind.COMPLETED),  # it exited before the warning was passed on
    (Outcome(143, NODES, signalled=True, asked_to_stop=True, finished=True), Kind.COMPLETED),
    (Outcome(0, NODES, signalled=True, asked_to_stop=True), Kind.TIME_LIMIT),  # exit 0 answering our stop
    (Outcome(1, NODES, signalled=True), Kind.TIME_LIMIT),
    (Outcome(3, NODES, finished=True), Kind.APPLICATION_ERROR),  # "done" alone is not complete without our stop
], ids=["exit-0-before", "finished-then-stopped", "stopped", "failed-after-warning", "finished-but-failed"])
def test_complete_is_exit_0_or_every_rank_finished_before_our_stop(outcome: Outcome, kind: Kind):
    decision = decide(dataclasses.replace(outcome, time_left=58, signal_lead=60), LEFT, HEALTHY)
    assert decision.kind is kind, decision


def test_health_is_not_weighed_for_a_step_that_did_not_fail():
    for outcome in (BESIDE, ENDED, DONE, NEAR, FAR):
        assert not outcome.failed
        assert decide(outcome, LEFT, ENDING) == decide(outcome, LEFT, HEALTHY)
    assert HUNG.failed and EXITED.failed


def hang_watcher(tmp_path: Path, hang_timeout: float, startup_timeout: float | None) -> Supervisor:
    return Supervisor(["true"], tmp_path / "state", 3, 1, hang_timeout=hang_timeout, health_timeout=10,
                      precheck=False, slurm=ScriptedSlurm(), startup_timeout=startup_timeout)


def test_no_heartbeat_is_a_hang_only_once_the_startup_timeout_has_passed(tmp_path):
    beats = tmp_path / "beats"
    beats.mkdir()
    watcher = hang_watcher(tmp_path, hang_timeout=0, startup_timeout=30)
    assert watcher._hang_evidence(beats, {}, 1000.0, 1030.0) == ""
    assert "no rank sent a heartbeat within 30 s" in watcher._hang_evidence(beats, {}, 1000.0, 1030.5)
    (beats / "rank-00000.hb").write_text("0 1.000 n1\n")  # a beat: the startup bound no longer applies
    assert watcher._hang_evidence(beats, {}, 1000.0, 5000.0) == ""


def test_a_rank_hangs_once_it_made_no_progress_for_longer_than_the_hang_timeout(tmp_path):
    beats = tmp_path / "beats"
    beats.mkdir()
    (beats / "rank-00001.hb").write_text("7 1.000 n2\n")
    watcher, progress = hang_watcher(tmp_path, hang_timeout=600, startup_timeout=None), {}
    assert watcher._hang_evidence(beats, progress, 0.0, 100.0) == ""  # step 7 first seen at 100
    assert watcher._hang_evidence(beats, progress, 0.0, 700.0) == ""
    assert watcher._hang_evidence(beats, progress, 0.0, 700.5).startswith("rank 1 on n2 made no progress past step 7")
    (beats / "rank-00001.hb").write_text("8 2.000 n2\n")  # progress resets the clock
    assert watcher._hang_evidence(beats, progress, 0.0, 1000.0) == ""


def test_the_requeues_evidence_names_the_newest_checkpoint_past_8_digits(tmp_path):
    checkpoints = tmp_path / "run"
    for name in ("step-99999999", "step-100000000"):
        (checkpoints / name).mkdir(parents=True)
    watcher = Supervisor(["true"], tmp_path / "state", 3, 1, hang_timeout=0, health_timeout=10, precheck=False,
                         slurm=ScriptedSlurm(), checkpoint_dir=checkpoints)
    assert watcher.saved_on_stop(checkpoints / "step-99999999", 0) == "the step saved step-100000000 (exit 0)"


@pytest.fixture(autouse=True)
def in_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    monkeypatch.setattr(supervisor_module, "REQUEUE_WAIT_S", 0.0)  # no Slurm here to end the script


def supervise(tmp_path: Path, step: str, slurm: ScriptedSlurm, **settings: object) -> tuple[int, list[dict]]:
    options = {"max_restarts": 3, "app_retries": 1, "hang_timeout": 0, "health_timeout": 10, "precheck": False,
               "beacons": False}
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
    assert made[0]["decision"] == "node_failure" and "found beside the step" in made[0]["evidence"]
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


def test_each_try_is_recorded_with_where_its_steps_went(tmp_path):
    marker = tmp_path / "hung-once"
    step = (f"import pathlib, time\nfrom clusterkit.resilience.heartbeat import heartbeat, resumed\n"
            f"m = pathlib.Path({str(marker)!r})\n"
            f"if m.exists():\n    resumed(5, 0.25); heartbeat(6, min_interval_s=0); raise SystemExit(0)\n"
            f"m.write_text('x'); heartbeat(6, min_interval_s=0); heartbeat(7, min_interval_s=0); time.sleep(120)\n")
    before = time.time()
    code, made = supervise(tmp_path, step, ScriptedSlurm(queued={"42": "RUNNING"}), hang_timeout=1)
    assert code == 0 and [d["decision"] for d in made] == ["hang", "completed"]
    tries = parse_tries(runtime.read_decisions(tmp_path / "state" / runtime.TRIES_FILE))
    assert [(t.attempt, t.number, t.first_step, t.last_step, t.resumed_from) for t in tries] == [
        ("42.0", 0, 6, 7, None), ("42.0", 1, 6, 6, 5)]
    hung, retried = tries
    assert before <= hung.started <= hung.first_time <= hung.last_time <= hung.ended <= retried.started
    assert retried.load_seconds == 0.25 and retried.nodes == ("n1", "n2")


def test_a_try_whose_supervisor_died_with_its_node_is_ended_by_the_next_attempt(tmp_path, monkeypatch):
    state = RunState(tmp_path / "state")
    state.open()
    state.save(Budget(attempts_seen=["42.0"]))
    state.append_try({"attempt": "42.0", "try": 0, "event": "started", "time": 1.0, "nodes": ["n1", "n2"]})
    beats = tmp_path / "state" / runtime.HEARTBEATS_DIR_NAME / "42.0.0"
    beats.mkdir(parents=True)
    (beats / "rank-00000.hb").write_text("12 2.5 n1")
    (beats / "rank-00001.hb").write_text("11 2.4 n2")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    slurm.attempts["42"] = ["NODE_FAIL", "RUNNING"]
    slurm.node_states = {"n1": ("down", "clusterkit agent: n1's liveness beacon silent for 4 s"),
                         "n2": ("drain", "Kill task failed")}  # Slurm's own drain of a node let go of: not ours
    code, made = supervise(tmp_path, "raise SystemExit(0)", slurm)
    assert code == 0
    failure = made[0]
    assert (failure["decision"], failure["attempt"], failure["nodes"], failure["marked_down"]) == (
        "node_failure", "42.0", ["n1"], ["n1"])
    assert failure["evidence"].endswith("n1: clusterkit agent: n1's liveness beacon silent for 4 s")
    assert failure["acted_at"] == "2027-01-15T08:00:07"  # when the agent marked it: the reason's time
    ended = parse_tries(runtime.read_decisions(tmp_path / "state" / runtime.TRIES_FILE))[0]
    assert (ended.attempt, ended.ended, ended.last_step, ended.last_time) == ("42.0", None, 12, 2.5)


def test_a_supervisor_whose_attempt_was_superseded_leaves_without_judging_anything(tmp_path):
    # Its node was cut off long enough for Slurm to requeue the job, then came back: the nodes and the budget are
    # the new attempt's now.
    slurm = ScriptedSlurm(sick={"n2": "GPU 3 fell off the bus"}, queued={"42": "RUNNING"})
    slurm.details = {"JobId": "42", "JobState": "RUNNING", "Restarts": "1", "BatchHost": "n3"}
    code, made = supervise(tmp_path, "raise SystemExit(1)", slurm)
    assert made == [] and slurm.drained == [] and slurm.requeued == [] and budget_of(tmp_path).failures == 0
    slurm.details["Restarts"] = "0"  # still the job's attempt: it judges as ever
    code, made = supervise(tmp_path, "raise SystemExit(1)", slurm)
    assert [d["decision"] for d in made] == ["node_failure"] and slurm.requeued == ["42"]


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

    options = {"max_restarts": 3, "app_retries": 1, "hang_timeout": 0, "health_timeout": 10, "precheck": False,
               "beacons": False}
    options.update(settings)
    supervisor = Supervisor([sys.executable, "-c", step], tmp_path / "state", slurm=slurm, **options)
    previous = signals.signal(signals.SIGUSR1,
                              lambda *_: threading.Thread(target=supervisor.warned, daemon=True).start())
    try:
        code = supervisor.run()
    finally:
        signals.signal(signals.SIGUSR1, previous)
    return code, runtime.read_decisions(tmp_path / "state" / "decisions.jsonl")


# A step whose ranks read stop requests: on the request it "saves" for SAVE seconds and exits 0 (or, with IGNORE,
# keeps on training); a signal ends it with exit 7. It says how long after the warning it ended.
LISTENS = ("import os, signal, sys, time\n"
           "from clusterkit.resilience import stop_requested\n"
           "SAVE, IGNORE, OUT = {save}, {ignore}, {out!r}\n"
           "def leave(code):\n"
           "    open(OUT, 'w').write(f'{{code}} {{time.monotonic() - warned:.1f}}')\n"
           "    sys.exit(code)\n"
           "signal.signal(signal.SIGTERM, lambda *_: leave(7))\n"
           "stop_requested()  # the first look: the ranks listen\n"
           "warned = time.monotonic()\n"
           "os.kill(os.getppid(), signal.SIGUSR1)\n"
           "while IGNORE or not stop_requested(min_interval_s=0):\n"
           "    time.sleep(0.05)\n"
           "time.sleep(SAVE)\n"
           "leave(0)\n")


def test_ranks_that_read_stop_requests_get_the_time_left_to_save_and_no_signal(tmp_path):
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    slurm.seconds_left = 58  # 43 s for the save once the requeue's margin is kept
    step = LISTENS.format(save=3, ignore=False, out=str(tmp_path / "ended"))
    code, made = supervise_with_signals(tmp_path, step, slurm, signal_lead=60)
    ended, after = (tmp_path / "ended").read_text().split()
    assert ended == "0" and float(after) >= 3  # saved, and not signalled
    assert [d["decision"] for d in made] == ["time_limit"] and made[0]["exit_code"] == 0
    assert slurm.requeued == ["42"]


def test_ranks_that_do_not_answer_the_request_in_time_get_sigterm(tmp_path):
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    slurm.seconds_left = 20  # 5 s for the request
    step = LISTENS.format(save=0, ignore=True, out=str(tmp_path / "ended"))
    code, made = supervise_with_signals(tmp_path, step, slurm, signal_lead=60)
    ended, after = (tmp_path / "ended").read_text().split()
    assert ended == "7" and 5 <= float(after) < 15, after
    assert [d["decision"] for d in made] == ["time_limit"] and made[0]["exit_code"] == 7


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

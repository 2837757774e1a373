"""Every attempt of a job, merged from accounting, the controller and the supervisor's decisions."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.jobs.attempts import merge_attempts
from clusterkit.providers.local import processes
from clusterkit.providers.local.replacer import LOG_NAME
from clusterkit.slurm import AccountingRecord


def record(state: str, start: str, nodes: str = "n[1-2]") -> AccountingRecord:
    return AccountingRecord("9", "train", state, "0:0", nodes, start, "")


def controller(state: str, restarts: int, start: str) -> dict[str, str]:
    return {"JobId": "9", "JobState": state, "Restarts": str(restarts), "StartTime": start, "EndTime": "",
            "NodeList": "n[3-4]", "ExitCode": "0:0"}


def summary(attempts) -> list[tuple[int, str, str]]:  # noqa: ANN001
    return [(a.attempt, a.state, a.classification) for a in attempts]


def test_right_after_the_end_the_controller_fills_in_what_accounting_has_not_written_yet() -> None:
    merged = merge_attempts("9", [], controller("COMPLETED", 0, "T1"), [])
    assert summary(merged) == [(0, "COMPLETED", "completed")]
    assert merged[0].nodes == "n[3-4]"


def test_an_attempt_accounting_lost_still_shows() -> None:
    # Two nodes failed at once: accounting kept only the attempt that completed.
    merged = merge_attempts("9", [record("COMPLETED", "T2")], controller("COMPLETED", 1, "T2"), [])
    assert summary(merged) == [(0, "unknown", "requeued (not in accounting)"), (1, "COMPLETED", "completed")]


def test_the_supervisor_says_why_an_attempt_ended_even_without_its_record() -> None:
    made = [{"attempt": "9.0", "decision": "node_failure"}]
    merged = merge_attempts("9", [record("COMPLETED", "T2")], controller("COMPLETED", 1, "T2"), made)
    assert summary(merged)[0] == (0, "unknown", "node_failure")


def test_planned_requeues_are_named_by_their_cause() -> None:
    made = [{"attempt": "9.0", "decision": "time_limit"}, {"attempt": "9.1", "decision": "preempted"}]
    accounting = [record("REQUEUED", "T1"), record("REQUEUED", "T2"), record("RUNNING", "T3")]
    merged = merge_attempts("9", accounting, controller("RUNNING", 2, "T3"), made)
    assert summary(merged) == [(0, "REQUEUED", "time_limit"), (1, "REQUEUED", "preempted"),
                               (2, "RUNNING", "in progress")]


def test_a_requeue_without_a_decision_says_requeued_and_slurm_states_speak_for_themselves() -> None:
    accounting = [record("REQUEUED", "T1"), record("NODE_FAIL", "T2"), record("TIMEOUT", "T3")]
    merged = merge_attempts("9", accounting, {}, [{"attempt": "9.1", "decision": "terminated"}])
    assert [a.classification for a in merged] == ["requeued", "node_failure", "time_limit"]


def test_decisions_of_another_job_do_not_count() -> None:
    merged = merge_attempts("9", [record("COMPLETED", "T1")], {}, [{"attempt": "19.3", "decision": "hang"},
                                                                  {"attempt": "9.0", "decision": "completed"}])
    assert summary(merged) == [(0, "COMPLETED", "completed")]


def test_a_pending_attempt_says_what_it_waits_for() -> None:
    waiting = {**controller("PENDING", 0, "Unknown"), "Reason": "Nodes_required_for_job_are_DOWN,_DRAINED_or_"
               "reserved_for_jobs_in_higher_priority_partitions"}
    merged = merge_attempts("9", [record("PENDING", "Unknown", nodes="None assigned")], waiting, [])
    assert summary(merged) == [(0, "PENDING", "pending: Nodes required for job are DOWN, DRAINED or reserved for "
                                              "jobs in higher priority partitions")]
    nodes = {**waiting, "Reason": "ReqNodeNotAvail,_UnavailableNodes:gpu_n[1-2]"}
    expected = "pending: ReqNodeNotAvail, UnavailableNodes:gpu_n[1-2]"  # a node's own underscore stays
    assert merge_attempts("9", [], nodes, [])[0].classification == expected
    assert merge_attempts("9", [], {**waiting, "Reason": "None"}, [])[0].classification == "in progress"


@pytest.mark.slurm
def test_status_shows_why_a_job_that_cannot_start_waits(local_cluster, job_dir) -> None:
    slurm = local_cluster.slurm()
    spec = job_dir / "stuck.yaml"
    spec.write_text("name: stuck\nlauncher: srun\ncommand: [true]\nsbatch: [--nodelist=n4]\n"
                    "logs: {output: stuck_%j.out}\n")
    slurm.update_node("n4", "DRAIN", "clusterkit test: a job that cannot start")
    try:
        submitted = run_cli("submit", str(spec), "--cluster", local_cluster.name, "-o", "json", cwd=job_dir)
        job_id = json.loads(submitted.stdout)["job_id"]
        try:
            processes.wait_until(lambda: slurm.job_details(job_id).get("Reason", "None") != "None", 30,
                                 "Slurm to give the pending job a reason", interval=0.5)
            status = json.loads(run_cli("status", job_id, "--cluster", local_cluster.name, "-o", "json").stdout)
            (attempt,) = status["attempts"]
            assert status["state"] == "PENDING" and attempt["classification"].startswith("pending: "), status
            reason = attempt["classification"].removeprefix("pending: ")
            assert "_" not in reason and ("ReqNodeNotAvail" in reason or "DRAINED" in reason), reason
            table = run_cli("status", job_id, "--cluster", local_cluster.name).stdout
            assert reason in table, table
            # While the cluster replaces n4 (as its replacer logs it), status says that is what the job waits for.
            log = local_cluster.layout.log / LOG_NAME
            log.write_text(json.dumps({"node": "n4", "event": "terminated", "at": "2026-01-01T00:00:00+00:00",
                                       "ready_by": "2026-01-01T00:00:30+00:00"}) + "\n")
            try:
                replaced = json.loads(run_cli("status", job_id, "--cluster", local_cluster.name, "-o", "json").stdout)
                assert replaced["attempts"][0]["classification"].endswith("; waiting for n4's replacement"), replaced
            finally:
                log.unlink()
        finally:
            slurm.cancel(job_id)
    finally:
        slurm.update_node("n4", "RESUME")


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True, cwd=cwd,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return result


def test_a_relaunch_on_a_spare_is_one_attempt_that_names_its_recovery() -> None:
    # Slurm took the dead node out of the --no-kill job: accounting's RESIZING record is the same attempt.
    made = [{"attempt": "9.0", "decision": "node_failure", "action": "relaunch", "nodes": ["n2"],
             "relaunched_on": ["n1", "n3"], "evidence": "step exited 1; Slurm reports n2 down*", "time": "T5"},
            {"attempt": "9.0", "decision": "completed", "evidence": "step exited 0 on n1,n3"}]
    merged = merge_attempts("9", [record("RESIZING", "T1", "n[1-3]"), record("COMPLETED", "T1", "n[1,3]")],
                            controller("COMPLETED", 0, "T1"), made)
    assert summary(merged) == [(0, "COMPLETED", "completed")]
    [recovery] = merged[0].recoveries
    assert (recovery.action, recovery.relaunched_on, recovery.drained, recovery.seen_at) == (
        "relaunched", ("n1", "n3"), ("n2",), "T5")
    assert recovery.describe() == "T5: n2 drained (step exited 1; Slurm reports n2 down*); relaunched on n1,n3; " \
                                  "not resumed yet"


def test_each_node_failure_says_whether_the_node_was_marked_down_or_drained_and_what_followed() -> None:
    made = [{"attempt": "9.0", "decision": "node_failure", "nodes": ["n1", "n2"], "marked_down": ["n2"],
             "evidence": "n2's liveness beacon silent for 4 s; n1: EFA 2 of 4", "time": "T5"},
            {"attempt": "9.0", "decision": "node_failure", "evidence": "attempt 9.0 ended NODE_FAIL and Slurm "
             "requeued the job", "time": "T9"},
            {"attempt": "9.1", "decision": "completed", "evidence": "step exited 0 on n3,n4"}]
    merged = merge_attempts("9", [record("NODE_FAIL", "T1", "n[1-2]"), record("COMPLETED", "T10", "n[3-4]")],
                            controller("COMPLETED", 1, "T10"), made)
    first, second = merged[0].recoveries
    assert (first.marked_down, first.drained, first.action) == (("n2",), ("n1",), "requeued")
    assert first.describe().startswith("T5: n2 marked DOWN; n1 drained (n2's liveness beacon silent for 4 s; n1: "
                                       "EFA 2 of 4); requeued")
    assert second.describe().startswith("T9: node failure (attempt 9.0 ended NODE_FAIL and Slurm requeued the job)")
    assert merged[1].recoveries == ()


FAULT_AT = 1_800_000_000.0  # the failure seen (a unix time); the tries around it in seconds from there


def a_try(attempt: str, number: int, started: float, ended: float | None, first: tuple[int, float] | None,
          last: tuple[int, float] | None, resumed_from: int | None = None) -> list[dict]:
    """tries.jsonl's two lines for one try, as the supervisor writes them."""
    lines = [{"attempt": attempt, "try": number, "event": "started", "time": FAULT_AT + started, "nodes": ["n1"]}]
    lines.append({"attempt": attempt, "try": number, "event": "ended",
                  "time": None if ended is None else FAULT_AT + ended,
                  "first_step": first[0] if first else None, "first_time": FAULT_AT + first[1] if first else None,
                  "resumed_from": resumed_from, "load_seconds": 0.2 if resumed_from is not None else None,
                  "last_step": last[0] if last else None, "last_time": FAULT_AT + last[1] if last else None})
    return lines


def test_a_recovery_says_when_training_went_on_from_which_step_and_how_many_steps_were_lost() -> None:
    from clusterkit.jobs.recoveries import parse_tries
    from clusterkit.providers.base import Replacement

    made = [{"attempt": "9.0", "decision": "node_failure", "nodes": ["n2"], "marked_down": ["n2"],
             "evidence": "n2's liveness beacon silent for 4 s", "time": "2027-01-15T08:00:00+0000", "unix": FAULT_AT},
            {"attempt": "9.1", "decision": "completed", "evidence": "step exited 0"}]
    tries = parse_tries([*a_try("9.0", 0, -60, -0.5, (1, -55), (25, -6)),
                         *a_try("9.1", 0, 70, 120, (21, 78), (40, 119), resumed_from=20)])
    replaced = {"n2": Replacement("n2", "ready", _iso(FAULT_AT + 5), _iso(FAULT_AT + 65), _iso(FAULT_AT + 66))}
    merged = merge_attempts("9", [record("NODE_FAIL", "T1"), record("COMPLETED", "T10")],
                            controller("COMPLETED", 1, "T10"), made, replaced, tries)
    [recovery] = merged[0].recoveries
    assert (recovery.resumed_from_step, recovery.last_step_before, recovery.steps_lost) == (20, 25, 5)
    assert recovery.seconds_to_resume == 78.0
    assert recovery.replacement_ready_at == _iso(FAULT_AT + 66)
    assert recovery.describe().endswith("; requeued; replacement ready " + _clock(FAULT_AT + 66) + "; resumed "
                                        + _clock(FAULT_AT + 78) + " (+78 s) from step 20; 5 steps lost")
    # A replacement from before the failed try is another story.
    older = {"n2": Replacement("n2", "ready", _iso(FAULT_AT - 300), _iso(FAULT_AT - 240), _iso(FAULT_AT - 239))}
    [unrelated] = merge_attempts("9", [record("NODE_FAIL", "T1"), record("COMPLETED", "T10")],
                                 controller("COMPLETED", 1, "T10"), made, older, tries)[0].recoveries
    assert unrelated.replacement_ready_at is None


def test_a_failure_slurm_ended_is_seen_when_the_attempt_ended_and_a_booting_replacement_is_waited_for() -> None:
    from clusterkit.jobs.recoveries import parse_tries
    from clusterkit.providers.base import Replacement

    # The batch host died with its supervisor: the next attempt recorded the failure when it started, and the
    # try it was running never wrote its end.
    made = [{"attempt": "9.0", "decision": "node_failure", "nodes": ["n1"], "marked_down": ["n1"],
             "slurm_state": "NODE_FAIL", "evidence": "attempt 9.0 ended NODE_FAIL and Slurm requeued the job; n1: "
             "clusterkit agent: n1's liveness beacon silent", "time": "2027-01-15T08:01:30+0000",
             "unix": FAULT_AT + 90}]
    tries = parse_tries([*a_try("9.0", 0, -60, None, (1, -55), (12, -3)),
                         *a_try("9.1", 0, 91, None, (11, 99), (14, 101), resumed_from=10)])
    ended = AccountingRecord("9", "train", "NODE_FAIL", "0:0", "n[1-2]", "T1", _iso(FAULT_AT + 8))
    booting = {"n1": Replacement("n1", "booting", _iso(FAULT_AT + 20), _iso(FAULT_AT + 200))}
    merged = merge_attempts("9", [ended, record("RUNNING", "T2")], controller("RUNNING", 1, "T2"), made, booting,
                            tries)
    [recovery] = merged[0].recoveries
    assert recovery.seen_at == _iso(FAULT_AT + 8)
    assert (recovery.seconds_to_resume, recovery.steps_lost, recovery.replacing) == (91.0, 2, ("n1",))
    assert "waiting for n1's replacement" in recovery.describe()


def test_tries_are_read_whatever_the_lines_hold() -> None:
    from clusterkit.jobs.recoveries import parse_tries

    tries = parse_tries([{"attempt": "9.0", "try": "0", "event": "started"}, {"try": 1},
                         {"attempt": "9.0", "try": 2, "event": "ended", "first_step": True, "time": "x"},
                         {"attempt": "9.0", "try": 1, "event": "started", "time": 5, "nodes": ["n1", 3]}])
    assert [(t.number, t.started, t.nodes, t.first_step, t.ended) for t in tries] == [
        (1, 5.0, ("n1",), None, None), (2, None, (), None, None)]


def _iso(unix: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(unix).astimezone().isoformat(timespec="seconds")


def _clock(unix: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(unix).strftime("%H:%M:%S")


def test_a_node_slurm_found_itself_is_named_by_its_replacement():
    from clusterkit.jobs.recoveries import parse_tries
    from clusterkit.providers.base import Replacement

    # Slurm noticed the crashed n2 and requeued the job before the supervisor said which node; the cluster replaced
    # it meanwhile (and an unrelated n9 too).
    made = [{"attempt": "9.0", "decision": "node_failure", "slurm_state": "NODE_FAIL", "unix": FAULT_AT + 60,
             "evidence": "attempt 9.0 ended NODE_FAIL and Slurm requeued the job"}]
    tries = parse_tries([*a_try("9.0", 0, -60, None, (1, -55), (25, -6)),
                         *a_try("9.1", 0, 70, 120, (21, 78), (40, 119), resumed_from=20)])
    tries[0] = dataclasses.replace(tries[0], nodes=("n1", "n2"))
    replaced = {"n2": Replacement("n2", "ready", _iso(FAULT_AT + 3), _iso(FAULT_AT + 33), _iso(FAULT_AT + 34),
                                  "down*: Not responding"),
                "n9": Replacement("n9", "ready", _iso(FAULT_AT + 3), _iso(FAULT_AT + 33), _iso(FAULT_AT + 34))}
    [recovery] = merge_attempts("9", [record("NODE_FAIL", "T1"), record("COMPLETED", "T10")],
                                controller("COMPLETED", 1, "T10"), made, replaced, tries)[0].recoveries
    assert recovery.nodes == ("n2",) and recovery.replacement_ready_at == _iso(FAULT_AT + 34), recovery
    assert recovery.evidence.endswith("; n2 replaced: down*: Not responding")

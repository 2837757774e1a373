"""Every attempt of a job, merged from accounting, the controller and the supervisor's decisions."""

from __future__ import annotations

from clusterkit.jobs.attempts import merge_attempts
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

"""A supervised run that went through many time-limit requeues and completed is COMPLETED, whatever Slurm says of
its last attempt's batch script. The accounting and decisions are bench/bench_time_limit_loop.py's run 1 (`time: "1"`,
`signal: USR1@30`, 150 steps of 0.5 s under two busy loops: 12 attempts, the first lost by accounting), except the
last attempt's line: there it reads as Slurm writes a batch script killed by SIGUSR1 (FAILED 0:10), as the warning
kills a supervisor that recorded `completed` and is exiting (Python has put SIGUSR1's default action back by then)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterkit import runtime
from clusterkit.jobs.attempts import merge_attempts, run_state
from clusterkit.jobs.handle import JobHandle
from clusterkit.jobs.records import JobRecord
from clusterkit.jobs.tracking import JobTracker
from clusterkit.slurm import AccountingRecord, Poll, parse_accounting
from clusterkit.transport import LOCAL

from tests.fakes import ScriptedSlurm

# `sacct -D -X -n -P -o JobID,JobName,State,ExitCode,NodeList,Start,End -j 1` after the run.
RECORDED_SACCT = """\
1|bench-time-limit|REQUEUED|0:0|n[2-3]|2026-12-01T23:03:55|2026-12-01T23:04:10
1|bench-time-limit|REQUEUED|0:0|n[2-3]|2026-12-01T23:04:21|2026-12-01T23:04:40
1|bench-time-limit|REQUEUED|0:0|n[2-3]|2026-12-01T23:04:50|2026-12-01T23:05:12
1|bench-time-limit|REQUEUED|0:0|n[2-3]|2026-12-01T23:05:23|2026-12-01T23:05:43
1|bench-time-limit|REQUEUED|0:0|n[2-3]|2026-12-01T23:05:54|2026-12-01T23:06:11
1|bench-time-limit|REQUEUED|0:0|n[2-3]|2026-12-01T23:06:22|2026-12-01T23:06:41
1|bench-time-limit|REQUEUED|0:0|n[2-3]|2026-12-01T23:06:52|2026-12-01T23:07:11
1|bench-time-limit|REQUEUED|0:0|n[2-3]|2026-12-01T23:07:22|2026-12-01T23:07:41
1|bench-time-limit|REQUEUED|0:0|n[2-3]|2026-12-01T23:07:51|2026-12-01T23:08:11
1|bench-time-limit|REQUEUED|0:0|n[2-3]|2026-12-01T23:08:22|2026-12-01T23:08:40
1|bench-time-limit|FAILED|0:10|n[2-3]|2026-12-01T23:08:51|2026-12-01T23:09:07
"""
# The controller's view (`scontrol show job -o 1`) while it still lists the job.
CONTROLLER = {"JobId": "1", "JobName": "bench-time-limit", "JobState": "FAILED", "Restarts": "11",
              "StartTime": "2026-12-01T23:08:51", "EndTime": "2026-12-01T23:09:07", "NodeList": "n[2-3]",
              "ExitCode": "0:10"}
SAVED_AT = [11, 30, 51, 64, 73, 90, 101, 112, 127, 140]
RECORDED_DECISIONS = [
    *({"time": "2026-12-01T23:04:10+0000", "job_id": "1", "attempt": f"1.{restart}", "decision": "time_limit",
       "evidence": f"warned before the time limit with 45 s left; the step saved step-{step:08d} (exit 0)",
       "exit_code": 0} for restart, step in enumerate(SAVED_AT, start=1)),
    {"time": "2026-12-01T23:09:07+0000", "job_id": "1", "attempt": "1.11", "decision": "completed",
     "evidence": "step exited 0 on n2,n3; it finished before the warning was passed on", "exit_code": 0,
     "stopped": True}]


class RecordedSlurm(ScriptedSlurm):
    """Answers accounting with the recorded records and a job's details with the controller's recorded view; the
    queue as the test sets it."""

    def __init__(self, recorded: str, queued: dict[str, str]) -> None:
        super().__init__(queued=queued)
        self.recorded = parse_accounting(recorded)
        self.transport = LOCAL  # where the run's decisions are read

    def accounting(self, job_ids: list[str]) -> list[AccountingRecord]:
        self.calls += 1
        return [record for record in self.recorded if record.job_id in job_ids]

    def poll(self, job_ids: list[str], details_of: str | None = None) -> Poll:
        return Poll(self.queue(), self.accounting(job_ids), CONTROLLER if details_of and self.queued else {}, 3)


def run_dir(tmp_path: Path, made: list[dict]) -> Path:
    """A run's state directory holding `made` as the supervisor writes it (one object a line, then NUL padding)."""
    state = tmp_path / "run" / runtime.STATE_DIR_NAME
    state.mkdir(parents=True)
    (state / runtime.DECISIONS_FILE).write_bytes("".join(json.dumps(d) + "\n" for d in made).encode() + b"\0" * 64)
    return state


def handle_of(tmp_path: Path, queued: dict[str, str], made: list[dict]) -> JobHandle:
    record = JobRecord("1", "c", "bench-time-limit", "spec", "", run_state_dir=str(run_dir(tmp_path, made)))
    return JobHandle("1", "c", JobTracker(RecordedSlurm(RECORDED_SACCT, queued), min_interval=0),  # type: ignore
                     record=record)


@pytest.mark.parametrize("queued", [{"1": "FAILED"}, {}], ids=["controller-lists-it", "accounting-only"])
def test_a_run_its_supervisor_completed_is_completed_though_the_last_batch_script_failed(tmp_path, queued):
    handle = handle_of(tmp_path, queued, RECORDED_DECISIONS)
    assert handle.state == "COMPLETED"
    assert handle.wait(timeout=5, poll=0) == "COMPLETED"
    assert handle.result(timeout=5) == "COMPLETED"  # no JobFailed: `submit --wait` exits 0


@pytest.mark.parametrize("queued", [{"1": "FAILED"}, {}], ids=["controller-lists-it", "accounting-only"])
def test_status_calls_it_completed_with_every_attempt_and_why_each_ended(tmp_path, monkeypatch, queued):
    import clusterkit.providers

    class NotReplacing:
        def replacements(self) -> dict:
            return {}

    monkeypatch.setattr(clusterkit.providers, "open_cluster", lambda name: NotReplacing())
    status = handle_of(tmp_path, queued, RECORDED_DECISIONS).status()
    assert status.state == "COMPLETED"
    # Attempt 0 is known from the controller's Restarts, or once it forgot the job from the supervisor's attempts:
    # either way it is the one accounting lost, not the last.
    assert [(a.attempt, a.state, a.classification) for a in status.attempts] == [
        (0, "unknown", "requeued (not in accounting)"), *((n, "REQUEUED", "time_limit") for n in range(1, 11)),
        (11, "FAILED", "completed")]


def test_a_run_that_did_not_complete_keeps_slurms_state(tmp_path):
    stopped = [*RECORDED_DECISIONS[:-1], {"attempt": "1.11", "decision": "budget_exhausted", "stopped": True}]
    assert handle_of(tmp_path, {"1": "FAILED"}, stopped).state == "FAILED"


def test_only_this_jobs_completed_decision_counts_and_only_once_the_job_ended() -> None:
    # The run resubmitted as job 2 after job 1 completed it: job 2's own end is what it is.
    assert run_state("2", "FAILED", RECORDED_DECISIONS) == "FAILED"
    assert run_state("11", "FAILED", RECORDED_DECISIONS) == "FAILED"  # 1.11 is job 1's attempt, not job 11's
    # Requeued after the completed attempt (a requeue that came too late): still going, Slurm says how.
    for state in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING"):
        assert run_state("1", state, RECORDED_DECISIONS) == state
    assert run_state("1", "TIMEOUT", RECORDED_DECISIONS) == "COMPLETED"


def test_the_recorded_accounting_merges_into_one_attempt_per_restart() -> None:
    merged = merge_attempts("1", parse_accounting(RECORDED_SACCT), CONTROLLER, RECORDED_DECISIONS)
    assert len(merged) == 12 and merged[-1].state == "FAILED" and merged[-1].classification == "completed"

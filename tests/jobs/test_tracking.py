"""Job states that follow requeues, against a scripted Slurm (no daemons)."""

from __future__ import annotations

import pytest

from clusterkit.errors import NotFound
from clusterkit.jobs import handle as handle_module
from clusterkit.jobs.handle import JobHandle
from clusterkit.jobs.tracking import JobTracker

from tests.fakes import ScriptedSlurm


def tracker(slurm: ScriptedSlurm) -> JobTracker:
    return JobTracker(slurm, min_interval=0)  # type: ignore[arg-type]


def test_a_requeued_job_is_not_reported_failed_while_sacct_shows_node_fail():
    slurm = ScriptedSlurm()
    slurm.queued["5"] = "PENDING"  # the controller requeued it...
    slurm.attempts["5"] = ["NODE_FAIL"]  # ...while accounting shows only the failed attempt so far
    assert JobHandle("5", "c", tracker(slurm)).state == "PENDING"


def test_once_the_queue_forgets_a_job_accounting_gives_its_last_attempt():
    slurm = ScriptedSlurm()
    slurm.attempts["5"] = ["NODE_FAIL", "COMPLETED"]
    handle = JobHandle("5", "c", tracker(slurm))
    assert handle.state == "COMPLETED"
    assert [a.base_state for a in handle.attempts()] == ["NODE_FAIL", "COMPLETED"]


def test_one_poll_for_many_jobs_costs_one_squeue_and_one_sacct():
    slurm = ScriptedSlurm()
    jobs = [str(i) for i in range(100)]
    for job in jobs:
        slurm.queued[job] = "RUNNING"
    shared = JobTracker(slurm, min_interval=60)  # type: ignore[arg-type]
    handles = [JobHandle(job, "c", shared) for job in jobs]
    slurm.calls = 0
    assert {h.state for h in handles} == {"RUNNING"}
    assert slurm.calls == 2


def test_an_id_slurm_never_heard_of_ends_the_wait(monkeypatch):
    monkeypatch.setattr(handle_module, "UNKNOWN_GRACE_S", 0.05)
    handle = JobHandle("999", "c", tracker(ScriptedSlurm()))
    with pytest.raises(NotFound, match="knows no job 999"):
        handle.wait(timeout=5, poll=0.01)


def test_a_slurm_hiccup_does_not_end_the_wait(monkeypatch):
    monkeypatch.setattr(handle_module.time, "sleep", lambda _: None)
    slurm = ScriptedSlurm()
    slurm.attempts["5"] = ["COMPLETED"]
    slurm.fail_next = 2
    said: list[str] = []
    assert JobHandle("5", "c", tracker(slurm)).wait(timeout=5, poll=0, progress=said.append) == "COMPLETED"
    assert sum("did not answer" in line for line in said) == 2

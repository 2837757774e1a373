"""The supervisor's decisions with real step processes and a scripted Slurm (no daemons)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from clusterkit.resilience import supervisor as supervisor_module
from clusterkit.resilience.supervisor import BudgetState, Supervisor

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
    log = tmp_path / "state" / "decisions.jsonl"
    return code, [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


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


def test_a_sick_node_found_before_the_step_never_runs_it(tmp_path):
    slurm = ScriptedSlurm(sick={"n1": "EFA 2 of 4"}, queued={"42": "RUNNING"})
    marker = tmp_path / "ran"
    code, made = supervise(tmp_path, f"open({str(marker)!r}, 'w')", slurm, precheck=True)
    assert made[0]["decision"] == "node_failure" and "before the step" in made[0]["evidence"]
    assert not marker.exists() and slurm.requeued == ["42"]


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
    state = tmp_path / "state"
    state.mkdir()
    BudgetState(restarts=3, attempts_seen=["42.0", "42.1", "42.2", "42.3"]).save(state / "supervisor.json")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "4")
    code, made = supervise(tmp_path, "raise SystemExit(0)", ScriptedSlurm(queued={"42": "RUNNING"}))
    assert code == 1 and [d["decision"] for d in made] == ["budget_exhausted"]


def test_no_node_is_judged_while_slurm_ends_the_job(tmp_path):
    slurm = ScriptedSlurm(sick={"n1": "unreachable"}, queued={"42": "COMPLETING"})
    code, made = supervise(tmp_path, "raise SystemExit(1)", slurm)
    assert [d["decision"] for d in made] == ["terminated"]
    assert slurm.drained == [] and slurm.requeued == []

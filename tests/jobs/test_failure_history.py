"""The failure rate `checkpoint_every: auto` plans for: the spec's, else the cluster's from clusterkit's records of its
supervised runs, else Llama 3's; and the spec's checkpoint_every reaching CheckpointManager in the job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterkit import runtime
from clusterkit.errors import ClusterkitError
from clusterkit.findings import Level
from clusterkit.goodput.model import LLAMA3_FAILURES_PER_GPU_HOUR
from clusterkit.jobs import records
from clusterkit.jobs.environment import job_environment
from clusterkit.jobs.failure_history import FailureHistory, cluster_history, summarize
from clusterkit.jobs.plan import plan_job
from clusterkit.jobs.recoveries import Try
from clusterkit.jobs.validators import validate_job
from clusterkit.resilience.checkpoint import CheckpointManager
from clusterkit.transport import LOCAL

from tests.jobs.helpers import make_spec

HOUR = 3600.0


def one_try(attempt: str, nodes: int, hours: float, start: float = 1000.0, ended: bool = True) -> Try:
    names = tuple(f"n{i}" for i in range(nodes))
    end = start + hours * HOUR
    return Try(attempt, 0, names, start, end if ended else None, last_time=end)


def test_failures_count_every_failure_a_supervisor_acted_on_over_the_node_hours_of_the_tries() -> None:
    made = [{"decision": runtime.NODE_FAILURE}, {"decision": runtime.HANG}, {"decision": runtime.APPLICATION_ERROR},
            {"decision": runtime.TIME_LIMIT}, {"decision": runtime.COMPLETED}]
    # A try whose supervisor died with its node has no end: its last step's time closes it.
    history = summarize([(made, [one_try("1.0", 4, 10.0), one_try("1.1", 2, 3.0, ended=False)]),
                         ([], [one_try("2.0", 8, 1.0), Try("2.1", 0, ("n1",), None, None)])])
    assert history == FailureHistory(runs=2, failures=3, node_hours=4 * 10 + 2 * 3 + 8)
    assert history.per_gpu_hour(8) == pytest.approx(3 / (54 * 8))


def test_too_little_history_says_nothing_and_no_failure_yet_is_planned_as_one() -> None:
    assert FailureHistory(3, 2, 23.9).per_gpu_hour(8) is None
    assert FailureHistory(3, 0, 100.0).per_gpu_hour(4) == pytest.approx(1 / 400)


def save_run(tmp_path: Path, job_id: str, made: list[dict], tried: list[dict], state_dir: str | None = None) -> None:
    directory = Path(state_dir) if state_dir else tmp_path / f"run-{job_id}" / ".clusterkit"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / runtime.DECISIONS_FILE).write_text("".join(json.dumps(d) + "\n" for d in made))
    (directory / runtime.TRIES_FILE).write_text("".join(json.dumps(t) + "\n" for t in tried))
    records.save(records.JobRecord(job_id=job_id, cluster="host", name="train", kind="spec",
                                   submitted=records.now(), run_state_dir=str(directory)))


def try_line(attempt: str, nodes: int, hours: float) -> list[dict]:
    """tries.jsonl's lines for one try: its start and its end."""
    names = [f"n{i}" for i in range(nodes)]
    return [{"event": "started", "attempt": attempt, "try": 0, "nodes": names, "time": 1000.0},
            {"event": "ended", "attempt": attempt, "try": 0, "time": 1000.0 + hours * HOUR}]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CLUSTERKIT_CLUSTER", raising=False)
    monkeypatch.setattr("clusterkit.registry.exists", lambda name: False)  # `host`: this machine's Slurm
    return tmp_path


def test_the_cluster_history_reads_each_supervised_run_once(home: Path) -> None:
    tried = try_line("7.0", 4, 20.0)
    save_run(home, "7", [{"decision": runtime.NODE_FAILURE, "attempt": "7.0"}], tried)
    # A resubmission into the same run directory: the same run, read once.
    save_run(home, "9", [{"decision": runtime.NODE_FAILURE, "attempt": "7.0"}], tried,
             state_dir=str(home / "run-7" / ".clusterkit"))
    records.save(records.JobRecord(job_id="8", cluster="host", name="plain", kind="spec", submitted=records.now()))
    assert cluster_history("host", LOCAL) == FailureHistory(runs=1, failures=1, node_hours=80.0)


def test_auto_plans_for_the_clusters_own_rate_where_its_history_tells(home: Path) -> None:
    save_run(home, "7", [{"decision": runtime.NODE_FAILURE, "attempt": "7.0"},
                         {"decision": runtime.HANG, "attempt": "7.1"}], try_line("7.0", 4, 25.0))
    spec = make_spec(checkpoint_every="auto", processes_per_node=8)
    plan = plan_job(spec, "host", workdir=home, preflight=False)
    assert plan.spec is not None and plan.spec.failures_per_gpu_hour == pytest.approx(2 / (100 * 8))
    (note,) = [f for f in plan.findings if f.rule == "job.failure-history"]
    assert note.level is Level.INFO and "2 failure(s) in 100.0 node-hours of 1 supervised run(s)" in note.message
    script = plan.script or ""
    assert f"export {runtime.CHECKPOINT_EVERY_ENV}=auto" in script
    assert f"export {runtime.FAILURES_PER_GPU_HOUR_ENV}=0.0025" in script


def test_auto_says_it_plans_for_llama_3s_rate_without_enough_history_and_a_given_rate_wins(home: Path) -> None:
    save_run(home, "7", [{"decision": runtime.NODE_FAILURE, "attempt": "7.0"}], try_line("7.0", 2, 1.0))
    plan = plan_job(make_spec(checkpoint_every="auto"), "host", workdir=home, preflight=False)
    (note,) = [f for f in plan.findings if f.rule == "job.failure-history"]
    assert f"Llama 3's failure rate ({LLAMA3_FAILURES_PER_GPU_HOUR:.3g}" in note.message and "2.0 node-hours" in \
        note.message
    assert plan.spec is not None and plan.spec.failures_per_gpu_hour is None
    assert runtime.FAILURES_PER_GPU_HOUR_ENV not in (plan.script or "")
    given = plan_job(make_spec(checkpoint_every="auto", failures_per_gpu_hour=1e-4), "host", workdir=home,
                     preflight=False)
    assert not [f for f in given.findings if f.rule == "job.failure-history"]
    assert f"export {runtime.FAILURES_PER_GPU_HOUR_ENV}=0.0001" in (given.script or "")
    fixed = plan_job(make_spec(checkpoint_every=50), "host", workdir=home, preflight=False)
    assert not [f for f in fixed.findings if f.rule == "job.failure-history"]
    assert job_environment(fixed.spec).variables[runtime.CHECKPOINT_EVERY_ENV] == "50"


@pytest.mark.parametrize("value", [0, -3, "0", "1e3", "ten", "auto\n", "$(reboot)", "AUTO", "10 ", 10**10,
                                   "9" * 400, "\u2028", True])
def test_a_bad_checkpoint_interval_is_one_error_naming_the_field(value: object) -> None:
    try:
        spec = make_spec(checkpoint_every=value)
    except ClusterkitError as refused:  # the reader's own refusal (a control character)
        assert "checkpoint_every" in str(refused)
        return
    problems = [f for f in validate_job(spec) if f.level is Level.ERROR]
    assert problems and {f.path for f in problems} == {"checkpoint_every"}, problems
    assert "whole number of steps" in problems[-1].message and "auto" in problems[-1].fix


@pytest.mark.parametrize("value", [0, -1e-5, float("nan"), float("inf"), 1e9])
def test_a_bad_failure_rate_is_one_error_naming_the_field(value: float) -> None:
    problems = [f for f in validate_job(make_spec(checkpoint_every="auto", failures_per_gpu_hour=value))
                if f.level is not Level.INFO]
    assert [(f.level, f.path) for f in problems] == [(Level.ERROR, "failures_per_gpu_hour")], problems


def test_a_failure_rate_without_auto_is_a_warning() -> None:
    (warned,) = [f for f in validate_job(make_spec(checkpoint_every=100, failures_per_gpu_hour=1e-5))
                 if f.level is Level.WARNING]
    assert warned.path == "failures_per_gpu_hour" and "checkpoint_every: auto" in warned.fix


def test_the_manager_takes_the_jobs_interval_where_the_training_passes_none(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(runtime.CHECKPOINT_EVERY_ENV, "7")
    assert CheckpointManager(tmp_path, rank=0, world_size=1).schedule.interval_steps == 7
    assert CheckpointManager(tmp_path, rank=0, world_size=1, checkpoint_every=3).schedule.interval_steps == 3
    monkeypatch.setenv(runtime.CHECKPOINT_EVERY_ENV, "auto")
    assert CheckpointManager(tmp_path, rank=0, world_size=1).schedule.every == "auto"
    monkeypatch.setenv(runtime.CHECKPOINT_EVERY_ENV, "$(reboot)")
    with pytest.raises(ClusterkitError) as refused:
        CheckpointManager(tmp_path, rank=0, world_size=1)
    assert f"${runtime.CHECKPOINT_EVERY_ENV} '$(reboot)'" in refused.value.message

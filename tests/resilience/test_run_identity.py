"""The run id survives requeues and resubmission into the same run directory."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from clusterkit.resilience.run_identity import attempt_id, run_identity

SLURM_VARIABLES = ("CLUSTERKIT_RUN_ID", "CLUSTERKIT_ATTEMPT_ID", "SLURM_JOB_ID", "SLURM_RESTART_COUNT",
                   "TORCHELASTIC_RESTART_COUNT")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SLURM_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_from_slurm_job_and_kept_after_resubmission(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    first = run_identity(tmp_path / "run")
    assert first.run_id == "slurm-41" and first.restart_count == 0

    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")  # requeued: same job id
    assert run_identity(tmp_path / "run").restart_count == 2
    monkeypatch.setenv("SLURM_JOB_ID", "97")  # resubmitted by hand into the same directory
    assert run_identity(tmp_path / "run").run_id == "slurm-41"


def test_explicit_id_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_identity(tmp_path)
    monkeypatch.setenv("CLUSTERKIT_RUN_ID", "llama-7b-a")
    assert run_identity(tmp_path).run_id == "llama-7b-a"


def test_ranks_racing_on_first_use_agree(tmp_path: Path) -> None:
    ids: list[str] = []
    threads = [threading.Thread(target=lambda: ids.append(run_identity(tmp_path).run_id)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(ids)) == 1 and ids[0].startswith("run-")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".clusterkit-run-id"]


def test_attempt_changes_with_requeue(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    first = attempt_id()
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert attempt_id() != first

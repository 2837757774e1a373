"""The names under a checkpoint root: made and read in one place, ordered by step number past 8 digits."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.fakes import ScriptedSlurm
from tests.resilience.resilience_helpers import assert_state_is, state_for

from clusterkit.resilience.checkpoint import CheckpointManager
from clusterkit.resilience.checkpoint_layout import (
    pending_dir_name,
    pending_step,
    step_dir_name,
    step_dirs,
    step_of,
)
from clusterkit.resilience.supervisor import Supervisor


@pytest.mark.parametrize("step", [0, 7, 99_999_999, 100_000_000, 123_456_789_012])
def test_a_step_directory_name_reads_back_as_its_step(step: int) -> None:
    assert step_of(step_dir_name(step)) == step
    assert pending_step(pending_dir_name(step, "cafe")) == step


def test_step_directory_names_have_at_least_8_digits() -> None:
    assert step_dir_name(12) == "step-00000012"
    assert step_dir_name(100_000_000) == "step-100000000"


@pytest.mark.parametrize("name", ["latest", "step-1234567", "step-00000012.tmp", "step-", "manifest.json",
                                  ".pending-step-00000012-cafe", ".discarded-step-00000012-cafe"])
def test_other_names_are_no_committed_step(name: str) -> None:
    assert step_of(name) is None


def test_step_directories_are_listed_by_number_not_by_name(tmp_path: Path) -> None:
    for step in (99_999_999, 100_000_000, 8):
        (tmp_path / step_dir_name(step)).mkdir()
    (tmp_path / step_dir_name(200_000_000)).write_text("a file, not a checkpoint")
    assert [step for step, _ in step_dirs(tmp_path)] == [100_000_000, 99_999_999, 8]
    assert step_dirs(tmp_path / "absent") == []


def test_checkpoints_past_8_digits_are_found_kept_and_resumed_in_step_order(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=2)
    for step in (99_999_998, 99_999_999, 100_000_000):
        manager.save(step, state_for(step))
    manager.close()
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-100000000", "step-99999999"]
    assert manager.latest().step == 100_000_000
    assert (tmp_path / "latest").read_text() == "step-100000000\n"
    checkpoint, state = manager.resume()
    assert checkpoint.step == 100_000_000
    assert_state_is(state, 100_000_000)


def test_the_supervisor_names_only_a_committed_checkpoint_as_what_a_stopped_step_saved(tmp_path: Path) -> None:
    checkpoints = tmp_path / "run"
    (checkpoints / step_dir_name(99_999_999)).mkdir(parents=True)
    supervisor = Supervisor(["true"], tmp_path / "state", 3, 1, hang_timeout=600, health_timeout=10, precheck=False,
                            slurm=ScriptedSlurm(), checkpoint_dir=checkpoints)
    before = checkpoints / step_dir_name(99_999_999)
    (checkpoints / "step-100000001.partial").mkdir()  # not a checkpoint: another tool's, or a copy's
    assert supervisor.saved_on_stop(before, 1) == (
        "the step exited 1 with no new checkpoint; the next attempt repeats the steps since step-99999999")
    (checkpoints / step_dir_name(100_000_000)).mkdir()
    assert supervisor.saved_on_stop(before, 0) == "the step saved step-100000000 (exit 0)"

"""The names under a checkpoint root: made and read in one place, ordered by step number past 8 digits, and
only for steps that can name a checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.fakes import ScriptedSlurm
from tests.resilience.resilience_helpers import assert_state_is, state_for

from clusterkit.errors import ClusterkitError
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


def save_in_pending(manager: CheckpointManager, step: object) -> None:
    with manager.pending(step) as directory:
        (directory / "part").write_bytes(b"x")


SAVES = {
    "save": lambda manager, step: manager.save(step, state_for(1)),
    "save_async": lambda manager, step: manager.save_async(step, state_for(1)),
    "save_dcp": lambda manager, step: manager.save_dcp(step, {"w": torch.ones(3)}),
    "pending": save_in_pending,
}


@pytest.mark.parametrize("how", SAVES)
@pytest.mark.parametrize("step", [-1, True, 1.5, "7", None, torch.tensor(2.0)], ids=repr)
def test_a_step_that_names_no_checkpoint_is_refused_before_anything_is_written(tmp_path: Path, how: str,
                                                                               step: object) -> None:
    # -1 was committed as step--0000001, which latest() never finds and retention never removes; a tensor
    # step failed at the commit and left its pending directory behind.
    manager = CheckpointManager(tmp_path / "run")
    with pytest.raises(ClusterkitError, match=r"checkpoint step must be a whole number 0 or more, got ") as raised:
        SAVES[how](manager, step)
    assert repr(step) in str(raised.value) and "save(int(step), state)" in str(raised.value)
    manager.close()
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("step", [np.int64(5), torch.tensor(5)], ids=repr)
def test_an_integer_step_of_numpy_or_torch_is_the_step_it_holds(tmp_path: Path, step: object) -> None:
    committed = CheckpointManager(tmp_path).save(step, state_for(5))
    assert committed.step == 5 and type(committed.step) is int
    assert committed.path.name == "step-00000005"
    assert json.loads((committed.path / "manifest.json").read_text())["step"] == 5

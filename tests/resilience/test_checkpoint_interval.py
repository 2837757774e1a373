"""checkpoint_every: a number of steps, or "auto": chosen from the measured save costs, step time and failure rate."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from clusterkit import runtime
from clusterkit.errors import ClusterkitError
from clusterkit.goodput.advice import young_daly
from clusterkit.goodput.model import LLAMA3_FAILURES_PER_GPU_HOUR
from clusterkit.resilience.checkpoint_interval import BOOTSTRAP_STEPS, CheckpointSchedule


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def train(schedule: CheckpointSchedule, clock: Clock, steps: int, *, step_s: float, stall_s: float,
          start: int = 0) -> list[int]:
    """A loop of `steps` steps of `step_s` seconds with blocking saves of `stall_s`; the steps it saved at."""
    saves = []
    for step in range(start, start + steps):
        clock.now += step_s
        if schedule.due(step):
            clock.now += stall_s
            schedule.saved(stall_s)
            schedule.written(0.0)
            saves.append(step)
    return saves


def test_auto_saves_first_after_the_bootstrap_then_at_young_daly_in_steps(caplog):
    clock = Clock()
    rate = 1e-3  # per GPU-hour, x 100 GPUs: a failure every 10 h = 36,000 s
    schedule = CheckpointSchedule("auto", failures_per_gpu_hour=rate, gpus=100, clock=clock)
    with caplog.at_level(logging.INFO, logger="clusterkit.resilience.checkpoint_interval"):
        saves = train(schedule, clock, 2000, step_s=0.5, stall_s=10.0)
    expected = round(young_daly(10.0, 36_000) / 0.5)  # 848.5 s / 0.5 s = 1697 steps
    assert saves[0] == BOOTSTRAP_STEPS and schedule.interval_steps == expected
    assert saves == [BOOTSTRAP_STEPS, BOOTSTRAP_STEPS + expected]
    assert "checkpoint every 1697 steps" in schedule.reason and "a failure comes every 10.0 h" in schedule.reason
    assert "stalls the loop 10.00 s" in schedule.reason and "Young/Daly" in schedule.reason
    assert [r.getMessage() for r in caplog.records] == [schedule.reason]


def test_auto_chooses_again_when_the_costs_move_and_says_so(caplog):
    clock = Clock()
    schedule = CheckpointSchedule("auto", failures_per_gpu_hour=1e-2, gpus=100, clock=clock)  # MTBF 3,600 s
    train(schedule, clock, 200, step_s=1.0, stall_s=2.0)
    first = schedule.interval_steps
    assert first == round(young_daly(2.0, 3600))  # 120 steps
    with caplog.at_level(logging.INFO, logger="clusterkit.resilience.checkpoint_interval"):
        train(schedule, clock, 3000, step_s=1.0, stall_s=50.0, start=200)  # storage got slower
    assert schedule.interval_steps > 1.2 * first
    assert schedule.interval_steps == pytest.approx(young_daly(50.0, 3600), rel=0.25)
    assert any(m.getMessage().startswith(f"was every {first} steps; now checkpoint every") for m in caplog.records)


def test_a_small_change_keeps_the_interval():
    clock = Clock()
    schedule = CheckpointSchedule("auto", failures_per_gpu_hour=1e-2, gpus=100, clock=clock)
    train(schedule, clock, 300, step_s=1.0, stall_s=2.0)
    first = schedule.interval_steps
    train(schedule, clock, 600, step_s=1.0, stall_s=2.4, start=300)  # +20% stall: +10% interval
    assert schedule.interval_steps == first


def test_the_ranks_agreement_decides(caplog):
    clock, seen = Clock(), []

    def agree(values):
        seen.append(list(values))
        return [values[0], 40.0, values[2], values[3]]  # another rank's save stalled 40 s

    schedule = CheckpointSchedule("auto", failures_per_gpu_hour=1e-2, gpus=100, clock=clock, agree=agree)
    train(schedule, clock, 50, step_s=1.0, stall_s=2.0)
    assert seen and seen[0][1] == 2.0
    assert schedule.interval_steps == round(young_daly(40.0, 3600))


def test_the_failure_rate_comes_from_the_argument_the_environment_or_llama3(monkeypatch):
    monkeypatch.delenv(runtime.FAILURES_PER_GPU_HOUR_ENV, raising=False)
    assert CheckpointSchedule("auto").failures_per_gpu_hour == LLAMA3_FAILURES_PER_GPU_HOUR
    monkeypatch.setenv(runtime.FAILURES_PER_GPU_HOUR_ENV, "4e-5")
    assert CheckpointSchedule("auto").failures_per_gpu_hour == 4e-5
    assert CheckpointSchedule("auto", failures_per_gpu_hour=1e-6).failures_per_gpu_hour == 1e-6
    for bad in ("nan", "-1", "lots"):
        monkeypatch.setenv(runtime.FAILURES_PER_GPU_HOUR_ENV, bad)
        with pytest.raises(ClusterkitError, match=runtime.FAILURES_PER_GPU_HOUR_ENV):
            CheckpointSchedule("auto")


@pytest.mark.parametrize("every", [0, -5, 2.5, "often", True, None])
def test_a_bad_checkpoint_every_is_refused(every):
    with pytest.raises(ClusterkitError, match="checkpoint_every"):
        CheckpointSchedule(every)


def test_a_number_saves_every_that_many_steps():
    schedule = CheckpointSchedule(25, clock=Clock())
    assert [step for step in range(1, 101) if schedule.due(step)] == [25, 50, 75, 100]


def test_the_manager_measures_its_own_saves_and_chooses(tmp_path: Path, caplog):
    import torch

    from clusterkit.resilience.checkpoint import CheckpointManager

    manager = CheckpointManager(tmp_path, keep=2, checkpoint_every="auto", failures_per_gpu_hour=1.0, gpus=1)
    state = {"w": torch.zeros(1000)}
    with caplog.at_level(logging.INFO, logger="clusterkit.resilience.checkpoint_interval"):
        saved = []
        for step in range(BOOTSTRAP_STEPS + 3):
            if manager.due(step):
                manager.save_async(step, state)
                saved.append(step)
        manager.close()
    assert saved == [BOOTSTRAP_STEPS]
    assert manager.latest().step == BOOTSTRAP_STEPS
    assert manager.schedule.interval_steps >= 1
    assert [r.getMessage() for r in caplog.records] == [manager.schedule.reason]
    assert "a failure comes every 1.0 h" in manager.schedule.reason
    with pytest.raises(ClusterkitError, match="due\\(\\) needs a schedule"):
        CheckpointManager(tmp_path).due(1)


def test_ranks_that_coordinate_through_files_cannot_agree_and_are_told_so(tmp_path: Path):
    from clusterkit.resilience.checkpoint import CheckpointManager

    manager = CheckpointManager(tmp_path, rank=0, world_size=2, checkpoint_every="auto", gpus=2)
    assert [step for step in range(1, BOOTSTRAP_STEPS + 2) if manager.due(step)] == [BOOTSTRAP_STEPS + 1]
    with pytest.raises(ClusterkitError, match="cannot agree on the step of each save"):
        manager.due(BOOTSTRAP_STEPS + 2)

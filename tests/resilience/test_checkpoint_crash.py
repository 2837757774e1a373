"""SIGKILL during saves never leaves a partial checkpoint where latest() or a reader can see it."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest
from tests.resilience.resilience_helpers import assert_state_is, state_for

from clusterkit.resilience.checkpoint import CheckpointManager, verify_checkpoint

KILLS = 120


def save_until_killed(root: Path, first_step: int) -> None:
    manager = CheckpointManager(root, keep=2)
    step = first_step
    while True:
        manager.save(step, state_for(step, floats=300_000))  # ~1.2 MB: several write windows of work
        step += 1


@pytest.mark.slow
def test_sigkill_at_random_points_keeps_checkpoints_valid(tmp_path: Path) -> None:
    rng = random.Random(20240617)
    reader = CheckpointManager(tmp_path, keep=2)
    newest_seen = 0
    killed_mid_save = 0
    for _ in range(KILLS):
        child = os.fork()
        if child == 0:  # the saver: forked, so it starts in microseconds with torch imported
            try:
                save_until_killed(tmp_path, newest_seen + 1)
            finally:
                os._exit(1)
        time.sleep(rng.uniform(0.0, 0.1))  # the kill point: anywhere within a few saves
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)

        killed_mid_save += any(tmp_path.glob(".pending-*"))
        # Every checkpoint under a committed name is complete: nothing torn is ever visible.
        for directory in tmp_path.glob("step-*"):
            checkpoint, problem = verify_checkpoint(directory, "full")
            assert checkpoint is not None, f"{directory}: {problem}"
        found = reader.latest()
        if found is None:
            assert newest_seen == 0
            continue
        assert found.step >= newest_seen
        assert found.step == max(int(p.name.removeprefix("step-")) for p in tmp_path.glob("step-*"))
        assert_state_is(reader.load(found), found.step)
        newest_seen = found.step

    assert newest_seen > KILLS // 4, "the saver hardly ever committed: the test exercised little"
    assert killed_mid_save > KILLS // 4, "few kills landed inside a save"
    assert len(list(tmp_path.glob(".pending-*"))) <= 1  # debris is cleaned by later commits

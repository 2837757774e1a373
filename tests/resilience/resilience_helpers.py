"""Helpers shared by the resilience tests (real PyTorch on CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

WORKTREE = Path(__file__).resolve().parents[2]
CHECKPOINT_WORKER = Path(__file__).with_name("checkpoint_worker.py")


def state_for(step: int, floats: int = 50_000):
    """A small training-like state whose every value reveals the step it was saved at.

    Built through numpy so that no torch parallel kernel runs (forked children must not touch
    the parent's OpenMP pool).
    """
    return {
        "model": {
            "weight": torch.from_numpy(np.full(floats, step, dtype=np.float32)),
            "bias": torch.from_numpy(np.full(7, -step, dtype=np.int64)),
        },
        "optimizer": {"state": {0: {"exp_avg": torch.from_numpy(np.full(100, step / 2))}}, "lr": 0.1},
        "step": step,
    }


def assert_state_is(state, step: int) -> None:
    assert state["step"] == step
    weight = state["model"]["weight"]
    assert torch.equal(weight, torch.full_like(weight, step))
    assert state["model"]["bias"].tolist() == [-step] * 7
    assert state["optimizer"]["state"][0]["exp_avg"][0].item() == step / 2


def flip_byte(path: Path, offset: int) -> None:
    """Damage one byte of a file in place, as bit rot would."""
    with open(path, "r+b") as f:
        f.seek(offset)
        original = f.read(1)
        f.seek(offset)
        f.write(bytes([original[0] ^ 0xFF]))


def run_workers(*argument_lists: list[str], timeout_s: float = 60) -> list[subprocess.CompletedProcess[str]]:
    """Run checkpoint_worker.py once per argument list, concurrently; return their results."""
    env = {**os.environ, "PYTHONPATH": str(WORKTREE), "OMP_NUM_THREADS": "1"}
    processes = [
        subprocess.Popen(
            [sys.executable, str(CHECKPOINT_WORKER), *arguments],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for arguments in argument_lists
    ]
    results = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=timeout_s)
        results.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    return results


def assert_the_ledger_adds_up(handle) -> dict[str, float]:  # noqa: ANN001
    """`goodput()` of an ended run: its categories add up to its wall-clock within 1 s, from its submission to its
    last attempt's end; the seconds by category for the test to look at."""
    from clusterkit.jobs.recoveries import parse_time

    ledger = handle.goodput()
    status = handle.status()
    assert abs(sum(ledger.categories.values()) - ledger.wall_s) < 1.0, ledger.to_dict()
    assert abs(ledger.start - parse_time(handle.record.submitted)) < 1.0
    assert abs(ledger.end - parse_time(status.attempts[-1].end)) < 1.0, (ledger.end, status)
    assert ledger.categories["productive"] > 0 and 0 < ledger.goodput < 1, ledger.to_dict()
    return ledger.categories

"""save_async: the copy happens in the call, the write in the background, one save at a time."""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict, namedtuple
from pathlib import Path

import pytest
import torch

from clusterkit.errors import ClusterkitError
from clusterkit.resilience import checkpoint as checkpoint_module
from clusterkit.resilience.checkpoint import CheckpointManager


class GatedWriter:
    """Stands in for the file writer: holds every write until the test opens the gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.active = 0
        self.most_active = 0
        self.lock = threading.Lock()
        self.real = checkpoint_module._write_torch_file

    def __call__(self, state, path, *rest):
        with self.lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        self.started.set()
        try:
            assert self.gate.wait(timeout=30)
            return self.real(state, path, *rest)
        finally:
            with self.lock:
                self.active -= 1


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch) -> GatedWriter:
    writer = GatedWriter()
    monkeypatch.setattr(checkpoint_module, "_write_torch_file", writer)
    return writer


def test_saved_state_is_the_state_at_call_time(tmp_path: Path, gated: GatedWriter) -> None:
    manager = CheckpointManager(tmp_path)
    weights = torch.zeros(1000)
    state = {"model": {"w": weights, "tied": weights}, "step": 1}

    manager.save_async(1, state)
    weights.add_(1)  # the training loop moves on at once
    state["step"] = 2
    gated.gate.set()
    committed = manager.wait()
    manager.close()

    assert committed.step == 1 and manager.latest() == committed
    loaded = manager.load()
    assert torch.equal(loaded["model"]["w"], torch.zeros(1000))
    assert loaded["model"]["w"] is loaded["model"]["tied"]  # tied weights stay tied
    assert loaded["step"] == 1


def test_at_most_one_save_in_flight(tmp_path: Path, gated: GatedWriter) -> None:
    manager = CheckpointManager(tmp_path, keep=5)
    manager.save_async(1, {"w": torch.ones(10)})
    assert gated.started.wait(timeout=30)
    second = threading.Thread(target=manager.save_async, args=(2, {"w": torch.ones(10) * 2}))
    second.start()
    second.join(timeout=0.3)
    assert second.is_alive(), "a second save_async returned while the first was still writing"
    gated.gate.set()
    second.join(timeout=30)
    manager.close()

    assert gated.most_active == 1
    assert manager.latest().step == 2
    assert torch.equal(manager.load()["w"], torch.ones(10) * 2)


def test_background_error_surfaces_on_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def disk_full(state, path, *rest):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_module, "_write_torch_file", disk_full)
    manager = CheckpointManager(tmp_path)
    manager.save_async(1, {"w": torch.ones(3)})
    with pytest.raises(ClusterkitError, match="no space left"):
        manager.wait()
    assert manager.latest() is None
    assert not list(tmp_path.glob(".pending-*"))


def test_background_error_surfaces_on_next_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def broken_disk(state, path, *rest):
        calls.append(path)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(checkpoint_module, "_write_torch_file", broken_disk)
    manager = CheckpointManager(tmp_path)
    manager.save_async(1, {"w": torch.ones(3)})
    with pytest.raises(ClusterkitError, match="Input/output error"):
        manager.save_async(2, {"w": torch.ones(3)})
    assert len(calls) == 1  # the failed call did not start another save
    manager.close()


def test_host_copy_keeps_container_types_and_reuses_buffers(tmp_path: Path) -> None:
    Pair = namedtuple("Pair", "left right")
    manager = CheckpointManager(tmp_path)
    state = OrderedDict(pair=Pair(torch.ones(2), [torch.zeros(3), 5]), name="run")

    first = manager._copy_to_host(state, pin_memory=False)
    assert isinstance(first, OrderedDict) and isinstance(first["pair"], Pair)
    assert first["pair"].left is not state["pair"].left
    assert torch.equal(first["pair"].left, torch.ones(2)) and first["pair"].right[1] == 5
    second = manager._copy_to_host(state, pin_memory=False)
    assert second["pair"].left.data_ptr() == first["pair"].left.data_ptr()


def test_background_saves_run_below_the_training_loop_priority(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    niceness = []
    real = checkpoint_module._write_torch_file

    def noting_priority(*args):
        niceness.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return real(*args)

    monkeypatch.setattr(checkpoint_module, "_write_torch_file", noting_priority)
    manager = CheckpointManager(tmp_path)
    manager.save(1, {"w": torch.ones(3)})
    manager.save_async(2, {"w": torch.ones(3)})
    manager.close()
    foreground, background = niceness
    assert background > foreground == os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert manager.latest().step == 2

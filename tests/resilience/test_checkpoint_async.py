"""save_async: the state is taken in the call, made durable in the background, one save at a time.

Two paths: state in host memory is written into the page cache during the call ("host"); state on
an accelerator is copied to host buffers and written in the background ("device"). This machine
has no accelerator, so the device path is taken by telling the manager the state is not in host
memory; the copy itself is real.
"""

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
from clusterkit.resilience import checkpoint_files
from clusterkit.resilience.checkpoint import CheckpointManager


@pytest.fixture(params=["host", "device"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "device":
        monkeypatch.setattr(checkpoint_module, "_in_host_memory", lambda state: False)
    return request.param


# What a save writes into: a file filled during the call, or host buffers written out in the background.
SINKS = (checkpoint_files.ChecksummedFile, checkpoint_files.SpooledChecksummedFile)


class GatedDurability:
    """Holds every file's fsync (the background part of either path) until the test opens the gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.active = 0
        self.most_active = 0
        self.lock = threading.Lock()
        self.real = {kind: kind.finish for kind in SINKS}

    def finish(self, sink: checkpoint_files.ChecksummedFile) -> tuple[int, str]:
        with self.lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        self.started.set()
        try:
            assert self.gate.wait(timeout=30)
            return self.real[type(sink)](sink)
        finally:
            with self.lock:
                self.active -= 1


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch) -> GatedDurability:
    gate = GatedDurability()
    for kind in SINKS:
        monkeypatch.setattr(kind, "finish", lambda sink: gate.finish(sink))
    return gate


def test_saved_state_is_the_state_at_call_time(tmp_path: Path, gated: GatedDurability, path: str) -> None:
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


def test_host_state_is_in_host_buffers_when_the_call_returns(tmp_path: Path, gated: GatedDurability) -> None:
    manager = CheckpointManager(tmp_path)
    weights = torch.ones(1_000_000)
    manager.save_async(1, {"w": weights})
    weights.zero_()  # serialized during the call: the training loop may change it at once
    assert gated.started.wait(timeout=30)  # the background thread is about to write
    (pending,) = tmp_path.glob(".pending-step-00000001-*/rank-00000.pt")
    assert pending.stat().st_size == 0 and manager.latest() is None  # nothing written, nothing committed
    gated.gate.set()
    assert manager.wait().step == 1
    assert torch.equal(manager.load()["w"], torch.ones(1_000_000))
    assert manager._spool._free  # kept for the next save...
    manager.close()
    assert not manager._spool._free  # ...until close()


def test_at_most_one_save_in_flight(tmp_path: Path, gated: GatedDurability, path: str) -> None:
    manager = CheckpointManager(tmp_path, keep=5)
    manager.save_async(1, {"w": torch.ones(10)})
    assert gated.started.wait(timeout=30)
    second = threading.Thread(target=manager.save_async, args=(2, {"w": torch.ones(10) * 2}))
    second.start()
    second.join(timeout=0.3)
    assert second.is_alive(), "a second save_async returned while the first was still in flight"
    gated.gate.set()
    second.join(timeout=30)
    manager.close()

    assert gated.most_active == 1
    assert manager.latest().step == 2
    assert torch.equal(manager.load()["w"], torch.ones(10) * 2)


def test_an_error_writing_host_state_is_raised_by_the_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def disk_full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_module, "_start_torch_file", disk_full)
    manager = CheckpointManager(tmp_path)
    with pytest.raises(ClusterkitError, match="no space left"):
        manager.save_async(1, {"w": torch.ones(3)})
    assert manager.wait() is None
    assert manager.latest() is None
    assert not list(tmp_path.glob(".pending-*"))


def test_background_error_surfaces_on_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    def disk_full(sink):
        raise OSError(errno.ENOSPC, "No space left on device")

    for kind in SINKS:
        monkeypatch.setattr(kind, "finish", disk_full)
    manager = CheckpointManager(tmp_path)
    manager.save_async(1, {"w": torch.ones(3)})
    with pytest.raises(ClusterkitError, match="no space left"):
        manager.wait()
    assert manager.latest() is None
    assert not list(tmp_path.glob(".pending-*"))


def test_background_error_surfaces_on_next_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    calls = []

    def broken_disk(sink):
        calls.append(sink.path)
        raise OSError(errno.EIO, "Input/output error")

    for kind in SINKS:
        monkeypatch.setattr(kind, "finish", broken_disk)
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

    first = manager._host_copies.copy(state, pin_memory=False)
    assert isinstance(first, OrderedDict) and isinstance(first["pair"], Pair)
    assert first["pair"].left is not state["pair"].left
    assert torch.equal(first["pair"].left, torch.ones(2)) and first["pair"].right[1] == 5
    second = manager._host_copies.copy(state, pin_memory=False)
    assert second["pair"].left.data_ptr() == first["pair"].left.data_ptr()


def test_only_state_entirely_in_host_memory_is_written_during_the_call() -> None:
    host = {"model": [torch.ones(2), (torch.zeros(1), 3)], "step": 4}
    assert checkpoint_module._in_host_memory(host)
    meta = {"model": [torch.ones(2), (torch.empty(1, device="meta"), 3)]}  # stands in for an accelerator
    assert not checkpoint_module._in_host_memory(meta)


def test_background_work_runs_below_the_training_loop_priority(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               path: str) -> None:
    niceness = []
    real = {kind: kind.finish for kind in SINKS}

    def noting_priority(sink):
        niceness.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return real[type(sink)](sink)

    for kind in SINKS:
        monkeypatch.setattr(kind, "finish", noting_priority)
    manager = CheckpointManager(tmp_path)
    manager.save(1, {"w": torch.ones(3)})
    manager.save_async(2, {"w": torch.ones(3)})
    manager.close()
    foreground, background = niceness
    assert background > foreground == os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert manager.latest().step == 2

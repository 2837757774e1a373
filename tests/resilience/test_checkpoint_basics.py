"""Saving, finding and loading checkpoints; what latest() skips; retention; a full disk."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import torch
from tests.resilience.resilience_helpers import assert_state_is, flip_byte, state_for

from clusterkit.errors import ClusterkitError, NotFound
from clusterkit.resilience import checkpoint_files, checksums, retention
from clusterkit.resilience.checkpoint import CheckpointManager, verify_checkpoint


def step_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("step-"))


def test_round_trip(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=3)
    committed = manager.save(12, state_for(12))

    found = manager.latest()
    assert found == committed
    assert found.step == 12
    assert found.path == tmp_path / "step-00000012"
    manifest = found.manifest
    assert manifest["format"] == "clusterkit-checkpoint" and manifest["version"] == 1
    assert manifest["step"] == 12 and manifest["kind"] == "torch" and manifest["world_size"] == 1
    assert manifest["digest_algorithm"] == "xxh3-128-list-16MiB"
    entry = manifest["files"]["rank-00000.pt"]
    assert entry["size"] == (found.path / "rank-00000.pt").stat().st_size
    assert json.loads((found.path / "manifest.json").read_text()) == manifest
    assert (tmp_path / "latest").read_text().strip() == "step-00000012"
    assert_state_is(manager.load(), 12)
    # The file is an ordinary torch.save file.
    assert_state_is(torch.load(found.path / "rank-00000.pt"), 12)


def test_load_passes_map_location(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path)
    manager.save(1, {"w": torch.ones(3)})
    seen = []

    def on_cpu(storage, location):
        seen.append(location)
        return storage

    assert torch.equal(manager.load(map_location=on_cpu)["w"], torch.ones(3))
    assert seen == ["cpu"]


@pytest.mark.parametrize("checksum", ["xxh3", "sha256"])
def test_digest_spans_pieces_and_windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checksum: str) -> None:
    """Piece, staging and writeback boundaries that fall inside records hash the same as a re-read,
    and as the reads torch.load makes."""
    monkeypatch.setattr(checksums, "PIECE_BYTES", 1 << 20)
    monkeypatch.setattr(checkpoint_files, "STAGING_BYTES", 100_000)
    monkeypatch.setattr(checkpoint_files, "WRITEBACK_WINDOW_BYTES", 3 << 20)
    monkeypatch.setattr(checkpoint_files, "WRITEBACK_WINDOWS_AHEAD", 1)
    manager = CheckpointManager(tmp_path, checksum=checksum)
    state = {"a": torch.randn(2_500_001), "b": [torch.randn(1000) for _ in range(400)], "c": torch.randn(10)}
    manager.save(1, state)
    found = manager.latest(verify="full")
    assert found is not None and found.step == 1
    loaded = manager.load(found)
    assert torch.equal(loaded["a"], state["a"]) and torch.equal(loaded["b"][399], state["b"][399])


def test_retention_keeps_newest(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=2)
    for step in range(1, 6):
        manager.save(step, state_for(step, floats=10))
    manager.close()  # old checkpoints are deleted in the background after each commit
    assert step_dirs(tmp_path) == ["step-00000004", "step-00000005"]


def test_old_checkpoints_are_deleted_after_the_commit_off_the_save_path(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    manager = CheckpointManager(tmp_path, keep=1)
    manager.save(1, state_for(1))
    deleting, release = threading.Event(), threading.Event()
    discard = retention.discard

    def slow_discard(path: Path) -> None:
        deleting.set()
        assert release.wait(timeout=30)
        discard(path)

    monkeypatch.setattr(retention, "discard", slow_discard)
    committed = manager.save(2, state_for(2))  # returns while step 1's deletion is still waiting
    assert committed.step == 2 and deleting.wait(timeout=30)
    assert step_dirs(tmp_path) == ["step-00000001", "step-00000002"]
    assert manager.latest().step == 2
    release.set()
    manager.close()
    assert step_dirs(tmp_path) == ["step-00000002"]


def test_retention_never_deletes_newest_valid(tmp_path: Path) -> None:
    """A resumed run saves an older step while a newer, damaged one exists: keep=1 must keep
    the one it just wrote, because it is the newest valid checkpoint."""
    manager = CheckpointManager(tmp_path, keep=1)
    manager.save(5, state_for(5))
    manager.save(9, state_for(9))
    manager.close()
    flip_byte(tmp_path / "step-00000009" / "rank-00000.pt", 100)
    assert manager.resume() is None  # keep=1 dropped step 5; step 9 is damaged
    manager.save(6, state_for(6))
    manager.close()
    assert step_dirs(tmp_path) == ["step-00000006"]  # the damaged step 9 went too
    assert manager.latest(verify="full").step == 6
    assert_state_is(manager.load(), 6)


def test_a_damaged_checkpoint_of_the_right_size_is_not_one_of_the_kept(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=3)
    for step in (1, 2, 3):
        manager.save(step, state_for(step))
    manager.close()
    shard = tmp_path / "step-00000003" / "rank-00000.pt"
    size = shard.stat().st_size
    flip_byte(shard, size // 2)
    assert manager.latest().step == 3  # the cheap check cannot tell
    manager.save(4, state_for(4))
    manager.close()
    assert step_dirs(tmp_path) == ["step-00000001", "step-00000002", "step-00000004"]
    for step in (1, 2, 4):
        assert_state_is(manager.load(verify_checkpoint(tmp_path / f"step-{step:08d}")[0]), step)


def test_retention_reads_back_what_it_did_not_commit_or_what_changed_once(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    read_back = []
    verify_files = retention.verify_files

    def noting(checkpoint, names, pool=None):
        read_back.append(checkpoint.step)
        verify_files(checkpoint, names, pool)

    monkeypatch.setattr(retention, "verify_files", noting)
    manager = CheckpointManager(tmp_path, keep=2)
    for step in range(1, 6):
        manager.save(step, state_for(step, floats=10))
    manager.close()
    assert read_back == []  # its own, unchanged since their commit: their digests came from the bytes written
    assert step_dirs(tmp_path) == ["step-00000004", "step-00000005"]

    restarted = CheckpointManager(tmp_path, keep=2)  # a new process finds step 5 on disk
    for step in (6, 7):
        restarted.save(step, state_for(step, floats=10))
    restarted.close()
    assert read_back == [5]  # read back once, before it could stand for the kept

    shard = tmp_path / "step-00000007" / "rank-00000.pt"
    os.utime(shard)  # touched: perhaps written; its identity no longer stands for it
    restarted.save(8, state_for(8, floats=10))
    restarted.close()
    assert read_back == [5, 7] and step_dirs(tmp_path) == ["step-00000007", "step-00000008"]


def test_pointer_missing_stale_or_garbage_does_not_matter(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=3)
    for step in (1, 2, 3):
        manager.save(step, state_for(step, floats=10))
    pointer = tmp_path / "latest"

    pointer.unlink()
    assert manager.latest().step == 3
    pointer.write_text("step-00000001\n")  # a crash between rename and pointer update
    assert manager.latest().step == 3
    pointer.write_text("\x00garbage")
    assert manager.latest().step == 3
    pointer.write_text("step-00000003\n")
    (tmp_path / "step-00000003" / "rank-00000.pt").unlink()  # points at a broken one
    assert manager.latest().step == 2


def test_flipped_byte_is_caught_by_full_verification_and_on_load_not_by_sizes(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=3)
    manager.save(1, state_for(1))
    manager.save(2, state_for(2))
    shard = tmp_path / "step-00000002" / "rank-00000.pt"
    flip_byte(shard, shard.stat().st_size // 2)

    # The cheap check only compares sizes: that is its documented blind spot...
    assert manager.latest().step == 2
    # ...which loading covers: it verifies every piece and falls back to step 1.
    found, state = manager.resume()
    assert found.step == 1
    assert_state_is(state, 1)
    assert manager.latest(verify="full").step == 1
    assert verify_checkpoint(shard.parent)[1] == "rank-00000.pt does not match its checksum"


def test_truncated_file_is_skipped_even_by_size_check(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=3)
    manager.save(1, state_for(1))
    manager.save(2, state_for(2))
    shard = tmp_path / "step-00000002" / "rank-00000.pt"
    os.truncate(shard, shard.stat().st_size - 1)
    assert manager.latest(verify="size").step == 1


@pytest.mark.parametrize("manifest_text", [None, "{not json", '{"format": "other"}'])
def test_directory_without_valid_manifest_is_skipped(tmp_path: Path, manifest_text: str | None) -> None:
    manager = CheckpointManager(tmp_path, keep=3)
    manager.save(1, state_for(1))
    manager.close()  # retention would delete the foreign directory as debris
    foreign = tmp_path / "step-00000099"
    foreign.mkdir()
    (foreign / "rank-00000.pt").write_bytes(b"half a checkpoint")
    if manifest_text is not None:
        (foreign / "manifest.json").write_text(manifest_text)
    assert manager.latest().step == 1


def test_manifest_step_must_match_directory(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=3)
    manager.save(1, state_for(1))
    manager.close()
    os.rename(tmp_path / "step-00000001", tmp_path / "step-00000007")
    assert manager.latest() is None


def test_debris_of_crashed_saves_is_removed_by_next_commit(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=3)
    crashed = tmp_path / ".pending-step-00000004-deadbeef"
    crashed.mkdir()
    (crashed / "rank-00000.pt").write_bytes(b"partial")
    later = tmp_path / ".pending-step-00000009-cafecafe"  # maybe another rank's save in progress
    later.mkdir()
    manager.save(5, state_for(5, floats=10))
    manager.close()
    assert not crashed.exists()
    assert later.exists()
    assert manager.latest().step == 5


def test_saving_a_step_again_replaces_it(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=3)
    manager.save(3, {"v": 1})
    manager.save(3, {"v": 2})
    manager.close()
    assert manager.load()["v"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000003"]


def test_nothing_to_load(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path / "never-created")
    assert manager.latest() is None
    with pytest.raises(NotFound, match="no valid checkpoint"):
        manager.load()


def test_keep_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ClusterkitError, match="keep"):
        CheckpointManager(tmp_path, keep=0)


def test_full_disk_leaves_earlier_checkpoints_intact(tiny_filesystem: Path) -> None:
    manager = CheckpointManager(tiny_filesystem, keep=3)
    manager.save(1, {"w": torch.ones(100_000)})  # 400 kB of 2 MiB

    with pytest.raises(ClusterkitError) as raised:
        manager.save(2, {"w": torch.ones(1_000_000)})  # 4 MB does not fit

    message = str(raised.value)
    assert "no space left" in message
    assert str(tiny_filesystem) in message
    assert "MiB free" in message
    assert sorted(p.name for p in tiny_filesystem.iterdir()) == ["latest", "step-00000001"]
    found = manager.latest()
    assert found.step == 1
    assert torch.equal(manager.load(found)["w"], torch.ones(100_000))


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_dcp_save_and_load_single_process(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=2)
    state = {"weight": torch.arange(12.0).reshape(3, 4), "nested": {"bias": torch.ones(4)}}
    committed = manager.save_dcp(4, state)

    found = manager.latest()
    assert found == committed and found.manifest["kind"] == "dcp"
    assert ".metadata" in found.manifest["files"]
    target = {"weight": torch.zeros(3, 4), "nested": {"bias": torch.zeros(4)}}
    manager.load_dcp(target)
    assert torch.equal(target["weight"], state["weight"]) and torch.equal(target["nested"]["bias"], torch.ones(4))
    with pytest.raises(ClusterkitError, match="load_dcp"):
        manager.load()


def test_pending_block_that_raises_commits_nothing(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path)
    with pytest.raises(RuntimeError, match="writer broke"):
        with manager.pending(3) as directory:
            (directory / "part").write_bytes(b"x")
            raise RuntimeError("writer broke")
    assert manager.latest() is None
    assert not list(tmp_path.glob(".pending-*"))


def test_a_save_writes_while_the_previous_checkpoint_is_read_back(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    reading, release = threading.Event(), threading.Event()
    verify_files = retention.verify_files

    def slow_read_back(checkpoint, names, pool=None):
        reading.set()
        assert release.wait(timeout=30)
        verify_files(checkpoint, names, pool)

    monkeypatch.setattr(retention, "verify_files", slow_read_back)
    earlier = CheckpointManager(tmp_path, keep=2)
    earlier.save(1, state_for(1))
    earlier.close()
    manager = CheckpointManager(tmp_path, keep=2)  # restarted: step 1 is not one it committed
    manager.save(2, state_for(2))
    assert reading.wait(timeout=30)  # step 1 is being read back
    manager.save_async(3, state_for(3))  # state in host memory: serialized during the call, then written
    assert list(tmp_path.glob(".pending-step-00000003-*/rank-00000.pt"))
    assert manager.latest().step == 2  # the commit waits for the read-back
    release.set()
    assert manager.wait().step == 3
    manager.close()
    assert step_dirs(tmp_path) == ["step-00000002", "step-00000003"]

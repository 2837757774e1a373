"""Checksums: what each algorithm catches, when it is checked, the format written before xxh3,
and failures of the hashing reported as themselves."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from pathlib import Path

import pytest
import torch
from tests.resilience.resilience_helpers import assert_state_is, flip_byte, state_for

from clusterkit.errors import ClusterkitError
from clusterkit.resilience.checkpoint import CheckpointManager, DamagedCheckpoint, verify_checkpoint
from clusterkit.resilience.checksums import ChecksumAlgorithm

BEFORE_XXH3 = Path(__file__).with_name("data") / "sha256-list-16MiB"  # written by clusterkit before xxh3


def old_format_run(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    shutil.copytree(BEFORE_XXH3, root)
    return root


def test_a_checkpoint_written_before_xxh3_still_verifies_and_loads(tmp_path: Path) -> None:
    manager = CheckpointManager(old_format_run(tmp_path), keep=1)
    found = manager.latest(verify="full")
    assert found is not None and found.step == 7
    assert found.manifest["digest_algorithm"] == "sha256-list-16MiB"
    # Its digest is the documented hash list: SHA-256 over the SHA-256 of each 16 MiB piece.
    data = (found.path / "rank-00000.pt").read_bytes()
    pieces = [hashlib.sha256(data[start : start + (16 << 20)]).digest() for start in range(0, len(data), 16 << 20)]
    assert found.manifest["files"]["rank-00000.pt"]["digest"] == hashlib.sha256(b"".join(pieces)).hexdigest()

    resumed, state = manager.resume()
    assert resumed.step == 7 and state["step"] == 7
    assert torch.equal(state["model"]["weight"], torch.arange(4096.0).reshape(64, 64))
    assert state["model"]["bias"].tolist() == [-7] * 7

    # The run goes on in the new format; the old checkpoint is retired like any other.
    manager.save(8, state_for(8))
    manager.close()
    assert sorted(p.name for p in manager.root.glob("step-*")) == ["step-00000008"]
    resumed, state = manager.resume()
    assert resumed.manifest["digest_algorithm"] == "xxh3-128-list-16MiB"
    assert_state_is(state, 8)


def test_a_flipped_byte_in_a_checkpoint_written_before_xxh3_is_caught(tmp_path: Path) -> None:
    manager = CheckpointManager(old_format_run(tmp_path))
    shard = manager.root / "step-00000007" / "rank-00000.pt"
    flip_byte(shard, shard.stat().st_size // 2)
    assert verify_checkpoint(shard.parent)[1] == "rank-00000.pt does not match its checksum"
    with pytest.raises(DamagedCheckpoint):
        manager.load(manager.latest())
    assert manager.resume() is None


@pytest.mark.parametrize("checksum", ["xxh3", "sha256"])
@pytest.mark.parametrize("where", ["zip header", "tensor data", "zip directory"])
def test_a_flipped_byte_is_caught_by_the_checksum_and_while_loading(tmp_path: Path, checksum: str,
                                                                      where: str) -> None:
    manager = CheckpointManager(tmp_path, keep=3, checksum=checksum)
    manager.save(1, state_for(1))
    manager.save(2, state_for(2))
    shard = tmp_path / "step-00000002" / "rank-00000.pt"
    size = shard.stat().st_size
    flip_byte(shard, {"zip header": 20, "tensor data": size // 2, "zip directory": size - 30}[where])

    assert manager.latest().step == 2  # the cheap check sees sizes only
    assert verify_checkpoint(shard.parent, "full") == (None, "rank-00000.pt does not match its checksum")
    with pytest.raises(DamagedCheckpoint, match="rank-00000.pt does not match its checksum"):
        manager.load(manager.latest())  # an explicit checkpoint: exactly that one, or an error
    found, state = manager.resume()  # the newest that verifies as it loads
    assert found.step == 1
    assert_state_is(state, 1)
    assert_state_is(manager.load(), 1)


def test_the_algorithm_is_named_in_the_manifest_and_both_read_alike(tmp_path: Path) -> None:
    for checksum, name in (("sha256", "sha256-list-16MiB"), ("xxh3", "xxh3-128-list-16MiB")):
        manager = CheckpointManager(tmp_path / checksum, checksum=checksum)
        manager.save(3, state_for(3))
        assert json.loads((tmp_path / checksum / "step-00000003" / "manifest.json").read_text())[
            "digest_algorithm"] == name
        assert_state_is(CheckpointManager(tmp_path / checksum).load(), 3)  # readers need not know


def test_an_unknown_algorithm_is_skipped_with_the_reason(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path)
    manager.save(1, state_for(1))
    manager.save(2, state_for(2))
    manifest_path = tmp_path / "step-00000002" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "digest_algorithm": "md5-list-16MiB"}))
    checkpoint, problem = verify_checkpoint(tmp_path / "step-00000002", "size")
    assert checkpoint is None
    assert problem == ("unknown digest algorithm 'md5-list-16MiB' "
                       "(this clusterkit reads xxh3-128-list-16MiB, sha256-list-16MiB)")
    assert manager.latest().step == 1


def test_an_unknown_checksum_choice_names_the_value_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ClusterkitError, match="checksum must be 'xxh3' or 'sha256', got 'md5'") as raised:
        CheckpointManager(tmp_path, checksum="md5")  # type: ignore[arg-type]
    assert "tamper evidence" in str(raised.value)


class HasherThatBreaksOffTheMainThread:
    """Hashes like SHA-256 on the caller's thread and fails on the pool's threads."""

    def __init__(self) -> None:
        self._inner = hashlib.sha256()

    def update(self, data: object) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise ValueError("the hasher broke")
        self._inner.update(data)

    def digest(self) -> bytes:
        return self._inner.digest()


def test_a_failure_in_a_hashing_thread_is_reported_as_itself(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path)
    manager.checksum = ChecksumAlgorithm("breaks-in-threads", "sha256", HasherThatBreaksOffTheMainThread,
                                         parallel_bytes=1)
    with pytest.raises(ValueError, match="the hasher broke") as raised:
        manager.save(1, {"w": torch.randn(1_000_000)})  # 4 MB: its pieces hash on pool threads
    assert "PytorchStreamWriter" not in str(raised.value)
    assert not list(tmp_path.glob(".pending-*"))
    assert manager.latest() is None

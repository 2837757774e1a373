"""save_dcp: DCP's own file format, checksummed while it is written, read back by DCP's own reader."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from tests.resilience.resilience_helpers import flip_byte
from torch.distributed.checkpoint import FileSystemReader

from clusterkit.resilience import checkpoint_commit
from clusterkit.resilience.checkpoint import CheckpointManager, DamagedCheckpoint, verify_checkpoint

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def varied_state() -> dict[str, object]:
    base = torch.randn(8, 6)
    return {
        "matrix": torch.randn(5, 7),
        "transposed": torch.randn(6, 4).t(),
        "slice": base[2:5],  # a view: DCP saves it without the rest of its storage
        "same_shape_again": torch.randn(5, 7),
        "bf16": torch.randn(33).to(torch.bfloat16),
        "int": torch.arange(10),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "parameter": torch.nn.Parameter(torch.randn(4)),
        "needs_grad": torch.randn(3, requires_grad=True),
        "many": [torch.full((16,), float(i)) for i in range(50)],
        "step": 12,
    }


def torch_save_bytes(tensor: torch.Tensor) -> bytes:
    """What DCP's own writer stores for a tensor item: torch.save of its compact CPU copy, no CRC."""
    tensor = tensor.detach().cpu()
    if tensor.untyped_storage().nbytes() != tensor.nbytes:
        tensor = tensor.clone()
    before = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)
    try:
        buffer = io.BytesIO()
        torch.save(tensor, buffer)
        return buffer.getvalue()
    finally:
        torch.serialization.set_crc32_options(before)


def test_items_are_stored_byte_for_byte_as_dcp_stores_them(tmp_path: Path) -> None:
    state = varied_state()
    committed = CheckpointManager(tmp_path).save_dcp(1, state)
    metadata = FileSystemReader(committed.path).read_metadata()
    flat = {**{k: v for k, v in state.items() if k != "many"}, **{f"many.{i}": t for i, t in enumerate(state["many"])}}
    compared = 0
    for index, where in metadata.storage_data.items():
        value = flat[index.fqn]
        if not isinstance(value, torch.Tensor):
            continue
        with open(committed.path / where.relative_path, "rb") as f:
            f.seek(where.offset)
            assert f.read(where.length) == torch_save_bytes(value), index.fqn
        compared += 1
    assert compared == len(flat) - 1  # every tensor; "step" is stored as bytes


def test_dcp_reads_back_every_kind_of_tensor(tmp_path: Path) -> None:
    state = varied_state()
    manager = CheckpointManager(tmp_path)
    manager.save_dcp(1, state)
    target = {key: (torch.zeros_like(value.detach()) if isinstance(value, torch.Tensor) else value)
              for key, value in varied_state().items()}
    target["many"] = [torch.zeros(16) for _ in range(50)]
    target["step"] = 0
    manager.load_dcp(target)
    for key, value in state.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(target[key], value.detach()), key
    assert all(torch.equal(target["many"][i], state["many"][i]) for i in range(50))
    assert target["step"] == 12


def test_files_are_checksummed_while_written_not_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    read_back: list[str] = []
    digest_files = checkpoint_commit.digest_files

    def noting(directory, names, algorithm):
        read_back.extend(names)
        return digest_files(directory, names, algorithm)

    monkeypatch.setattr(checkpoint_commit, "digest_files", noting)
    committed = CheckpointManager(tmp_path).save_dcp(1, varied_state())
    assert read_back == []
    assert sorted(committed.manifest["files"]) == [".metadata", "__0_0.distcp"]
    monkeypatch.setattr(checkpoint_commit, "digest_files", digest_files)
    assert verify_checkpoint(committed.path, "full")[0] == committed  # the recorded digests are right


def test_a_flipped_byte_in_a_dcp_checkpoint_is_caught_before_dcp_reads_it(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep=3)
    manager.save_dcp(1, {"w": torch.ones(1000)})
    manager.save_dcp(2, {"w": torch.full((1000,), 2.0)})
    data = tmp_path / "step-00000002" / "__0_0.distcp"
    flip_byte(data, data.stat().st_size // 2)
    target = {"w": torch.zeros(1000)}
    assert manager.load_dcp(target).step == 1
    assert torch.equal(target["w"], torch.ones(1000))
    with pytest.raises(DamagedCheckpoint):
        manager.load_dcp(target, manager.latest())

"""A `torch.distributed.checkpoint` storage writer that checksums files while it writes them.

Files are DCP's own format, read back by DCP's stock FileSystemReader: one `.distcp` file per rank
holding each item as the bytes of `torch.save(item)`, and `.metadata`. Every byte goes through
`ChecksummedFile`, so the checkpoint's digests exist when DCP is done and nothing is read back.

DCP's own writer calls `torch.save` once per tensor; with thousands of small tensors that, and
its other per-item costs, take longer than the disk. Here a tensor's `torch.save` bytes are built
from a layout learned once per tensor shape: with CRC32 off they are the header bytes, the
tensor's bytes, and the trailer bytes, and only the tensor's bytes depend on its values. A
self-check at first use confirms that of the installed torch (it compares real saves of two
tensors that differ only in their values); where it does not hold, or for tensors that are not
plain dense CPU tensors, the writer calls `torch.save` as DCP would. Imports torch: import it only
where DCP is used.
"""

from __future__ import annotations

import ctypes
import functools
import io
import os
import threading
import zipfile
from collections.abc import Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import DEFAULT_SUFFIX, FileSystem, _StorageInfo
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from clusterkit.resilience.checkpoint_files import ChecksummedFile
from clusterkit.resilience.checkpoint_manifest import FileEntries
from clusterkit.resilience.checksums import ChecksumAlgorithm

_Layout = tuple[bytes, bytes]  # torch.save's bytes before and after the tensor's bytes


class _Stream:
    """What DCP writes into: a ChecksummedFile whose close() makes it durable and records it."""

    def __init__(self, sink: ChecksummedFile, record: Any) -> None:
        self._sink = sink
        self._record = record
        self.write = sink.write
        self.tell = sink.tell

    def flush(self) -> None:
        """DCP flushes after each item; the bytes reach the disk in close()."""

    def close(self) -> None:
        if not self._sink.closed:
            self._record(*self._sink.finish())
            self._sink.close()


class _ChecksummingFileSystem(FileSystem):
    def __init__(self, directory: Path, algorithm: ChecksumAlgorithm, files: FileEntries,
                 pool: Executor) -> None:
        self._directory = directory
        self._algorithm = algorithm
        self._files = files
        self._pool = pool
        self._lock = threading.Lock()

    def _name(self, path: str | os.PathLike[str]) -> str:
        return str(Path(path).relative_to(self._directory))

    @contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[Any]:
        if "w" not in mode:
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        sink = ChecksummedFile(Path(path), self._algorithm, self._pool)

        def record(size: int, digest: str) -> None:
            with self._lock:
                self._files[self._name(path)] = {"size": size, "digest": digest}

        stream = _Stream(sink, record)
        try:
            yield stream
            stream.close()  # DCP does not close `.metadata` itself
        finally:
            sink.close()

    def rename(self, path: str | os.PathLike[str], new_path: str | os.PathLike[str]) -> None:
        super().rename(path, new_path)
        with self._lock:
            entry = self._files.pop(self._name(path), None)
            if entry is not None:
                self._files[self._name(new_path)] = entry

    def rm_file(self, path: str | os.PathLike[str]) -> None:
        super().rm_file(path)
        with self._lock:
            self._files.pop(self._name(path), None)


class ChecksummingWriter(FileSystemWriter):
    """DCP's FileSystemWriter into `directory`, recording each file's size and digest in `files`."""

    def __init__(self, directory: Path, algorithm: ChecksumAlgorithm, files: FileEntries,
                 pool: Executor) -> None:
        # Our streams fsync in close(), after their last bytes; DCP's own fsync would come too early.
        super().__init__(directory, sync_files=False)
        self.fs = _ChecksummingFileSystem(Path(directory), algorithm, files, pool)
        self._layouts: dict[tuple[Any, ...], _Layout | None] = {}

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        """All of this rank's items into one file, byte for byte as DCP's own writer lays them out."""
        name = f"{plan.storage_data.prefix}0{DEFAULT_SUFFIX}"
        results = []
        with self.fs.create_stream(self.fs.concat_path(self.path, name), "wb") as stream:
            for item in sorted(plan.items, key=lambda item: item.type != WriteItemType.BYTE_IO):
                offset = stream.tell()
                data = planner.resolve_data(item)
                if item.type == WriteItemType.BYTE_IO:
                    stream.write(data.getbuffer())
                else:
                    self._write_tensor(stream, data)
                length = stream.tell() - offset
                results.append(WriteResult(index=item.index, size_in_bytes=length,
                                           storage_data=_StorageInfo(name, offset, length)))
        future: Future[list[WriteResult]] = Future()
        future.set_result(results)
        return future

    def _write_tensor(self, stream: _Stream, tensor: torch.Tensor) -> None:
        tensor = tensor.detach().cpu()
        if tensor.untyped_storage().nbytes() != tensor.nbytes:
            tensor = tensor.clone()  # as DCP does: a view is saved without the rest of its storage
        key = _layout_key(tensor)
        if key is not None and key not in self._layouts:
            self._layouts[key] = _layout_like(tensor)
        layout = self._layouts.get(key) if key is not None else None
        if layout is None:
            torch.save(tensor, stream)
            return
        before, after = layout
        stream.write(before)
        storage = tensor.untyped_storage()
        if storage.nbytes():
            stream.write((ctypes.c_char * storage.nbytes()).from_address(storage.data_ptr()))
        stream.write(after)


def _layout_key(tensor: torch.Tensor) -> tuple[Any, ...] | None:
    """What torch.save's bytes around a tensor's data depend on; None where we do not know."""
    crc32 = torch.serialization.get_crc32_options()
    plain = (type(tensor) is torch.Tensor and tensor.layout == torch.strided and not tensor.is_quantized
             and not tensor.is_conj() and not tensor.is_neg() and not tensor.__dict__ and _layouts_are_exact(crc32))
    if not plain:
        return None
    return (tensor.dtype, tuple(tensor.shape), tensor.stride(), tensor.storage_offset(),
            tensor.untyped_storage().nbytes(), tensor.requires_grad, crc32)


def _layout_like(tensor: torch.Tensor) -> _Layout | None:
    """The bytes torch.save writes around the data of any tensor shaped like `tensor`."""
    like = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype).requires_grad_(tensor.requires_grad)
    buffer = io.BytesIO()
    torch.save(like, buffer)
    return _split_at_data(buffer.getvalue(), tensor.untyped_storage().nbytes())


def _split_at_data(saved: bytes, data_bytes: int) -> _Layout | None:
    """(bytes before, bytes after) the one storage record of a torch.save'd tensor."""
    with zipfile.ZipFile(io.BytesIO(saved)) as archive:
        records = [info for info in archive.infolist() if info.filename.endswith("/data/0")]
    if len(records) != 1 or records[0].file_size != data_bytes or records[0].compress_type != zipfile.ZIP_STORED:
        return None
    header = saved[records[0].header_offset : records[0].header_offset + 30]
    name_length, extra_length = int.from_bytes(header[26:28], "little"), int.from_bytes(header[28:30], "little")
    start = records[0].header_offset + 30 + name_length + extra_length
    return saved[:start], saved[start + data_bytes :]


@functools.cache
def _layouts_are_exact(crc32: bool) -> bool:
    """Whether this torch's save bytes around a tensor's data depend only on its shape and type
    (with CRC32 on they do not: the CRC covers the data)."""
    saves = []
    for fill in (0.0, 1.0):
        buffer = io.BytesIO()
        torch.save(torch.full((2, 3), fill), buffer)
        saves.append(buffer.getvalue())
    layouts = [_split_at_data(saved, 24) for saved in saves]
    learned = _layout_like(torch.empty(2, 3))
    return layouts[0] is not None and layouts[0] == layouts[1] == learned

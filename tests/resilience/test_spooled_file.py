"""The spooled file of background saves: the same bytes and digest as the page-cache writer, with O_DIRECT
where the file system takes it and without where it does not, its host buffers reused from save to save."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

from clusterkit.resilience import checkpoint_files
from clusterkit.resilience.checkpoint_files import ChecksummedFile, SpooledChecksummedFile, SpoolBuffers
from clusterkit.resilience.checksums import algorithm_for

# Writes of every awkward kind: tiny, unaligned, exactly one chunk, and across chunk boundaries.
CHUNK = 64 << 10
WRITES = [b"x", os.urandom(4095), os.urandom(CHUNK), os.urandom(3 * CHUNK + 17), b"", os.urandom(100)]


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint_files, "SPOOL_CHUNK_BYTES", CHUNK)


def write(kind: type, path: Path, buffers: SpoolBuffers) -> tuple[int, str]:
    algorithm = algorithm_for("xxh3")
    sink = kind(path, algorithm, None) if kind is ChecksummedFile else kind(path, algorithm, None, buffers)
    try:
        for data in WRITES:
            sink.write(memoryview(data))
        return sink.finish()
    finally:
        sink.close()


@pytest.mark.parametrize("where", ["disk", "tmpfs"])
def test_the_same_bytes_and_digest_as_the_page_cache_writer(tmp_path: Path, where: str) -> None:
    directory = tmp_path if where == "disk" else Path("/dev/shm")
    spooled, plain = directory / f"spooled-{os.getpid()}", directory / f"plain-{os.getpid()}"
    try:
        buffers = SpoolBuffers()
        assert write(SpooledChecksummedFile, spooled, buffers) == write(ChecksummedFile, plain, buffers)
        assert spooled.read_bytes() == plain.read_bytes() == b"".join(WRITES)
    finally:
        spooled.unlink(missing_ok=True)
        plain.unlink(missing_ok=True)


def test_o_direct_is_used_where_the_file_system_takes_it(tmp_path: Path) -> None:
    sink = SpooledChecksummedFile(tmp_path / "f", algorithm_for("xxh3"), None, SpoolBuffers())
    try:
        assert fcntl.fcntl(sink._fd, fcntl.F_GETFL) & os.O_DIRECT, "ext4 takes O_DIRECT: the spooled file uses it"
    finally:
        sink.close()


def test_a_file_system_refusing_direct_writes_gets_buffered_ones(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.pwrite
    refused = []

    def refuse_direct(fd: int, data: memoryview, offset: int) -> int:
        if os.O_DIRECT & fcntl.fcntl(fd, fcntl.F_GETFL):
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", refuse_direct)
    size, _ = write(SpooledChecksummedFile, tmp_path / "f", SpoolBuffers())
    assert refused == [0] and size == len(b"".join(WRITES))
    assert (tmp_path / "f").read_bytes() == b"".join(WRITES)


def test_other_write_errors_surface_and_buffers_come_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    buffers = SpoolBuffers()
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda *args: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space")))
    with pytest.raises(OSError, match="No space"):
        write(SpooledChecksummedFile, tmp_path / "f", buffers)
    monkeypatch.setattr(os, "pwrite", real)
    held = list(buffers._free)
    assert len(held) == 5  # every chunk of the failed save, ready for the next one
    write(SpooledChecksummedFile, tmp_path / "g", buffers)
    assert sorted(map(id, buffers._free)) == sorted(map(id, held))  # reused, none new

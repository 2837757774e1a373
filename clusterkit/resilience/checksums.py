"""Checksums of checkpoint files: which algorithm catches what, and how pieces hash in parallel.

A file's digest is a hash list: the file is cut into 16 MiB pieces, each piece is hashed on its own
(so pieces hash on several cores, in any order), and the file's digest is the hash of the
concatenated piece digests. `sha256sum` does not produce it; `verify_checkpoint` does.

- "xxh3-128-list-16MiB" (checksum="xxh3", the default): XXH3 with 128 bits, about 10 GB/s per core
  or more. It catches what goes wrong by accident: torn and lost writes, truncation, bit rot,
  misdirected writes, a copy from the wrong file. It is not cryptographic: whoever can write the
  files can make damaged bytes match it.
- "sha256-list-16MiB" (checksum="sha256"; also every checkpoint written before xxh3 was the
  default): SHA-256, about 1.5 GB/s per core. It catches the same accidents and is tamper evidence
  as well, as long as the digests are compared with a copy an attacker cannot rewrite (a manifest
  next to the files proves nothing against someone who can write both).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, Literal, Protocol

from clusterkit.errors import ClusterkitError
from clusterkit.lean_dataclass import lean_dataclass

Checksum = Literal["xxh3", "sha256"]
"""What a user chooses: "xxh3" (fast, catches accidents) or "sha256" (also tamper evidence)."""

PIECE_BYTES = 16 << 20
GAP_BYTES = 64 << 10  # bytes a reader skipped that we read ourselves rather than leave for the end


class Hasher(Protocol):
    def update(self, data: Any, /) -> None: ...
    def digest(self) -> bytes: ...


@lean_dataclass(frozen=True)
class ChecksumAlgorithm:
    name: str  # as manifests name it
    choice: Checksum
    new: Callable[[], Hasher]
    parallel_bytes: int  # less than this is hashed faster in the calling thread than handed to another

    def combine(self, piece_digests: list[bytes]) -> str:
        """The file's digest from its pieces' digests, in file order."""
        combined = self.new()
        combined.update(b"".join(piece_digests))
        return combined.digest().hex()


def _xxh3_128() -> Hasher:
    import xxhash

    return xxhash.xxh3_128()


# A hand-off to a pool thread costs up to a GIL switch (~0.1-0.5 ms): 8 MiB of XXH3, 0.2 MiB of SHA-256.
XXH3 = ChecksumAlgorithm("xxh3-128-list-16MiB", "xxh3", _xxh3_128, parallel_bytes=8 << 20)
SHA256 = ChecksumAlgorithm("sha256-list-16MiB", "sha256", hashlib.sha256, parallel_bytes=1 << 20)
ALGORITHMS = {algorithm.name: algorithm for algorithm in (XXH3, SHA256)}


def algorithm_for(choice: str) -> ChecksumAlgorithm:
    """The algorithm behind a user's `checksum=` choice."""
    for algorithm in ALGORITHMS.values():
        if algorithm.choice == choice:
            return algorithm
    raise ClusterkitError(
        f"checksum must be 'xxh3' or 'sha256', got {choice!r}",
        fix="checksum='xxh3' (fast; catches accidental damage) or 'sha256' (also tamper evidence)",
    )


def hash_threads() -> int:
    """Threads for hashing: the cores this process may run on, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def _piece_count(size: int) -> int:
    return max(1, -(-size // PIECE_BYTES))  # an empty file is one empty piece


class StreamDigest:
    """The digest of a byte stream fed in order; large updates hash their pieces on pool threads."""

    def __init__(self, algorithm: ChecksumAlgorithm, pool: Executor | None) -> None:
        self.algorithm = algorithm
        self._pool = pool
        self._digests: list[bytes] = []
        self._closed: list[Hasher] = []  # full pieces whose last update may still be running
        self._current = algorithm.new()
        self._filled = 0

    def update(self, view: memoryview) -> list[Future[None]]:
        """Start hashing `view`. Wait for the returned futures before the next update and before
        the memory under `view` changes."""
        self._digests += [piece.digest() for piece in self._closed]  # earlier updates are done
        self._closed = []
        parallel = self._pool is not None and len(view) >= self.algorithm.parallel_bytes
        futures = []
        while len(view):
            take = min(PIECE_BYTES - self._filled, len(view))
            if parallel:
                futures.append(self._pool.submit(self._current.update, view[:take]))  # type: ignore[union-attr]
            else:
                self._current.update(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == PIECE_BYTES:
                self._closed.append(self._current)
                self._current, self._filled = self.algorithm.new(), 0
        return futures

    def hexdigest(self) -> str:
        """The digest; every update's futures must have finished."""
        pieces = self._digests + [piece.digest() for piece in self._closed]
        if self._filled or not pieces:
            pieces.append(self._current.digest())
        return self.algorithm.combine(pieces)


class ReadVerifier:
    """Checks a file against its digest from the reads someone else makes, in whatever order.

    Each piece is hashed from the bytes the reader reads, as long as they arrive in order within the
    piece; small gaps (headers the reader skips) are read here; anything left when the reader is
    done is read in `finish`. So a reader that goes through the file once reads it once.
    """

    def __init__(self, fd: int, size: int, algorithm: ChecksumAlgorithm, pool: Executor | None) -> None:
        self._fd = fd
        self._size = size
        self._algorithm = algorithm
        self._pool = pool
        self._hashers = [algorithm.new() for _ in range(_piece_count(size))]
        self._hashed_to = [index * PIECE_BYTES for index in range(len(self._hashers))]

    def saw(self, offset: int, view: memoryview) -> None:
        """The bytes at `offset` are `view`; hash what continues a piece. Returns once hashed."""
        index = offset // PIECE_BYTES
        end = offset + len(view)
        if index < len(self._hashed_to) and self._hashed_to[index] == offset and end <= (index + 1) * PIECE_BYTES:
            self._hashers[index].update(view)  # the common case: the next bytes of one piece
            self._hashed_to[index] = end
            return
        work: list[tuple[Hasher, memoryview]] = []
        end = min(end, self._size)
        for index in range(offset // PIECE_BYTES, _piece_count(self._size)):
            piece_end = min((index + 1) * PIECE_BYTES, self._size)
            start, stop = max(offset, index * PIECE_BYTES), min(end, piece_end)
            if start >= stop:
                break
            hashed_to = self._hashed_to[index]
            if hashed_to < start:
                if start - hashed_to > GAP_BYTES:
                    continue  # far ahead of this piece's hashing: left for finish()
                self._hashers[index].update(_read_exactly(self._fd, hashed_to, start - hashed_to))
                hashed_to = start
            if stop > hashed_to:
                work.append((self._hashers[index], view[hashed_to - offset : stop - offset]))
                self._hashed_to[index] = stop
        _run(work, self._pool, self._algorithm)

    def finish(self) -> str:
        """Hash what the reader did not read; returns the file's digest."""
        rest = [(index, hashed_to) for index, hashed_to in enumerate(self._hashed_to)
                if hashed_to < min((index + 1) * PIECE_BYTES, self._size)]

        def hash_rest(index: int, hashed_to: int) -> None:
            end = min((index + 1) * PIECE_BYTES, self._size)
            self._hashers[index].update(_read_exactly(self._fd, hashed_to, end - hashed_to))

        if self._pool is not None and len(rest) > 1:
            for future in [self._pool.submit(hash_rest, *item) for item in rest]:
                future.result()
        else:
            for item in rest:
                hash_rest(*item)
        return self._algorithm.combine([hasher.digest() for hasher in self._hashers])


def digest_file(path: os.PathLike[str] | str, algorithm: ChecksumAlgorithm, pool: Executor | None) -> tuple[int, str]:
    """(size, digest) of a file, its pieces read and hashed on the pool's threads."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        verifier = ReadVerifier(fd, size, algorithm, pool)
        return size, verifier.finish()
    finally:
        os.close(fd)


def _run(work: list[tuple[Hasher, memoryview]], pool: Executor | None, algorithm: ChecksumAlgorithm) -> None:
    """Each (hasher, bytes) pair names a different piece, so they may run concurrently."""
    if pool is not None and len(work) > 1 and sum(len(view) for _, view in work) >= algorithm.parallel_bytes:
        for future in [pool.submit(hasher.update, view) for hasher, view in work]:
            future.result()
    else:
        for hasher, view in work:
            hasher.update(view)


def _read_exactly(fd: int, offset: int, length: int) -> bytes:
    data = os.pread(fd, length, offset)
    while len(data) < length:
        more = os.pread(fd, length - len(data), offset + len(data))
        if not more:
            raise OSError(f"file shrank while being read: {length - len(data)} bytes missing at {offset + len(data)}")
        data += more
    return data

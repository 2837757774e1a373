"""The files of a checkpoint: written with their checksum in one pass, read back with it in one pass.

`ChecksummedFile` is what `torch.save` (and our DCP storage writer) write into. Small writes (the
zip records' headers, small tensors) gather in a staging buffer and go out together; large writes
go straight from the caller's memory. Each write's pieces hash on pool threads while the same bytes
are copied into the page cache, and the disk starts writing a window as soon as it is full
(`sync_file_range`), a few windows behind the writer, so the final fsync finds little left to do
and dirty memory stays bounded.

`SpooledChecksummedFile` is what a background save of state in host memory writes into: the call only
copies the bytes into host buffers kept from the previous save, and `finish()` (on the background thread)
hashes them and writes them with O_DIRECT, past the page cache, so the training loop pays neither for
fresh page-cache memory nor for the kernel's copy.

`VerifyingFile` is what `torch.load` reads from: each piece is hashed as its bytes arrive in the
tensors' memory, so loading and verifying read the file once.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import io
import mmap
import os
import threading
from collections import deque
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from clusterkit.resilience.checksums import ChecksumAlgorithm, ReadVerifier, StreamDigest, hash_threads

STAGING_BYTES = 4 << 20
DIRECT_BYTES = 64 << 10  # writes this large skip the staging buffer
WRITEBACK_WINDOW_BYTES = 16 << 20
WRITEBACK_WINDOWS_AHEAD = 4  # dirty data per file stays below this many windows
READ_BLOCK_BYTES = 64 << 10  # smaller reads (zip headers, tiny tensors) are served from one block read
READ_AHEAD_BYTES = 64 << 20  # asked of the disk ahead of the reader, so it never waits on an idle disk
SPOOL_CHUNK_BYTES = 16 << 20  # host buffers of a spooled file; O_DIRECT writes go out a chunk at a time
DIRECT_IO_ALIGNMENT = 4096  # O_DIRECT: buffer address, file offset and length are multiples of this
BACKGROUND_NICENESS = 10  # added to background threads' nice value: training threads come first

_SYNC_FILE_RANGE_WAIT_BEFORE, _SYNC_FILE_RANGE_WRITE, _SYNC_FILE_RANGE_WAIT_AFTER = 1, 2, 4


@functools.cache
def _sync_file_range() -> Any:
    """libc's sync_file_range (Linux), or None: it only speeds things up; fsync is what commits."""
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


class _Writeback:
    """Keeps the disk busy with a file while it is being written, without blocking the writer.

    Each full window is handed to the disk at once, and waited for (then dropped from the page
    cache) `WRITEBACK_WINDOWS_AHEAD` windows later, both on the flusher thread: the writer never
    waits on the disk, dirty memory stays bounded, and the final fsync finds little left to do."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._started = 0
        self._windows: deque[tuple[int, int]] = deque()  # used on the flusher thread only
        self._enabled = _sync_file_range() is not None
        self._last: Future[None] | None = None

    def written(self, end: int) -> None:
        """Bytes up to `end` are in the page cache."""
        if self._enabled and end - self._started >= WRITEBACK_WINDOW_BYTES:
            window = (self._started, end - self._started)
            self._started = end
            self._last = shared_executor("flusher", 1).submit(self._flush, window)

    def drain(self) -> None:
        """Wait until the flusher is done with this file (it runs its work in order)."""
        last, self._last = self._last, None
        if last is not None:
            last.result()

    def _flush(self, window: tuple[int, int]) -> None:
        sync_file_range = _sync_file_range()
        if not self._enabled or sync_file_range(self._fd, *window, _SYNC_FILE_RANGE_WRITE) != 0:
            self._enabled = False  # a file system without it: fsync does all the work
            return
        self._windows.append(window)
        if len(self._windows) > WRITEBACK_WINDOWS_AHEAD:
            oldest = self._windows.popleft()
            flags = _SYNC_FILE_RANGE_WAIT_BEFORE | _SYNC_FILE_RANGE_WRITE | _SYNC_FILE_RANGE_WAIT_AFTER
            if sync_file_range(self._fd, *oldest, flags) == 0:
                # On the disk: drop it from the page cache rather than push out pages training uses.
                os.posix_fadvise(self._fd, *oldest, os.POSIX_FADV_DONTNEED)


_shared: dict[str, ThreadPoolExecutor] = {}
_shared_lock = threading.Lock()


def _forget_shared_executors() -> None:
    """A forked child has none of its parent's threads: it must start its own pools."""
    global _shared_lock
    _shared.clear()
    _shared_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_shared_executors)


def shared_executor(name: str, threads: int, *, low_priority: bool = False) -> ThreadPoolExecutor:
    """A process-wide pool of threads for one kind of work, started once (starting threads for
    every save costs GIL hand-offs), its threads niced when `low_priority`."""
    with _shared_lock:
        if name not in _shared:
            _shared[name] = ThreadPoolExecutor(threads, thread_name_prefix=f"clusterkit-{name}",
                                               initializer=lower_priority if low_priority else None)
        return _shared[name]


def hash_pool(*, background: bool = False) -> ThreadPoolExecutor:
    """Threads that hash large spans: as many as the cores; background saves get half, niced."""
    if background:
        return shared_executor("background-hash", max(1, hash_threads() // 2), low_priority=True)
    return shared_executor("hash", hash_threads())


def lower_priority() -> None:
    """Lower this thread's CPU priority (Linux keeps nice values per thread), so background
    work takes the cores the training loop leaves idle."""
    try:
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + BACKGROUND_NICENESS))
    except (AttributeError, OSError):  # not Linux, or not permitted: the normal priority
        pass


class ChecksummedFile(io.RawIOBase):
    """A write-only file that checksums what passes through it. `finish()` makes it durable."""

    def __init__(self, path: Path, algorithm: ChecksumAlgorithm, pool: Executor | None) -> None:
        super().__init__()
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self._digest = StreamDigest(algorithm, pool)
        self._writeback = _Writeback(self._fd)
        self._hashing: list[Future[None]] = []  # of the last staging buffer written
        self._staging = [bytearray(STAGING_BYTES), bytearray(STAGING_BYTES)]
        self._staged = 0
        self._written = 0
        self.error: BaseException | None = None  # torch.save replaces errors with a vaguer one

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        try:
            view = memoryview(data).cast("B")
            if len(view) >= DIRECT_BYTES or len(view) > STAGING_BYTES - self._staged:
                self._flush_staging()
            if len(view) >= DIRECT_BYTES:
                self._emit(view, owned=False)
            else:
                self._staging[0][self._staged : self._staged + len(view)] = view
                self._staged += len(view)
            return len(view)
        except BaseException as exc:
            self.error = self.error or exc
            raise

    def tell(self) -> int:
        return self._written + self._staged

    def fileno(self) -> int:
        return self._fd

    def flush(self) -> None:
        """torch.save and DCP call this; the bytes reach the disk in `finish`."""

    def finish(self) -> tuple[int, str]:
        """Write what is staged and fsync; returns (size, digest)."""
        self._flush_staging()
        self._wait_for_hashing()
        self._writeback.drain()
        os.fsync(self._fd)
        return self._written, self._digest.hexdigest()

    def close(self) -> None:
        if not self.closed:
            try:
                self._wait_for_hashing()  # no thread may still use our buffers or our fd
                self._writeback.drain()
            finally:
                os.close(self._fd)
                super().close()

    def _flush_staging(self) -> None:
        if self._staged:
            staged = memoryview(self._staging[0])[: self._staged]
            self._emit(staged, owned=True)
            self._staging.reverse()  # fill the other buffer while this one hashes
            self._staged = 0

    def _emit(self, view: memoryview, *, owned: bool) -> None:
        """Hash and write `view`. Its hashing may outlast the call only if we own its memory."""
        self._wait_for_hashing()
        self._hashing = self._digest.update(view)
        try:
            written = 0
            while written < len(view):
                written += os.write(self._fd, view[written:])
        finally:
            if not owned:
                self._wait_for_hashing()
        self._written += len(view)
        self._writeback.written(self._written)

    def _wait_for_hashing(self) -> None:
        hashing, self._hashing = self._hashing, []
        for future in hashing:
            future.result()


class SpoolBuffers:
    """Page-aligned host buffers a checkpoint manager keeps between spooled saves: after the first save
    their memory is the process's already, so copying a shard into them costs a memcpy, no page faults."""

    def __init__(self) -> None:
        self._free: list[mmap.mmap] = []
        self._lock = threading.Lock()

    def take(self) -> mmap.mmap:
        with self._lock:
            if self._free:
                return self._free.pop()
        return mmap.mmap(-1, SPOOL_CHUNK_BYTES)

    def give_back(self, buffers: list[mmap.mmap]) -> None:
        with self._lock:
            self._free.extend(buffers)

    def release(self) -> None:
        with self._lock:
            free, self._free = self._free, []
        for buffer in free:
            buffer.close()


class SpooledChecksummedFile(io.RawIOBase):
    """A write-only file whose bytes wait in `buffers` until `finish()` hashes them and writes them out.

    Written with O_DIRECT where the file system takes it (tmpfs does not: then through the page cache);
    the last chunk is padded to the alignment O_DIRECT needs and the file truncated to its size."""

    def __init__(self, path: Path, algorithm: ChecksumAlgorithm, pool: Executor | None,
                 buffers: SpoolBuffers) -> None:
        super().__init__()
        self.path = path
        self._algorithm = algorithm
        self._pool = pool
        self._buffers = buffers
        self._chunks: list[mmap.mmap] = []
        self._filled = SPOOL_CHUNK_BYTES  # of the last chunk: full, so the first write takes one
        self._size = 0
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        try:
            self._fd = os.open(path, flags | getattr(os, "O_DIRECT", 0), 0o644)
            self._direct = hasattr(os, "O_DIRECT")
        except OSError as error:
            if error.errno != errno.EINVAL:
                raise
            self._fd = os.open(path, flags, 0o644)
            self._direct = False
        self.error: BaseException | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        try:
            view = memoryview(data).cast("B")
            done = 0
            while done < len(view):
                if self._filled == SPOOL_CHUNK_BYTES:
                    self._chunks.append(self._buffers.take())
                    self._filled = 0
                take = min(len(view) - done, SPOOL_CHUNK_BYTES - self._filled)
                self._chunks[-1][self._filled : self._filled + take] = view[done : done + take]
                self._filled += take
                done += take
            self._size += len(view)
            return len(view)
        except BaseException as exc:
            self.error = self.error or exc
            raise

    def tell(self) -> int:
        return self._size

    def flush(self) -> None:
        """torch.save calls this; the bytes reach the disk in `finish`."""

    def finish(self) -> tuple[int, str]:
        """Hash and write every chunk (the next one hashing while this one is written), then fsync."""
        digest = StreamDigest(self._algorithm, self._pool)
        offset = 0
        for index, chunk in enumerate(self._chunks):
            length = self._filled if index == len(self._chunks) - 1 else SPOOL_CHUNK_BYTES
            view = memoryview(chunk)
            hashing = digest.update(view[:length])
            try:
                self._write_at(view, length, offset)
            finally:
                for future in hashing:
                    future.result()
                view.release()
            offset += length
        if self._direct and offset % DIRECT_IO_ALIGNMENT:
            os.ftruncate(self._fd, offset)  # the padding of the last chunk goes
        os.fsync(self._fd)
        return self._size, digest.hexdigest()

    def close(self) -> None:
        if not self.closed:
            try:
                chunks, self._chunks = self._chunks, []
                self._buffers.give_back(chunks)
            finally:
                os.close(self._fd)
                super().close()

    def _write_at(self, view: memoryview, length: int, offset: int) -> None:
        end = -(-length // DIRECT_IO_ALIGNMENT) * DIRECT_IO_ALIGNMENT if self._direct else length
        view[length:end] = bytes(end - length)  # zeros, in the chunk's spare room
        written = 0
        while written < end:
            try:
                written += os.pwrite(self._fd, view[written:end], offset + written)
            except OSError as error:
                if not (self._direct and error.errno == errno.EINVAL):
                    raise
                # The file system opened the file for O_DIRECT but refuses its writes: write through the
                # page cache instead, and exactly `length` bytes.
                fcntl.fcntl(self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~os.O_DIRECT)
                self._direct = False
                end = length


class VerifyingFile(io.RawIOBase):
    """A read-only file for `torch.load` that checks the bytes read against the file's digest.

    Large reads go straight into the caller's memory (a tensor's storage) and are hashed there;
    small ones are served from a block read here, so headers and tiny tensors cost one system call
    per block rather than two or three per record."""

    def __init__(self, path: Path, algorithm: ChecksumAlgorithm, pool: Executor | None) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._size = os.fstat(self._fd).st_size
        self._position = 0
        self._block = memoryview(bytearray(READ_BLOCK_BYTES))
        self._block_start = self._block_length = 0
        self._ahead = (0, 0)  # the range asked of the disk ahead of the reader
        self._verifier = ReadVerifier(self._fd, self._size, algorithm, pool)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            self._position = offset
        elif whence == os.SEEK_CUR:
            self._position += offset
        else:
            self._position = self._size + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        if view.format != "B":
            view = view.cast("B")
        position = self._position
        wanted = min(len(view), self._size - position)
        if wanted <= 0:
            return 0
        if wanted < READ_BLOCK_BYTES:
            start = position - self._block_start
            if start < 0 or start + wanted > self._block_length:
                self._read_block(position)
                start = 0
            count = min(wanted, self._block_length - start)
            view[:count] = self._block[start : start + count]
        else:
            count = self._read(position, view[:wanted])
            self._verifier.saw(position, view[:count])
        self._position = position + count
        return count

    def digest(self) -> str:
        """The file's digest, reading whatever the reader skipped."""
        return self._verifier.finish()

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
            super().close()

    def _read_block(self, position: int) -> None:
        self._block_start = position
        self._block_length = self._read(position, self._block[: min(READ_BLOCK_BYTES, self._size - position)])
        self._verifier.saw(position, self._block[: self._block_length])

    def _read(self, position: int, view: memoryview) -> int:
        end = position + len(view)
        low, high = self._ahead
        if end + READ_AHEAD_BYTES // 2 > high and hasattr(os, "posix_fadvise"):
            start = high if low <= position <= high else position
            self._ahead = (low if start == high else position, end + READ_AHEAD_BYTES)
            os.posix_fadvise(self._fd, start, self._ahead[1] - start, os.POSIX_FADV_WILLNEED)
        filled = 0
        while filled < len(view):
            count = os.preadv(self._fd, [view[filled:]], position + filled)
            if count == 0:
                break  # the file ended early: the digest will not match
            filled += count
        return filled

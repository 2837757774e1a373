"""Writing files so that a reader (or a crash) never sees half of one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from clusterkit.errors import ClusterkitError


def read_text(path: str | Path, what: str) -> str:
    """A text file the user named; unreadable is one clear error naming `what` it should have been."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ClusterkitError(f"cannot read {what} {str(path)!r}: {error}",
                              fix=f"pass the path of a readable {what}") from None


def write_atomically(path: str | Path, text: str) -> None:
    """Write through a temporary file in the same directory and rename: readers never see half a file."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise ClusterkitError(f"cannot write {path}: directory {directory} does not exist",
                              fix="create the directory or choose another path")
    handle, temporary = _new_file_beside(path)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _new_file_beside(path: Path) -> tuple[int, Path]:
    """A new, private file in the directory of `path`, opened for writing (tempfile.mkstemp's promise,
    without the millisecond `tempfile` adds to every CLI start)."""
    while True:
        temporary = path.with_name(f".{path.name}.{os.urandom(6).hex()}.tmp")
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            return os.open(temporary, flags, 0o600), temporary
        except FileExistsError:
            continue


def write_user_file(path: str | Path, text: str) -> None:
    """Write a file the user named (e.g. --output-config): only ever a regular file, new or replaced.

    The atomic rename of `write_atomically` would put a regular file in place of whatever is there, so
    a device, directory, FIFO or socket at `path` is refused first, and nothing is written.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as error:
        raise ClusterkitError(f"cannot write {str(path)!r}: {error.strerror or error}",
                              fix="choose a path in a directory you can write") from None
    if mode is not None and not stat.S_ISREG(mode):
        kind = ("a directory" if stat.S_ISDIR(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise ClusterkitError(f"will not write {str(path)!r}: it is {kind}, not a regular file",
                              fix="name a new file or an existing regular file")
    write_atomically(path, text)

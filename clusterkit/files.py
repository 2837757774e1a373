"""Writing files so that a reader (or a crash) never sees half of one, and checking the output paths a user names."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from clusterkit.errors import ClusterkitError

STDOUT = "-"  # as an output path: the command's standard output, as in most Unix tools


def read_text(path: str | Path, what: str) -> str:
    """A text file the user named; unreadable is one clear error naming `what` it should have been."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ClusterkitError(f"cannot read {what} {str(path)!r}: {error}",
                              fix=f"pass the path of a readable {what}") from None


def write_atomically(path: str | Path, text: str) -> None:
    """Write through a temporary file in the same directory and rename: readers never see half a file."""
    temporary = _write_temporary(Path(path), text)
    try:
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _existing_directory(path: Path) -> Path:
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise ClusterkitError(f"cannot write {path}: directory {directory} does not exist",
                              fix="create the directory or choose another path")
    return directory


def _write_temporary(path: Path, text: str | bytes) -> Path:
    """`text` (or bytes: a picture), written and synced to a new private file beside `path`; nothing is left
    behind on failure."""
    _existing_directory(path)
    handle, temporary = _new_file_beside(path)
    try:
        with (os.fdopen(handle, "wb") if isinstance(text, bytes) else
              os.fdopen(handle, "w", encoding="utf-8")) as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return temporary


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


_WRITE_FIXES = {errno.EROFS: "the file system is read-only: choose a path on a writable one",
                errno.ENOSPC: "the file system is full: free space there or choose a path on another one",
                errno.EDQUOT: "your disk quota is used up: free space or choose a path on another file system",
                errno.EACCES: "you may not write there: choose a directory you can write",
                errno.EPERM: "you may not write there: choose a directory you can write",
                errno.EISDIR: "it is a directory: name a file"}


def cannot_write(target: str | Path, error: OSError) -> ClusterkitError:
    """An OSError met writing `target` (a path, or STDOUT) as one line: the path the user named (never a
    temporary's), the reason and a fix."""
    if str(target) == STDOUT:
        return ClusterkitError(f"cannot write to stdout: {error.strerror or error}",
                               fix="redirect stdout to somewhere writable, or name a file instead of -")
    return ClusterkitError(f"cannot write {str(target)!r}: {error.strerror or error}",
                           fix=_WRITE_FIXES.get(error.errno or 0, "choose a path in a directory you can write"))


def _refuse_unless_regular(path: str | Path) -> None:
    """The atomic rename would put a regular file in place of whatever is at `path`, so anything else there
    (a device, directory, FIFO or socket) is refused and left as it is."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as error:
        raise cannot_write(path, error) from None
    if not stat.S_ISREG(mode):
        kind = ("a directory" if stat.S_ISDIR(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise ClusterkitError(f"will not write {str(path)!r}: it is {kind}, not a regular file",
                              fix="name a new file or an existing regular file")


def write_user_file(path: str | Path, text: str | bytes) -> None:
    """Write a file the user named (e.g. --output-config): only ever a regular file, new or replaced."""
    write_user_files([(path, text)])


def write_user_files(files: Sequence[tuple[str | Path, str | bytes]]) -> None:
    """Write the files a user named for one command, all or none: every text is written and synced to a
    temporary beside its path before the first rename, so a failure (a full or read-only file system, a
    refused path) leaves every path as it was and no temporary behind."""
    for path, _ in files:
        _refuse_unless_regular(path)
    written: list[tuple[Path, str | Path]] = []
    renamed = 0
    try:
        for path, text in files:
            try:
                written.append((_write_temporary(Path(path), text), path))
            except OSError as error:
                raise cannot_write(path, error) from None
        for temporary, path in written:
            try:
                os.replace(temporary, path)
            except OSError as error:
                raise cannot_write(path, error) from None
            renamed += 1
    finally:
        for temporary, _ in written[renamed:]:
            temporary.unlink(missing_ok=True)


def probe_writable(path: str | Path) -> None:
    """Make sure a file can be created beside `path` (for a writer that is another program, e.g. enroot):
    a read-only file system or a directory the user may not write is one line before any long work."""
    _existing_directory(Path(path))
    try:
        handle, temporary = _new_file_beside(Path(path))
    except OSError as error:
        raise cannot_write(path, error) from None
    os.close(handle)
    temporary.unlink()


def check_outputs(outputs: Sequence[tuple[str, str | None]], inputs: Sequence[tuple[str, str | None]] = (), *,
                  stdout_busy: str | None = None) -> None:
    """Refuse, before anything is written, output paths that cannot mean what the user wants.

    `outputs` and `inputs` are (flag, path) pairs, the path None where the flag was not given. An output
    may not be empty, nor the same file as an input (through links, `./x` and `x`, hard links) or as
    another output, nor anything write_user_files refuses; `-` is stdout, for one output only, and for
    none where `stdout_busy` says what stdout carries instead.
    """
    given = [(flag, path) for flag, path in outputs if path is not None]
    for flag, path in given:
        if path == "":
            raise ClusterkitError(f"{flag}: an empty path names no file",
                                  fix=f"name a file for {flag}" + ("" if stdout_busy else ", or - for stdout"))
        if path == STDOUT and stdout_busy:
            raise ClusterkitError(f"{flag} -: {stdout_busy}", fix=f"name a file for {flag}")
    to_stdout = [flag for flag, path in given if path == STDOUT]
    if len(to_stdout) > 1:
        raise ClusterkitError(f"{' and '.join(to_stdout)} are each -: only one output can go to stdout",
                              fix=f"name a file for {' or '.join(to_stdout)}")
    files = [(flag, path) for flag, path in given if path != STDOUT]
    for _, path in files:
        _refuse_unless_regular(path)
        _existing_directory(Path(path))
    seen = [(flag, path, identity, "reads: the command would write over its input") for flag, path in inputs
            if path and (identity := _identity_if_there(path)) is not None]
    for flag, path in files:
        identity = _identity(path)
        for other_flag, other_path, other, what in seen:
            if identity == other:
                spelled = "" if path == other_path else f" {other_path!r}"
                raise ClusterkitError(f"{flag} {path!r} is the file {other_flag}{spelled} {what}",
                                      fix=f"name another file for {flag}")
        seen.append((flag, path, identity, "writes: one would replace the other"))


def _identity_if_there(path: str) -> tuple[int, int, str] | None:
    try:
        found = os.stat(path)  # follows links: a link to the file is the file
    except OSError:
        return None
    return found.st_dev, found.st_ino, ""


def _identity(path: str) -> tuple[int, int, str]:
    """What two output paths naming the same file share: the file's device and inode when it exists, else
    its directory's and its own name (a new file, or a link to nothing, which the rename replaces)."""
    identity = _identity_if_there(path)
    if identity is not None:
        return identity
    directory = os.stat(_existing_directory(Path(path)))
    return directory.st_dev, directory.st_ino, Path(path).name

"""What goes after a commit: old checkpoints beyond `keep`, damaged ones, and the debris of crashes.

Retention keeps the checkpoint just committed and the newest others up to `keep` in all that verify
byte for byte, so a damaged checkpoint of the right size never takes the place of an older good one.
It knows which verify without reading them back each time: those committed here whose files still
have the inode, size and modification and change times they had at the commit (their digests came
from the bytes as written), and any other once read back in full. It runs after each commit on one
low-priority thread, so neither reading back nor deleting is on a save's path; the next save writes
meanwhile and waits for it only at its own commit (`wait`).
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
from concurrent.futures import Future
from pathlib import Path

from clusterkit.resilience.checkpoint_files import hash_pool, shared_executor
from clusterkit.resilience.checkpoint_layout import (
    DISCARDED_PREFIX,
    MANIFEST,
    discarded_name,
    pending_step,
    step_dirs,
)
from clusterkit.resilience.checkpoint_manifest import DamagedCheckpoint, FileEntries, verify_checkpoint, verify_files

log = logging.getLogger(__name__)

_Identity = tuple[object, ...]  # a checkpoint's directory name, then (file, inode, size, mtime, ctime) per file


class Retention:
    """Keeps the newest `keep` checkpoints under `root` that verify; deletes the rest in the background."""

    def __init__(self, root: Path, keep: int) -> None:
        self.root = root
        self.keep = keep
        self._running: Future[None] | None = None
        self._verified: set[_Identity] = set()  # checkpoints known whole: committed here, or read back in full

    def vouch(self, path: Path, files: FileEntries) -> None:
        """The checkpoint just committed at `path`: its digests came from the bytes as they were written, each
        file fsynced, so it is whole while its files are unchanged."""
        identity = _identity(path, files)
        if identity is not None:
            self._verified.add(identity)

    def start(self, committed_step: int) -> None:
        """Remove what `committed_step`'s commit made surplus, on the retention thread."""
        self._running = shared_executor("retention", 1, low_priority=True).submit(self._remove_old, committed_step)

    def wait(self) -> None:
        """Block until the running retention is done (re-raising what it did not handle)."""
        running, self._running = self._running, None
        if running is not None:
            running.result()

    def _remove_old(self, committed_step: int) -> None:
        """Keep the one just committed and the newest others up to `keep` that verify in full; drop the
        rest, and what crashed deletions left."""
        try:
            valid_kept = 0
            for step, path in step_dirs(self.root):
                if step == committed_step or (valid_kept < self.keep and self._verifies_in_full(path)):
                    valid_kept += 1
                else:
                    discard(path)
            for entry in self.root.iterdir():
                if entry.name.startswith(DISCARDED_PREFIX):
                    shutil.rmtree(entry, ignore_errors=True)
        except OSError as exc:  # the checkpoint is committed; the next save tries again
            log.warning("could not remove old checkpoints under %s: %s", self.root, exc)

    def _verifies_in_full(self, path: Path) -> bool:
        """Whether the checkpoint at `path` checks out byte for byte: one committed here, or read back once (at
        low priority); from then on the identity of its files stands for it, so a file changed since (a
        write, a truncation, a replacement) is read back again."""
        checkpoint, problem = verify_checkpoint(path, "size")
        identity = _identity(path, checkpoint.manifest["files"]) if checkpoint is not None else None
        if identity is not None and identity in self._verified:
            return True
        if checkpoint is not None:
            try:
                verify_files(checkpoint, list(checkpoint.manifest["files"]), hash_pool(background=True))
            except DamagedCheckpoint as damaged:
                checkpoint, problem = None, damaged.message
        if checkpoint is None or identity is None:
            log.warning("removing checkpoint %s: %s", path, problem or "a file of it is missing")
            return False
        if _identity(path, checkpoint.manifest["files"]) == identity:  # unchanged while it was read
            self._verified.add(identity)
        return True


def remove_crashed_saves(root: Path, committed_step: int) -> None:
    """Remove the pending directories of crashed saves of steps up to `committed_step` (later ones may be in
    progress). At the commit, not later: crashes are rare, and so the debris of one never outlives the next
    commit, whatever happens to the retention thread."""
    try:
        for entry in root.iterdir():
            step = pending_step(entry.name)
            if step is not None and step <= committed_step:
                shutil.rmtree(entry, ignore_errors=True)
    except OSError as exc:
        log.warning("could not remove crashed saves under %s: %s", root, exc)


def discard(checkpoint_dir: Path) -> None:
    """Take a checkpoint out of sight atomically, then delete it: a crash halfway through a deletion must not
    leave a half-deleted directory under a committed name."""
    hidden = checkpoint_dir.with_name(discarded_name(checkpoint_dir.name, secrets.token_hex(4)))
    os.rename(checkpoint_dir, hidden)
    shutil.rmtree(hidden, ignore_errors=True)


def _identity(path: Path, files: FileEntries) -> _Identity | None:
    """What stands for a checkpoint whose bytes were checked: its files' inodes, sizes and modification and
    change times (any write, truncation or replacement changes one), or None if one is missing."""
    try:
        return (path.name, *((name, *_stat_identity(path / name)) for name in (MANIFEST, *sorted(files))))
    except OSError:
        return None


def _stat_identity(path: Path) -> tuple[int, int, int, int]:
    found = path.stat()
    return found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns

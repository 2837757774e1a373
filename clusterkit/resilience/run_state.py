"""The supervisor's memory of a run, kept in space reserved up front so that a full disk cannot stop it.

The state directory usually sits on the same file system as the checkpoints. When training fills that
file system, the supervisor must still record what happened and why it stopped, so its files are
allocated when the run starts and are then only overwritten in place (no new blocks, no rename):

    supervisor.json   the budgets (JSON, padded with spaces to its reserved size)
    decisions.jsonl   one JSON line per decision, then NUL padding up to the reserved size
    tries.jsonl       one JSON line when a try of the step starts and one when it ends (its progress), padded alike

Readers strip the padding (`clusterkit.runtime.read_decisions`). A write that still fails (the reservation itself could
not be made, or it is used up) is reported on stderr, which Slurm keeps in the job's log.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from dataclasses import asdict, field
from pathlib import Path
from typing import Any

from clusterkit import runtime
from clusterkit.lean_dataclass import lean_dataclass

STATE_BYTES = 16 << 10
DECISIONS_BYTES = 256 << 10
TRIES_BYTES = 256 << 10
KEEP_ATTEMPTS = 50  # attempts_seen is only asked "was this one seen" and "which was the last"


@lean_dataclass
class Budget:
    """Counts kept across requeues and resubmissions: failures spend `max_restarts`; planned requeues
    (before a time limit) and preemptions have bounds of their own."""

    failures: int = 0  # restarts after a node failure, a hang or an application error
    application_failures: int = 0
    time_limit_requeues: int = 0
    preemptions: int = 0
    attempts_seen: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, text: str) -> Budget:
        data = json.loads(text or "{}")
        if "restarts" in data:  # written by clusterkit 0.1: every restart counted as a failure
            data.setdefault("failures", data.pop("restarts"))
        known = {name for name in cls.__dataclass_fields__}
        return cls(**{key: value for key, value in data.items() if key in known})


def reserve(path: Path, size: int) -> None:
    """Create `path` with `size` bytes allocated (NULs), unless it exists."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as error:
            if error.errno == errno.ENOSPC:
                raise
            os.pwrite(fd, bytes(size), 0)  # a file system without fallocate: write the zeros
        os.fsync(fd)
    except OSError:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)


class RunState:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.state_path = directory / runtime.SUPERVISOR_STATE_FILE
        self.decisions_path = directory / runtime.DECISIONS_FILE
        self.tries_path = directory / runtime.TRIES_FILE

    def open(self) -> None:
        """Make the directory and reserve the files (files of an older run grow on their next write)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        reserve(self.state_path, STATE_BYTES)
        reserve(self.decisions_path, DECISIONS_BYTES)
        reserve(self.tries_path, TRIES_BYTES)

    def load(self) -> Budget:
        try:
            return Budget.from_json(self.state_path.read_bytes().rstrip(b"\0 \n").decode())
        except (OSError, ValueError):
            return Budget()

    def save(self, budget: Budget) -> bool:
        budget.attempts_seen = budget.attempts_seen[-KEEP_ATTEMPTS:]
        data = json.dumps(asdict(budget)).encode()
        if len(data) >= STATE_BYTES:
            return _say(f"the run state outgrew its {STATE_BYTES} bytes")
        return self._write_in_place(self.state_path, data.ljust(STATE_BYTES - 1) + b"\n", 0)

    def append(self, entry: dict[str, Any]) -> bool:
        """Append a decision to decisions.jsonl."""
        return self._append(self.decisions_path, entry, DECISIONS_BYTES)

    def append_try(self, entry: dict[str, Any]) -> bool:
        """Append a try's start or end to tries.jsonl (reserved here where an older run's state lacks it)."""
        try:
            reserve(self.tries_path, TRIES_BYTES)
        except OSError as error:
            return _say(f"cannot reserve {self.tries_path}: {error.strerror or error}")
        return self._append(self.tries_path, entry, TRIES_BYTES)

    def _append(self, path: Path, entry: dict[str, Any], reservation: int) -> bool:
        line = (json.dumps(entry) + "\n").encode()
        try:
            with open(path, "rb") as stream:
                end = len(stream.read().rstrip(b"\0"))
        except OSError as error:
            return _say(f"cannot read {path}: {error.strerror or error}")
        if end + len(line) > os.path.getsize(path):
            # The reservation is used up: grow it (which may fail on a full disk, and is then said).
            try:
                reserve_more(path, reservation)
            except OSError as error:
                return _say(f"cannot grow {path}: {error.strerror or error}")
        return self._write_in_place(path, line, end)

    @staticmethod
    def _write_in_place(path: Path, data: bytes, offset: int) -> bool:
        try:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.pwrite(fd, data, offset)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as error:
            return _say(f"cannot write {path}: {error.strerror or error}")
        return True


def reserve_more(path: Path, extra: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        os.posix_fallocate(fd, size, extra)
    finally:
        os.close(fd)


def _say(problem: str) -> bool:
    print(f"clusterkit supervisor: {problem}", file=sys.stderr, flush=True)
    return False

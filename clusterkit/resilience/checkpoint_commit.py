"""The commit: every rank's files in one pending directory become one checkpoint, or none does.

Ranks agree on the pending directory, write their parts into it and report them (files with sizes and
digests, or an error) to rank 0, which commits: it digests what no rank claimed, checks sizes, writes
`manifest.json` last, renames the directory to `step-NNNNNNNN` and fsyncs the root. That rename is the
commit point. Two ways to report, one protocol:

- with a torch.distributed process group, reports travel by collectives and every rank hears the outcome;
- without one, each rank writes a done-marker into the pending directory and rank 0 waits up to the
  commit timeout for all of them (only rank 0 learns the outcome).

Any rank's error aborts the save on all ranks, removing the pending directory; earlier checkpoints stay.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Any, TypedDict

from clusterkit.errors import ClusterkitError
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.resilience.checkpoint_layout import (
    LATEST_POINTER,
    MANIFEST,
    checkpoint_files,
    marker_name,
    pending_dir_name,
    shard_name,
    step_dir_name,
)
from clusterkit.resilience.checkpoint_manifest import Checkpoint, FileEntries, digest_files, new_manifest
from clusterkit.resilience.checksums import ChecksumAlgorithm
from clusterkit.resilience.retention import Retention, discard, remove_crashed_saves
from clusterkit.resilience.run_identity import attempt_id

log = logging.getLogger(__name__)


@lean_dataclass(frozen=True)
class Topology:
    """Who this rank is in a save, and whether collectives carry the protocol."""

    rank: int
    world_size: int
    use_collectives: bool
    group: Any = None  # torch.distributed process group, None for the default one


class _Report(TypedDict):
    """What a rank tells the committing rank (JSON in a done-marker, or an object in a collective)."""

    rank: int
    files: FileEntries
    error: str | None


def initialized_dist() -> Any:
    """`torch.distributed` when a process group is initialised, else None."""
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def topology_for(rank: int | None, world_size: int | None, group: Any) -> Topology:
    """The ranks of a save: an initialised process group's (on `group`) unless `world_size` is given; else the
    given or the environment's RANK and WORLD_SIZE, coordinated through the file system."""
    if world_size is None:
        dist = initialized_dist()
        if dist is not None:
            return Topology(dist.get_rank(group), dist.get_world_size(group), True, group)
    world_size = world_size or int(os.environ.get("WORLD_SIZE") or 1)
    rank = rank if rank is not None else int(os.environ.get("RANK") or 0)
    if world_size == 1:
        rank = 0
    return Topology(rank, world_size, False)


class CommitProtocol:
    """Pending directories under `root` and their commit, for every rank of a save."""

    def __init__(self, root: Path, commit_timeout_s: float, retention: Retention) -> None:
        self.root = root
        self.commit_timeout_s = commit_timeout_s
        self.retention = retention

    def open_pending(self, step: int, topology: Topology) -> Path:
        """The pending directory of this save of `step`, the same on every rank, with none of this rank's
        debris in it."""
        directory = self.root / pending_dir_name(step, self._agree_on_token(topology))
        directory.mkdir(parents=True, exist_ok=True)
        # Debris of an earlier try of this very attempt must not be mistaken for this rank's work.
        for stale in (directory / shard_name(topology.rank), directory / marker_name(topology.rank)):
            stale.unlink(missing_ok=True)
        return directory

    def finish_pending(self, step: int, kind: str, topology: Topology, directory: Path, files: FileEntries,
                       error: BaseException | None, algorithm: ChecksumAlgorithm) -> Checkpoint | None:
        """`finish` for files written into `directory` by other means: with collectives, every rank waits until
        all have written, then digests its share of the files (kind "files") before reporting."""
        if topology.use_collectives:
            initialized_dist().barrier(group=topology.group)
            if error is None and kind == "files":
                names = sorted(checkpoint_files(directory))
                files.update(digest_files(directory, names[topology.rank :: topology.world_size], algorithm))
        # Without collectives rank 0 digests whatever no rank claimed, after all markers are in.
        return self.finish(step, kind, topology, directory, files, error, algorithm)

    def finish(self, step: int, kind: str, topology: Topology, directory: Path, files: FileEntries,
               error: BaseException | None, algorithm: ChecksumAlgorithm) -> Checkpoint | None:
        """Report this rank's part (its durable `files`, or its `error`); rank 0 commits when every part is in.

        Returns the checkpoint where the outcome is known (rank 0; every rank with collectives), else None.
        Raises this rank's own error, or a ClusterkitError when another rank's part failed."""
        report: _Report = {"rank": topology.rank, "files": files, "error": describe(error, step, self.root)}
        reports = self._gather(step, topology, directory, report)
        outcome: Checkpoint | str | None = None
        if reports is not None:
            failures = [f"rank {r['rank']}: {r['error']}" for r in reports if r["error"]]
            if failures:
                shutil.rmtree(directory, ignore_errors=True)
                outcome = "; ".join(failures)
            else:
                try:
                    outcome = self._commit(step, kind, topology.world_size, directory, reports, algorithm)
                except OSError as exc:
                    shutil.rmtree(directory, ignore_errors=True)
                    outcome = f"rank {topology.rank}: {describe(exc, step, self.root)}"
        if topology.use_collectives:
            shared = [outcome]
            initialized_dist().broadcast_object_list(shared, group=topology.group, group_src=0)
            outcome = shared[0]
        if error is not None:
            if isinstance(error, OSError):
                raise write_error(error, step, self.root) from error
            raise error
        if isinstance(outcome, str):
            raise ClusterkitError(
                f"checkpoint step {step} was not committed: {outcome}",
                fix="earlier checkpoints are intact; fix the cause and save again",
            )
        return outcome

    def _agree_on_token(self, topology: Topology) -> str:
        if topology.world_size == 1:
            return secrets.token_hex(4)
        if topology.use_collectives:
            proposal = [secrets.token_hex(4) if topology.rank == 0 else None]
            initialized_dist().broadcast_object_list(proposal, group=topology.group, group_src=0)
            return str(proposal[0])
        return re.sub(r"[^A-Za-z0-9.]", "_", attempt_id())

    def _gather(self, step: int, topology: Topology, directory: Path, report: _Report) -> list[_Report] | None:
        """All ranks' reports on the committing rank (rank 0), None elsewhere."""
        if topology.world_size == 1:
            return [report]
        if topology.use_collectives:
            reports: list[Any] = [None] * topology.world_size
            initialized_dist().all_gather_object(reports, report, group=topology.group)
            return reports if topology.rank == 0 else None
        if topology.rank != 0:
            _replace_durably(directory / marker_name(topology.rank), json.dumps(report).encode())
            return None
        return [report] + self._wait_for_markers(step, topology.world_size, directory)

    def _wait_for_markers(self, step: int, world_size: int, directory: Path) -> list[_Report]:
        deadline = time.monotonic() + self.commit_timeout_s
        pause_s = 0.001
        reports: dict[int, _Report] = {}
        while True:
            for rank in range(1, world_size):
                if rank not in reports:
                    try:
                        reports[rank] = json.loads((directory / marker_name(rank)).read_bytes())
                    except FileNotFoundError:
                        pass
            missing = [rank for rank in range(1, world_size) if rank not in reports]
            if not missing:
                return [reports[rank] for rank in range(1, world_size)]
            if time.monotonic() > deadline:
                raise ClusterkitError(
                    f"checkpoint step {step} was not committed: rank(s) {missing} did not finish "
                    f"their part within {self.commit_timeout_s:.0f} s ({directory})",
                    fix="check those ranks' logs; earlier checkpoints are intact",
                )
            time.sleep(pause_s)
            pause_s = min(pause_s * 2, 0.1)

    def _commit(self, step: int, kind: str, world_size: int, directory: Path, reports: list[_Report],
                algorithm: ChecksumAlgorithm) -> Checkpoint:
        files: FileEntries = {}
        for report in reports:
            files.update(report["files"])
        for rank in range(1, world_size):
            (directory / marker_name(rank)).unlink(missing_ok=True)
        unclaimed = sorted(set(checkpoint_files(directory)) - set(files))
        files.update(digest_files(directory, unclaimed, algorithm))
        for name, entry in files.items():
            size = (directory / name).stat().st_size
            if size != entry["size"]:
                raise OSError(errno.EIO, f"{name} is {size} bytes, its writer reported {entry['size']}")
        manifest = new_manifest(step, kind, world_size, algorithm, files)
        _fsync_dir(directory)  # the files' names must be durable before the manifest vouches for them
        _write_durably(directory / MANIFEST, json.dumps(manifest, indent=1).encode())
        _fsync_dir(directory)
        self.retention.wait()  # one at a time, and none looking while a step appears
        final = self.root / step_dir_name(step)
        if final.exists():  # saving a step again (a resumed run): the new one replaces it
            discard(final)
        os.rename(directory, final)
        _fsync_dir(self.root)
        self.retention.vouch(final, files)
        try:
            _replace_durably(self.root / LATEST_POINTER, f"{final.name}\n".encode())
        except OSError as exc:  # committed already; latest() does not depend on the pointer
            log.warning("could not update %s: %s", self.root / LATEST_POINTER, exc)
        remove_crashed_saves(self.root, step)
        self.retention.start(step)
        return Checkpoint(step=step, path=final, manifest=manifest)


def describe(error: BaseException | None, step: int, root: Path) -> str | None:
    """One line for a rank's error in a save, as the other ranks are told it."""
    if error is None:
        return None
    if isinstance(error, OSError):
        return write_error(error, step, root).message
    return f"{type(error).__name__}: {error}"


def write_error(error: OSError, step: int, root: Path) -> ClusterkitError:
    """A failed write of checkpoint `step` under `root`, with the free space there and what to do."""
    try:
        free = f"{shutil.disk_usage(root).free / 2**20:.1f} MiB free"
    except OSError:
        free = "free space unknown"
    if error.errno == errno.ENOSPC:
        return ClusterkitError(
            f"no space left on the device holding {root} while saving checkpoint step {step} "
            f"({free}); the partial checkpoint was removed, earlier ones are intact",
            fix="free space there, lower keep=, or put checkpoints on a larger file system",
        )
    return ClusterkitError(
        f"could not write checkpoint step {step} under {root}: {error.strerror or error} ({free})",
        fix="check that the directory is writable and its file system healthy",
    )


def _write_durably(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_durably(path: Path, data: bytes) -> None:
    """Write-then-rename, so readers see the old or the new content, never a mix."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        _write_durably(temporary, data)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

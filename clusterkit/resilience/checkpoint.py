"""Checkpoints that are either complete and verifiable or invisible.

Layout under `root`:

    step-00000120/            a committed checkpoint: its files + manifest.json
    step-00000130/
    latest                    "step-00000130": a pointer for people and tools
    .pending-step-00000140-<token>/   a save in progress (or the debris of a crashed one)

A save writes every rank's files into one pending directory inside `root` (rename is atomic only
within one file system), fsyncs them, then one rank writes `manifest.json` (sizes and digests of
every file) last, renames the directory to `step-NNNNNNNN` and fsyncs `root`. That rename is the
commit point. `latest()` therefore trusts a scan of the `step-*` directories, newest first, and
returns the first one whose manifest verifies: the `latest` pointer can be missing or stale (a crash
between the rename and the pointer update) or point at damaged files, and then the scan is what
finds the right checkpoint anyway.

Digests are SHA-256 over a hash list: one SHA-256 per 16 MiB piece of a file, then a SHA-256 of the
concatenated piece digests. Pieces hash on several cores while the bytes are written (a single
SHA-256 stream runs at about the speed of a fast disk and would cap the save); `sha256sum` does not
produce this value, `verify` does.
"""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from clusterkit.errors import ClusterkitError, NotFound
from clusterkit.resilience.run_identity import attempt_id

log = logging.getLogger(__name__)

FORMAT = "clusterkit-checkpoint"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
LATEST_POINTER = "latest"
DIGEST_ALGORITHM = "sha256-list-16MiB"
HASH_PIECE_BYTES = 16 << 20
WRITE_WINDOW_BYTES = 64 << 20  # large enough for sequential disk writes, small enough to overlap hashing
SMALL_WRITE_BYTES = 1 << 20  # torch.save emits many tiny header records; batch them
HASH_THREADS = max(2, min(8, os.cpu_count() or 2))

Verify = Literal["full", "size"]
"""How hard `latest()` checks a candidate.

"full" re-reads every byte and compares digests: catches torn writes, bit rot and tampering, and
costs one read of the checkpoint (roughly 1 s per GB per core here). "size" compares only the
manifest's file sizes with the files on disk: instant, catches missing and truncated files (what a
crash of an unsynced writer leaves), but not flipped bytes. Saves fsync before they commit, so on
healthy storage "size" is usually enough for multi-hundred-GB checkpoints.
"""

_STEP_DIR = re.compile(r"^step-(\d{8,})$")
_PENDING_DIR = re.compile(r"^\.pending-step-(\d{8,})-")
_DISCARDED = ".discarded-"
_NOT_CHECKPOINT_FILES = re.compile(r"^(manifest\.json|rank-\d{5,}\.done\.json)$|\.tmp$")


@dataclass(frozen=True)
class Checkpoint:
    """A committed checkpoint that passed verification."""

    step: int
    path: Path
    manifest: dict[str, Any]


@dataclass(frozen=True)
class _Topology:
    rank: int
    world_size: int
    use_collectives: bool
    group: Any = None  # torch.distributed process group, None for the default one


class CheckpointManager:
    """Saves, finds and loads checkpoints under `root`, keeping the newest `keep` of them.

    Ranks: when a torch.distributed process group is initialised, every rank of it must call
    `save` (or `save_dcp`, `pending`) for the same step; they exchange their file lists with
    collectives and rank 0 commits. Without a process group, ranks coordinate through the file
    system: each writes a done-marker into the pending directory and rank 0 waits up to
    `commit_timeout_s` for all of them. Pass `world_size=1` when only one process saves (e.g. rank 0
    of a DDP job); explicit `rank`/`world_size` always select the file-system protocol.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        keep: int = 3,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        process_group: Any = None,
        commit_timeout_s: float = 600.0,
    ) -> None:
        if keep < 1:
            raise ClusterkitError(f"keep must be at least 1, got {keep}", fix="keep=1 or more")
        self.root = Path(root)
        self.keep = keep
        self._rank = rank
        self._world_size = world_size
        self._process_group = process_group
        self._commit_timeout_s = commit_timeout_s
        self._background: ThreadPoolExecutor | None = None
        self._in_flight: Future[Checkpoint | None] | None = None
        self._async_group: Any = None
        self._host_buffers: list[Any] = []
        self._last_commit: Checkpoint | None = None

    # ----- saving -------------------------------------------------------------------------------

    def save(self, step: int, state: Any) -> Checkpoint | None:
        """Write `state` (anything `torch.save` takes) as this rank's shard of checkpoint `step`.

        Returns the committed checkpoint on the rank that committed it, and on every rank when
        collectives coordinate the save; None on ranks that only contributed a shard.
        """
        self.wait()
        return self._save_torch(step, state, self._process_group)

    def save_async(self, step: int, state: Any, *, pin_memory: bool = False) -> None:
        """Copy `state` to host memory now and write it in a background thread.

        The caller may change its tensors as soon as this returns. At most one save is in flight:
        this first waits for the previous one and re-raises its error, if any. Host buffers are
        reused between calls when the state keeps its shapes. `pin_memory` allocates page-locked
        buffers so device-to-host copies run asynchronously (CUDA only).
        """
        self.wait()
        group = self._process_group
        if group is None and self._world_size is None and _initialized_dist() is not None:
            # Collectives from the writer thread must not interleave with the training loop's
            # collectives on the same group; every rank reaches this line at the same step.
            if self._async_group is None:
                self._async_group = _initialized_dist().new_group(backend="gloo")
            group = self._async_group
        host_state = self._copy_to_host(state, pin_memory=pin_memory)
        if self._background is None:
            self._background = ThreadPoolExecutor(1, thread_name_prefix="clusterkit-checkpoint")
        self._in_flight = self._background.submit(self._save_torch, step, host_state, group)

    def wait(self) -> Checkpoint | None:
        """Block until the in-flight background save is done; re-raise its error."""
        in_flight, self._in_flight = self._in_flight, None
        return in_flight.result() if in_flight is not None else None

    def close(self) -> None:
        """Finish the in-flight save (re-raising its error) and stop the writer thread."""
        try:
            self.wait()
        finally:
            if self._background is not None:
                self._background.shutdown()
                self._background = None

    def save_dcp(self, step: int, state_dict: dict[str, Any]) -> Checkpoint | None:
        """Save with `torch.distributed.checkpoint` into a pending directory, then commit."""
        import torch.distributed.checkpoint as dcp

        with self._pending(step, kind="dcp") as directory:
            dcp.save(state_dict, checkpoint_id=directory)
        return self._last_commit

    @contextmanager
    def pending(self, step: int) -> Iterator[Path]:
        """A directory to write checkpoint `step` into by other means; committed on exit.

        Every rank enters it; files are digested after all ranks have left the block, and the
        commit happens once. An exception in the block aborts the save on all ranks.
        """
        with self._pending(step, kind="files") as directory:
            yield directory

    # ----- finding and loading ------------------------------------------------------------------

    def latest(self, verify: Verify = "full") -> Checkpoint | None:
        """The newest committed checkpoint that verifies, or None. See `Verify` for the modes."""
        for _, path in self._step_dirs():
            checkpoint, problem = verify_checkpoint(path, verify)
            if checkpoint is not None:
                return checkpoint
            log.warning("skipping checkpoint %s: %s", path, problem)
        return None

    def load(
        self,
        checkpoint: Checkpoint | None = None,
        *,
        map_location: Any = None,
        rank: int | None = None,
        weights_only: bool = True,
    ) -> Any:
        """Return this rank's state from `checkpoint` (default: `latest()`), via `torch.load`."""
        import torch

        checkpoint = checkpoint or self._require_latest()
        if checkpoint.manifest.get("kind") != "torch":
            raise ClusterkitError(
                f"{checkpoint.path} was written by {checkpoint.manifest.get('kind')!r}, not torch.save",
                fix="use load_dcp() for checkpoints written with save_dcp()",
            )
        rank = self._topology(self._process_group).rank if rank is None else rank
        name = _shard_name(rank)
        if name not in checkpoint.manifest["files"]:
            raise ClusterkitError(
                f"{checkpoint.path} has no shard for rank {rank}; it was saved by "
                f"{checkpoint.manifest.get('world_size')} rank(s)",
                fix="resume with the world size the checkpoint was saved with, or pass rank=",
            )
        return torch.load(checkpoint.path / name, map_location=map_location, weights_only=weights_only)

    def load_dcp(self, state_dict: dict[str, Any], checkpoint: Checkpoint | None = None) -> Checkpoint:
        """Load a `save_dcp` checkpoint (default: `latest()`) into `state_dict` in place."""
        import torch.distributed.checkpoint as dcp

        checkpoint = checkpoint or self._require_latest()
        dcp.load(state_dict, checkpoint_id=checkpoint.path)
        return checkpoint

    # ----- the save protocol --------------------------------------------------------------------

    def _save_torch(self, step: int, state: Any, group: Any) -> Checkpoint | None:
        topology = self._topology(group)
        directory = self._open_pending(step, topology)
        files: dict[str, dict[str, Any]] = {}
        error: BaseException | None = None
        name = _shard_name(topology.rank)
        try:
            size, digest = _write_torch_file(state, directory / name)
            files[name] = {"size": size, "digest": digest}
        except BaseException as exc:  # peers must still hear about it, or they wait forever
            (directory / name).unlink(missing_ok=True)
            error = exc
        return self._finish(step, "torch", topology, directory, files, error)

    @contextmanager
    def _pending(self, step: int, kind: str) -> Iterator[Path]:
        self.wait()
        topology = self._topology(self._process_group)
        directory = self._open_pending(step, topology)
        error: BaseException | None = None
        try:
            yield directory
        except BaseException as exc:
            error = exc
        files: dict[str, dict[str, Any]] = {}
        if topology.use_collectives:
            dist = _initialized_dist()
            dist.barrier(group=topology.group)
            if error is None:
                # Everyone is done writing: split the digesting across ranks.
                names = sorted(_checkpoint_files(directory))
                mine = names[topology.rank :: topology.world_size]
                files = _digest_files(directory, mine)
        # Without collectives rank 0 digests whatever no rank claimed, after all markers are in.
        self._last_commit = self._finish(step, kind, topology, directory, files, error)

    def _open_pending(self, step: int, topology: _Topology) -> Path:
        token = self._agree_on_token(topology)
        directory = self.root / f".pending-step-{step:08d}-{token}"
        directory.mkdir(parents=True, exist_ok=True)
        # Debris of an earlier try of this very attempt must not be mistaken for this rank's work.
        for stale in (directory / _shard_name(topology.rank), directory / _marker_name(topology.rank)):
            stale.unlink(missing_ok=True)
        return directory

    def _agree_on_token(self, topology: _Topology) -> str:
        if topology.world_size == 1:
            return secrets.token_hex(4)
        if topology.use_collectives:
            proposal = [secrets.token_hex(4) if topology.rank == 0 else None]
            _initialized_dist().broadcast_object_list(proposal, group=topology.group, group_src=0)
            return str(proposal[0])
        return re.sub(r"[^A-Za-z0-9.]", "_", attempt_id())

    def _finish(
        self,
        step: int,
        kind: str,
        topology: _Topology,
        directory: Path,
        files: dict[str, dict[str, Any]],
        error: BaseException | None,
    ) -> Checkpoint | None:
        report = {"rank": topology.rank, "files": files, "error": _describe(error, step, self.root)}
        reports = self._gather(step, topology, directory, report)
        outcome: Checkpoint | str | None = None
        if reports is not None:
            failures = [f"rank {r['rank']}: {r['error']}" for r in reports if r["error"]]
            if failures:
                shutil.rmtree(directory, ignore_errors=True)
                outcome = "; ".join(failures)
            else:
                try:
                    outcome = self._commit(step, kind, topology.world_size, directory, reports)
                except OSError as exc:
                    shutil.rmtree(directory, ignore_errors=True)
                    outcome = f"rank {topology.rank}: {_describe(exc, step, self.root)}"
        if topology.use_collectives:
            shared = [outcome]
            _initialized_dist().broadcast_object_list(shared, group=topology.group, group_src=0)
            outcome = shared[0]
        if error is not None:
            if isinstance(error, OSError):
                raise _write_error(error, step, self.root) from error
            raise error
        if isinstance(outcome, str):
            raise ClusterkitError(
                f"checkpoint step {step} was not committed: {outcome}",
                fix="earlier checkpoints are intact; fix the cause and save again",
            )
        return outcome

    def _gather(
        self, step: int, topology: _Topology, directory: Path, report: dict[str, Any]
    ) -> list[dict[str, Any]] | None:
        """All ranks' reports on the committing rank (rank 0), None elsewhere."""
        if topology.world_size == 1:
            return [report]
        if topology.use_collectives:
            reports: list[Any] = [None] * topology.world_size
            _initialized_dist().all_gather_object(reports, report, group=topology.group)
            return reports if topology.rank == 0 else None
        if topology.rank != 0:
            _replace_durably(directory / _marker_name(topology.rank), json.dumps(report).encode())
            return None
        return [report] + self._wait_for_markers(step, topology.world_size, directory)

    def _wait_for_markers(self, step: int, world_size: int, directory: Path) -> list[dict[str, Any]]:
        deadline = time.monotonic() + self._commit_timeout_s
        pause_s = 0.001
        reports: dict[int, dict[str, Any]] = {}
        while True:
            for rank in range(1, world_size):
                if rank not in reports:
                    try:
                        reports[rank] = json.loads((directory / _marker_name(rank)).read_bytes())
                    except FileNotFoundError:
                        pass
            missing = [rank for rank in range(1, world_size) if rank not in reports]
            if not missing:
                return [reports[rank] for rank in range(1, world_size)]
            if time.monotonic() > deadline:
                raise ClusterkitError(
                    f"checkpoint step {step} was not committed: rank(s) {missing} did not finish "
                    f"their part within {self._commit_timeout_s:.0f} s ({directory})",
                    fix="check those ranks' logs; earlier checkpoints are intact",
                )
            time.sleep(pause_s)
            pause_s = min(pause_s * 2, 0.1)

    def _commit(
        self, step: int, kind: str, world_size: int, directory: Path, reports: list[dict[str, Any]]
    ) -> Checkpoint:
        files: dict[str, dict[str, Any]] = {}
        for report in reports:
            files.update(report["files"])
        for rank in range(1, world_size):
            (directory / _marker_name(rank)).unlink(missing_ok=True)
        unclaimed = sorted(set(_checkpoint_files(directory)) - set(files))
        files.update(_digest_files(directory, unclaimed))
        for name, entry in files.items():
            size = (directory / name).stat().st_size
            if size != entry["size"]:
                raise OSError(errno.EIO, f"{name} is {size} bytes, its writer reported {entry['size']}")
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "step": step,
            "kind": kind,
            "world_size": world_size,
            "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "digest_algorithm": DIGEST_ALGORITHM,
            "files": dict(sorted(files.items())),
        }
        _fsync_dir(directory)  # the files' names must be durable before the manifest vouches for them
        _write_durably(directory / MANIFEST, json.dumps(manifest, indent=1).encode())
        _fsync_dir(directory)
        final = self.root / _step_dir_name(step)
        if final.exists():  # saving a step again (a resumed run): the new one replaces it
            _discard(final)
        os.rename(directory, final)
        _fsync_dir(self.root)
        try:
            _replace_durably(self.root / LATEST_POINTER, f"{final.name}\n".encode())
        except OSError as exc:  # committed already; latest() does not depend on the pointer
            log.warning("could not update %s: %s", self.root / LATEST_POINTER, exc)
        self._remove_old(step)
        return Checkpoint(step=step, path=final, manifest=manifest)

    def _remove_old(self, committed_step: int) -> None:
        """Keep the newest `keep` valid checkpoints plus the one just committed; drop the rest,
        and the debris of crashed saves of steps up to this one (later ones may be in progress)."""
        valid_kept = 0
        for step, path in self._step_dirs():
            if step == committed_step:
                valid_kept += 1
            elif valid_kept < self.keep and verify_checkpoint(path, "size")[0] is not None:
                valid_kept += 1
            else:
                _discard(path)
        for entry in self.root.iterdir():
            pending = _PENDING_DIR.match(entry.name)
            if (pending and int(pending.group(1)) <= committed_step) or entry.name.startswith(_DISCARDED):
                shutil.rmtree(entry, ignore_errors=True)

    # ----- helpers ------------------------------------------------------------------------------

    def _topology(self, group: Any) -> _Topology:
        if self._world_size is None:
            dist = _initialized_dist()
            if dist is not None:
                return _Topology(dist.get_rank(group), dist.get_world_size(group), True, group)
        world_size = self._world_size or int(os.environ.get("WORLD_SIZE") or 1)
        rank = self._rank if self._rank is not None else int(os.environ.get("RANK") or 0)
        if world_size == 1:
            rank = 0
        return _Topology(rank, world_size, False)

    def _step_dirs(self) -> list[tuple[int, Path]]:
        """Committed checkpoint directories, newest first."""
        try:
            entries = list(self.root.iterdir())
        except FileNotFoundError:
            return []
        found = [(int(m.group(1)), e) for e in entries if (m := _STEP_DIR.match(e.name)) and e.is_dir()]
        return sorted(found, reverse=True)

    def _require_latest(self) -> Checkpoint:
        checkpoint = self.latest()
        if checkpoint is None:
            raise NotFound(
                f"no valid checkpoint under {self.root}",
                fix="check the path, or start from scratch when this is the first run",
            )
        return checkpoint

    def _copy_to_host(self, state: Any, *, pin_memory: bool) -> Any:
        """A deep copy of `state` whose tensors live in host memory, reusing earlier buffers."""
        import torch

        previous, self._host_buffers = self._host_buffers, []
        by_identity: dict[int, Any] = {}  # tied weights stay one tensor
        needs_sync = False

        def to_host(tensor: torch.Tensor) -> torch.Tensor:
            nonlocal needs_sync
            index = len(self._host_buffers)
            reusable = previous[index] if index < len(previous) else None
            if reusable is None or reusable.shape != tensor.shape or reusable.dtype != tensor.dtype:
                pin = pin_memory and tensor.device.type != "cpu"
                reusable = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=pin)
            non_blocking = reusable.is_pinned() and tensor.device.type != "cpu"
            reusable.copy_(tensor.detach(), non_blocking=non_blocking)
            needs_sync = needs_sync or non_blocking
            self._host_buffers.append(reusable)
            return reusable

        def walk(node: Any) -> Any:
            if isinstance(node, torch.Tensor):
                if id(node) not in by_identity:
                    by_identity[id(node)] = to_host(node)
                return by_identity[id(node)]
            if isinstance(node, dict):
                out = copy.copy(node)  # keeps OrderedDict and other mapping types
                for key, value in node.items():
                    out[key] = walk(value)
                return out
            if isinstance(node, list):
                return [walk(value) for value in node]
            if isinstance(node, tuple):
                items = [walk(value) for value in node]
                return type(node)(*items) if hasattr(node, "_fields") else type(node)(items)
            return copy.deepcopy(node)

        host_state = walk(state)
        if needs_sync:
            torch.cuda.synchronize()
        return host_state


def verify_checkpoint(path: Path, mode: Verify = "full") -> tuple[Checkpoint | None, str]:
    """Check one checkpoint directory; returns (checkpoint, "") or (None, what is wrong)."""
    match = _STEP_DIR.match(path.name)
    try:
        manifest = json.loads((path / MANIFEST).read_bytes())
    except FileNotFoundError:
        return None, "no manifest (an incomplete or foreign directory)"
    except (OSError, ValueError) as exc:
        return None, f"unreadable manifest: {exc}"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return None, "manifest is not a clusterkit checkpoint manifest"
    if manifest.get("version") != FORMAT_VERSION or manifest.get("digest_algorithm") != DIGEST_ALGORITHM:
        return None, f"unsupported manifest version {manifest.get('version')}"
    if match is None or manifest.get("step") != int(match.group(1)):
        return None, f"manifest step {manifest.get('step')} does not match the directory name"
    files = manifest.get("files") or {}
    for name, entry in files.items():
        try:
            size = (path / name).stat().st_size
        except FileNotFoundError:
            return None, f"{name} is missing"
        if size != entry["size"]:
            return None, f"{name} is {size} bytes, the manifest says {entry['size']}"
    if mode == "full":
        digests = _digest_files(path, list(files))
        for name, entry in files.items():
            if digests[name]["digest"] != entry["digest"]:
                return None, f"{name} does not match its checksum"
    return Checkpoint(step=manifest["step"], path=path, manifest=manifest), ""


# ----- writing files ----------------------------------------------------------------------------


class _PieceDigest:
    """The hash-list digest of a byte stream, fed in order; pieces can hash concurrently."""

    def __init__(self) -> None:
        self._finished: list[Any] = []
        self._current = hashlib.sha256()
        self._filled = 0

    def update(self, view: memoryview, pool: ThreadPoolExecutor) -> list[Future[None]]:
        """Start hashing `view`; the caller must wait for the futures before the next update."""
        futures = []
        while len(view):
            take = min(HASH_PIECE_BYTES - self._filled, len(view))
            futures.append(pool.submit(self._current.update, view[:take]))
            self._filled += take
            view = view[take:]
            if self._filled == HASH_PIECE_BYTES:
                self._finished.append(self._current)
                self._current, self._filled = hashlib.sha256(), 0
        return futures

    def hexdigest(self) -> str:
        pieces = self._finished + ([self._current] if self._filled or not self._finished else [])
        return hashlib.sha256(b"".join(piece.digest() for piece in pieces)).hexdigest()


class _HashingFile:
    """A write-only file for `torch.save` that digests the bytes while writing them.

    Large writes go out in 64 MiB windows: each window's pieces hash in worker threads while the
    calling thread writes it (both release the GIL), and the kernel is asked to start writing the
    window back at once, so the final fsync finds little left to do.
    """

    def __init__(self, path: Path, pool: ThreadPoolExecutor) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._pool = pool
        self._small = bytearray()
        self._digest = _PieceDigest()
        self.size = 0
        self.error: OSError | None = None  # torch.save replaces it with a vaguer error on exit

    def write(self, data: Any) -> int:
        try:
            return self._write(memoryview(data).cast("B"))
        except OSError as exc:
            self.error = self.error or exc
            raise

    def _write(self, view: memoryview) -> int:
        if len(view) < SMALL_WRITE_BYTES:
            self._small += view
            if len(self._small) >= SMALL_WRITE_BYTES:
                self._flush_small()
        else:
            self._flush_small()
            for start in range(0, len(view), WRITE_WINDOW_BYTES):
                self._write_window(view[start : start + WRITE_WINDOW_BYTES])
        return len(view)

    def flush(self) -> None:
        """torch.save calls this; data reaches the disk in `finish`."""

    def finish(self) -> tuple[int, str]:
        """Write what is buffered, fsync; returns (size, digest)."""
        self._flush_small()
        os.fsync(self._fd)
        return self.size, self._digest.hexdigest()

    def close(self) -> None:
        os.close(self._fd)

    def _flush_small(self) -> None:
        if self._small:
            buffered, self._small = self._small, bytearray()
            self._write_window(memoryview(buffered))

    def _write_window(self, view: memoryview) -> None:
        hashing = self._digest.update(view, self._pool)
        written = 0
        while written < len(view):
            written += os.write(self._fd, view[written:])
        if hasattr(os, "posix_fadvise"):
            # Starts writeback of this window now (and drops it from the page cache once clean).
            os.posix_fadvise(self._fd, self.size, len(view), os.POSIX_FADV_DONTNEED)
        for future in hashing:
            future.result()
        self.size += len(view)


def _write_torch_file(state: Any, path: Path) -> tuple[int, str]:
    import torch.serialization

    with ThreadPoolExecutor(HASH_THREADS, thread_name_prefix="clusterkit-digest") as pool:
        sink = _HashingFile(path, pool)
        try:
            # The zip writer's per-record CRC32 runs serially before each write; our digest
            # already covers every byte, so skip it.
            crc32_before = torch.serialization.get_crc32_options()
            torch.serialization.set_crc32_options(False)
            try:
                torch.save(state, sink)
            except Exception:
                if sink.error is not None:
                    raise sink.error from None
                raise
            finally:
                torch.serialization.set_crc32_options(crc32_before)
            return sink.finish()
        finally:
            sink.close()


def _digest_files(directory: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """Size and digest of each named file, reading pieces on several threads."""

    def piece_digest(fd: int, offset: int) -> bytes:
        return hashlib.sha256(os.pread(fd, HASH_PIECE_BYTES, offset)).digest()

    result: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(HASH_THREADS, thread_name_prefix="clusterkit-verify") as pool:
        for name in names:
            fd = os.open(directory / name, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                offsets = range(0, size, HASH_PIECE_BYTES) or [0]
                pieces = pool.map(lambda offset: piece_digest(fd, offset), offsets)
                digest = hashlib.sha256(b"".join(pieces)).hexdigest()
            finally:
                os.close(fd)
            result[name] = {"size": size, "digest": digest}
    return result


def _checkpoint_files(directory: Path) -> list[str]:
    """Relative paths of the files a checkpoint consists of (markers and temporaries excluded)."""
    return [
        str(path.relative_to(directory))
        for path in directory.rglob("*")
        if path.is_file() and not _NOT_CHECKPOINT_FILES.search(path.name)
    ]


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


def _discard(checkpoint_dir: Path) -> None:
    """Take a checkpoint out of sight atomically, then delete it: a crash halfway through a
    deletion must not leave a half-deleted directory under a committed name."""
    hidden = checkpoint_dir.with_name(f"{_DISCARDED}{checkpoint_dir.name}-{secrets.token_hex(4)}")
    os.rename(checkpoint_dir, hidden)
    shutil.rmtree(hidden, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _describe(error: BaseException | None, step: int, root: Path) -> str | None:
    if error is None:
        return None
    if isinstance(error, OSError):
        return _write_error(error, step, root).message
    return f"{type(error).__name__}: {error}"


def _write_error(error: OSError, step: int, root: Path) -> ClusterkitError:
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


def _initialized_dist() -> Any:
    """`torch.distributed` when a process group is initialised, else None."""
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def _step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def _shard_name(rank: int) -> str:
    return f"rank-{rank:05d}.pt"


def _marker_name(rank: int) -> str:
    return f"rank-{rank:05d}.done.json"


__all__ = ["Checkpoint", "CheckpointManager", "Verify", "verify_checkpoint"]

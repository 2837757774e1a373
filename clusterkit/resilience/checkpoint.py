"""Checkpoints that are either complete and verifiable or invisible.

Layout under `root`:

    step-00000120/            a committed checkpoint: its files + manifest.json
    step-00000130/
    latest                    "step-00000130": a pointer for people and tools
    .pending-step-00000140-<token>/   a save in progress (or the debris of a crashed one)

A save writes every rank's files into one pending directory inside `root` (rename is atomic only
within one file system), fsyncs them, then one rank writes `manifest.json` (sizes and digests of
every file, and the algorithm that made the digests) last, renames the directory to
`step-NNNNNNNN` and fsyncs `root`. That rename is the commit point. `latest()` therefore trusts a
scan of the `step-*` directories, newest first: the `latest` pointer can be missing or stale (a
crash between the rename and the pointer update), and then the scan finds the right checkpoint
anyway. Old checkpoints are deleted after the commit, on a background thread, which also reads
each kept one back in full once: a damaged checkpoint does not count as one of the `keep`. The next
save writes meanwhile and waits for that thread only at its own commit.

Checksums are computed while the bytes are written and checked while they are read back
(`checksums.py` says which algorithm catches what): `latest()` picks the newest checkpoint whose
manifest and file sizes check out, and `resume()` / `load()` read its files once, verifying every
piece on the way into torch; a checkpoint whose bytes fail is skipped for the next older one.
"""


from __future__ import annotations

import copy
import errno
import json
import logging
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from clusterkit.errors import ClusterkitError, NotFound
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.resilience.checkpoint_files import (
    ChecksummedFile,
    SpooledChecksummedFile,
    SpoolBuffers,
    VerifyingFile,
    lower_priority,
    shared_executor,
)
from clusterkit.resilience.checksums import (
    ALGORITHMS,
    Checksum,
    ChecksumAlgorithm,
    algorithm_for,
    digest_file,
    hash_threads,
)
from clusterkit.resilience.run_identity import attempt_id

log = logging.getLogger(__name__)

FORMAT = "clusterkit-checkpoint"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
LATEST_POINTER = "latest"

Verify = Literal["full", "size"]
"""How hard `latest()` checks a candidate.

"size" (the default) reads the manifest and compares its file sizes with the files on disk:
instant; catches missing, truncated and foreign files (what a crash of an unsynced writer leaves).
Flipped bytes are caught when `resume()`/`load()` read the files, which verify every piece on the
way. "full" re-reads every byte and compares digests now: one extra read of the checkpoint.
"""

_STEP_DIR = re.compile(r"^step-(\d{8,})$")
_PENDING_DIR = re.compile(r"^\.pending-step-(\d{8,})-")
_DISCARDED = ".discarded-"
_NOT_CHECKPOINT_FILES = re.compile(r"^(manifest\.json|rank-\d{5,}\.done\.json)$|\.tmp$")


class DamagedCheckpoint(ClusterkitError):
    """A committed checkpoint whose bytes do not match its manifest's checksums."""


@lean_dataclass(frozen=True)
class Checkpoint:
    """A committed checkpoint whose manifest checks out (see `Verify` for how far)."""

    step: int
    path: Path
    manifest: dict[str, Any]


@lean_dataclass(frozen=True)
class _Topology:
    rank: int
    world_size: int
    use_collectives: bool
    group: Any = None  # torch.distributed process group, None for the default one


@lean_dataclass(frozen=True)
class _TorchWrite:
    """A shard in the page cache or spooled in host buffers, waiting to be made durable and committed (or its
    error)."""

    topology: _Topology
    directory: Path
    path: Path
    sink: ChecksummedFile | SpooledChecksummedFile | None
    error: BaseException | None


class CheckpointManager:
    """Saves, finds and loads checkpoints under `root`, keeping the newest `keep` of them.

    `checksum` picks the algorithm new checkpoints are written with: "xxh3" (the default; catches
    accidental damage at memory speed) or "sha256" (tamper evidence as well, at about 1.5 GB/s per
    core). Checkpoints written with either, or by earlier versions, verify and load alike.

    Ranks: when a torch.distributed process group is initialised, every rank of it must call
    `save` (or `save_dcp`, `pending`, `resume`) for the same step; they exchange their file lists
    with collectives and rank 0 commits. Without a process group, ranks coordinate through the file
    system: each writes a done-marker into the pending directory and rank 0 waits up to
    `commit_timeout_s` for all of them. Pass `world_size=1` when only one process saves (e.g. rank 0
    of a DDP job); explicit `rank`/`world_size` always select the file-system protocol.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        keep: int = 3,
        *,
        checksum: Checksum = "xxh3",
        rank: int | None = None,
        world_size: int | None = None,
        process_group: Any = None,
        commit_timeout_s: float = 600.0,
    ) -> None:
        if keep < 1:
            raise ClusterkitError(f"keep must be at least 1, got {keep}", fix="keep=1 or more")
        self.root = Path(root)
        self.keep = keep
        self.checksum = algorithm_for(checksum)
        self._rank = rank
        self._world_size = world_size
        self._process_group = process_group
        self._commit_timeout_s = commit_timeout_s
        self._background: ThreadPoolExecutor | None = None
        self._in_flight: Future[Checkpoint | None] | None = None
        self._retention: Future[None] | None = None
        self._async_group: Any = None
        self._host_buffers: list[Any] = []
        self._spool = SpoolBuffers()
        self._last_commit: Checkpoint | None = None
        # Checkpoints known whole, by the identity of their files: committed here, or read back in full.
        self._verified: set[tuple[Any, ...]] = set()

    # ----- saving -------------------------------------------------------------------------------

    def save(self, step: int, state: Any) -> Checkpoint | None:
        """Write `state` (anything `torch.save` takes) as this rank's shard of checkpoint `step`.

        Returns the committed checkpoint on the rank that committed it, and on every rank when
        collectives coordinate the save; None on ranks that only contributed a shard.
        """
        self.wait()
        return self._save_torch(step, state, self._process_group, background=False)

    def save_async(self, step: int, state: Any, *, pin_memory: bool = False) -> None:
        """Take `state` now; make it a durable checkpoint in a background thread.

        The caller may change its tensors as soon as this returns. At most one save is in flight:
        this first waits for the previous one and re-raises its error, if any.

        State on an accelerator is copied to host buffers (reused between calls while the state
        keeps its shapes; `pin_memory` makes them page-locked so device-to-host copies run
        asynchronously, CUDA only) and written in the background. State already in host memory
        is serialized during the call into host buffers kept from the previous save (one copy, no
        page faults); the checksum, the writes (O_DIRECT where the file system takes it, so no
        page-cache memory is taken from training), the fsync, the commit and the retention follow
        in the background, on threads at a lower CPU priority than the caller. Either way, host
        memory the size of this rank's state stays reserved for the next save until `close()`.
        """
        self.wait()
        group = self._process_group
        if group is None and self._world_size is None and _initialized_dist() is not None:
            # Collectives from the writer thread must not interleave with the training loop's
            # collectives on the same group; every rank reaches this line at the same step.
            if self._async_group is None:
                self._async_group = _initialized_dist().new_group(backend="gloo")
            group = self._async_group
        if self._background is None:
            self._background = ThreadPoolExecutor(1, thread_name_prefix="clusterkit-checkpoint",
                                                  initializer=lower_priority)
        if _in_host_memory(state):
            started = self._start_torch_write(step, state, group, _hash_pool(background=True), spool=self._spool)
            if started.error is not None:
                self._complete_torch_write(step, started)  # tells the peers, then raises the error here
            else:
                self._in_flight = self._background.submit(self._complete_torch_write, step, started)
        else:
            host_state = self._copy_to_host(state, pin_memory=pin_memory)
            self._in_flight = self._background.submit(self._save_torch, step, host_state, group, background=True)

    def wait(self) -> Checkpoint | None:
        """Block until the in-flight background save is done; re-raise its error."""
        in_flight, self._in_flight = self._in_flight, None
        return in_flight.result() if in_flight is not None else None

    def close(self) -> None:
        """Finish the in-flight save (re-raising its error) and old checkpoints' deletion."""
        try:
            self.wait()
        finally:
            self._wait_for_retention()
            if self._background is not None:
                self._background.shutdown()
                self._background = None
            self._spool.release()
            self._host_buffers = []

    def save_dcp(self, step: int, state_dict: dict[str, Any]) -> Checkpoint | None:
        """Save with `torch.distributed.checkpoint` into a pending directory, then commit.

        Files are checksummed while DCP writes them (a storage writer of ours), not re-read."""
        import torch.distributed.checkpoint as dcp

        from clusterkit.resilience.dcp_writer import ChecksummingWriter

        with self._pending(step, kind="dcp") as (directory, files):
            with _torch_crc32_off():
                dcp.save(state_dict, storage_writer=ChecksummingWriter(directory, self.checksum, files, _hash_pool()))
        return self._last_commit

    @contextmanager
    def pending(self, step: int) -> Iterator[Path]:
        """A directory to write checkpoint `step` into by other means; committed on exit.

        Every rank enters it; files are digested after all ranks have left the block, and the
        commit happens once. An exception in the block aborts the save on all ranks.
        """
        with self._pending(step, kind="files") as (directory, _):
            yield directory

    # ----- finding and loading ------------------------------------------------------------------

    def latest(self, verify: Verify = "size") -> Checkpoint | None:
        """The newest committed checkpoint that passes `verify` (see `Verify`), or None."""
        for checkpoint in self._candidates(verify):
            return checkpoint
        return None

    def resume(
        self, *, map_location: Any = None, rank: int | None = None, weights_only: bool = True
    ) -> tuple[Checkpoint, Any] | None:
        """The newest checkpoint whose bytes verify as they load, with this rank's state from it.

        Each candidate (newest first, picked by the cheap check) is read once, every piece checked
        on its way into `torch.load`; one that fails is skipped, with a warning, for the next older
        one. With a process group, the ranks agree: a checkpoint is taken only if every rank's shard
        verified. None when no checkpoint verifies.
        """
        topology = self._topology(self._process_group)
        rank = topology.rank if rank is None else rank
        agree = topology.use_collectives and topology.world_size > 1
        for checkpoint in self._candidates("size"):
            state, problem, fatal = None, None, None
            try:
                if not topology.use_collectives and topology.world_size > 1:
                    # No way to hear from the other ranks: check their shards too, so that every
                    # rank reaches the same verdict.
                    _verify_files(checkpoint, [n for n in checkpoint.manifest["files"] if n != _shard_name(rank)])
                state = self._load_verified(checkpoint, rank, map_location, weights_only)
            except DamagedCheckpoint as damaged:
                problem = damaged.message
            except ClusterkitError as error:  # not damage (e.g. no shard for this rank): stop, on every rank
                if not agree:
                    raise
                fatal = error
            if agree:
                verdicts: list[Any] = [None] * topology.world_size
                verdict = (checkpoint.step, problem, str(fatal) if fatal else None)
                _initialized_dist().all_gather_object(verdicts, verdict, group=topology.group)
                stop = next((f"rank {r}: {f}" for r, (_, _, f) in enumerate(verdicts) if f), None)
                if stop:
                    raise ClusterkitError(f"cannot resume from {checkpoint.path}: {stop}")
                problem = next((f"rank {r}: {p or f'saw step {s}'}" for r, (s, p, _) in enumerate(verdicts)
                                if p or s != checkpoint.step), None)
            if problem is None:
                return checkpoint, state
            log.warning("skipping checkpoint %s: %s", checkpoint.path, problem)
        return None

    def load(
        self,
        checkpoint: Checkpoint | None = None,
        *,
        map_location: Any = None,
        rank: int | None = None,
        weights_only: bool = True,
    ) -> Any:
        """This rank's state from `checkpoint`, via `torch.load`, every piece verified as it is read.

        Without `checkpoint`: the state `resume()` finds (falling back past damaged checkpoints).
        With one: exactly that checkpoint; `DamagedCheckpoint` if its bytes do not verify.
        """
        if checkpoint is None:
            resumed = self.resume(map_location=map_location, rank=rank, weights_only=weights_only)
            if resumed is None:
                raise self._nothing_to_load()
            return resumed[1]
        rank = self._topology(self._process_group).rank if rank is None else rank
        return self._load_verified(checkpoint, rank, map_location, weights_only)

    def load_dcp(self, state_dict: dict[str, Any], checkpoint: Checkpoint | None = None) -> Checkpoint:
        """Load a `save_dcp` checkpoint (default: the newest that verifies) into `state_dict` in place.

        DCP reads its files in its own pattern, so they are verified in full before it reads them.
        """
        import torch.distributed.checkpoint as dcp

        if checkpoint is None:
            checkpoint = self.latest(verify="full")
            if checkpoint is None:
                raise self._nothing_to_load()
        else:
            _verify_files(checkpoint, list(checkpoint.manifest["files"]))
        dcp.load(state_dict, checkpoint_id=checkpoint.path)
        return checkpoint

    # ----- the save protocol --------------------------------------------------------------------

    def _save_torch(self, step: int, state: Any, group: Any, *, background: bool) -> Checkpoint | None:
        started = self._start_torch_write(step, state, group, _hash_pool(background=background))
        return self._complete_torch_write(step, started)

    def _start_torch_write(self, step: int, state: Any, group: Any, pool: Executor,
                           spool: SpoolBuffers | None = None) -> _TorchWrite:
        """This rank's shard written into the page cache, or into `spool` (not yet durable), or the error."""
        topology = self._topology(group)
        directory = self._open_pending(step, topology)
        path = directory / _shard_name(topology.rank)
        try:
            sink = _start_torch_file(state, path, self.checksum, pool, spool)
            return _TorchWrite(topology, directory, path, sink, None)
        except BaseException as exc:  # peers must still hear about it, or they wait forever
            path.unlink(missing_ok=True)
            return _TorchWrite(topology, directory, path, None, exc)

    def _complete_torch_write(self, step: int, started: _TorchWrite) -> Checkpoint | None:
        """fsync the shard, then the commit protocol (which raises the write's error, if any)."""
        files: dict[str, dict[str, Any]] = {}
        error = started.error
        if started.sink is not None:
            try:
                size, digest = started.sink.finish()
                files[started.path.name] = {"size": size, "digest": digest}
            except BaseException as exc:
                started.path.unlink(missing_ok=True)
                error = exc
            finally:
                started.sink.close()
        return self._finish(step, "torch", started.topology, started.directory, files, error)

    @contextmanager
    def _pending(self, step: int, kind: str) -> Iterator[tuple[Path, dict[str, dict[str, Any]]]]:
        """A pending directory, and a dict for the block to record files it digested itself."""
        self.wait()
        topology = self._topology(self._process_group)
        directory = self._open_pending(step, topology)
        files: dict[str, dict[str, Any]] = {}
        error: BaseException | None = None
        try:
            yield directory, files
        except BaseException as exc:
            error = exc
        if topology.use_collectives:
            dist = _initialized_dist()
            dist.barrier(group=topology.group)
            if error is None and kind == "files":
                # Everyone is done writing: split the digesting across ranks.
                names = sorted(_checkpoint_files(directory))
                files.update(_digest_files(directory, names[topology.rank :: topology.world_size], self.checksum))
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
        files.update(_digest_files(directory, unclaimed, self.checksum))
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
            "digest_algorithm": self.checksum.name,
            "files": dict(sorted(files.items())),
        }
        _fsync_dir(directory)  # the files' names must be durable before the manifest vouches for them
        _write_durably(directory / MANIFEST, json.dumps(manifest, indent=1).encode())
        _fsync_dir(directory)
        self._wait_for_retention()  # one at a time, and none looking while a step appears
        final = self.root / _step_dir_name(step)
        if final.exists():  # saving a step again (a resumed run): the new one replaces it
            _discard(final)
        os.rename(directory, final)
        _fsync_dir(self.root)
        # Its digests came from the bytes as they were written, each file fsynced: whole unless changed since.
        identity = _identity(final, files)
        if identity is not None:
            self._verified.add(identity)
        try:
            _replace_durably(self.root / LATEST_POINTER, f"{final.name}\n".encode())
        except OSError as exc:  # committed already; latest() does not depend on the pointer
            log.warning("could not update %s: %s", self.root / LATEST_POINTER, exc)
        self._remove_debris(step)
        self._retention = shared_executor("retention", 1, low_priority=True).submit(self._remove_old, step)
        return Checkpoint(step=step, path=final, manifest=manifest)

    def _remove_old(self, committed_step: int) -> None:
        """Keep the one just committed and the newest others up to `keep` in all that verify byte for
        byte (a damaged checkpoint of the right size must not take the place of an older good one):
        those this manager committed whose files are unchanged since (same inode, size, modification
        and change times), and any other once read back in full. Drop the rest, and what crashed
        deletions left. Runs after the commit on a background thread:
        neither reading back nor deleting is on the save's path, and the next save writes meanwhile
        (it waits at its commit)."""
        try:
            valid_kept = 0
            for step, path in self._step_dirs():
                if step == committed_step or (valid_kept < self.keep and self._verifies_in_full(path)):
                    valid_kept += 1
                else:
                    _discard(path)
            for entry in self.root.iterdir():
                if entry.name.startswith(_DISCARDED):
                    shutil.rmtree(entry, ignore_errors=True)
        except OSError as exc:  # the checkpoint is committed; the next save tries again
            log.warning("could not remove old checkpoints under %s: %s", self.root, exc)

    def _remove_debris(self, committed_step: int) -> None:
        """Remove the pending directories of crashed saves of steps up to `committed_step` (later ones
        may be in progress). At the commit, not later: crashes are rare, and so the debris of one
        never outlives the next commit, whatever happens to the retention thread."""
        try:
            for entry in self.root.iterdir():
                pending = _PENDING_DIR.match(entry.name)
                if pending and int(pending.group(1)) <= committed_step:
                    shutil.rmtree(entry, ignore_errors=True)
        except OSError as exc:
            log.warning("could not remove crashed saves under %s: %s", self.root, exc)

    def _verifies_in_full(self, path: Path) -> bool:
        """Whether the checkpoint at `path` checks out byte for byte: one this manager committed, or read
        back once (at low priority); from then on the identity of its files stands for it, so a file
        changed since (a write, a truncation, a replacement) is read back again."""
        checkpoint, problem = verify_checkpoint(path, "size")
        identity = _identity(path, checkpoint.manifest["files"]) if checkpoint is not None else None
        if identity is not None and identity in self._verified:
            return True
        if checkpoint is not None:
            try:
                _verify_files(checkpoint, list(checkpoint.manifest["files"]), _hash_pool(background=True))
            except DamagedCheckpoint as damaged:
                checkpoint, problem = None, damaged.message
        if checkpoint is None or identity is None:
            log.warning("removing checkpoint %s: %s", path, problem or "a file of it is missing")
            return False
        if _identity(path, checkpoint.manifest["files"]) == identity:  # unchanged while it was read
            self._verified.add(identity)
        return True

    def _wait_for_retention(self) -> None:
        retention, self._retention = self._retention, None
        if retention is not None:
            retention.result()

    # ----- loading ------------------------------------------------------------------------------

    def _candidates(self, verify: Verify) -> Iterator[Checkpoint]:
        """Committed checkpoints that pass `verify`, newest first."""
        for _, path in self._step_dirs():
            checkpoint, problem = verify_checkpoint(path, verify)
            if checkpoint is not None:
                yield checkpoint
            else:
                log.warning("skipping checkpoint %s: %s", path, problem)

    def _load_verified(self, checkpoint: Checkpoint, rank: int, map_location: Any, weights_only: bool) -> Any:
        import torch

        if checkpoint.manifest.get("kind") != "torch":
            raise ClusterkitError(
                f"{checkpoint.path} was written by {checkpoint.manifest.get('kind')!r}, not torch.save",
                fix="use load_dcp() for checkpoints written with save_dcp()",
            )
        name = _shard_name(rank)
        entry = checkpoint.manifest["files"].get(name)
        if entry is None:
            raise ClusterkitError(
                f"{checkpoint.path} has no shard for rank {rank}; it was saved by "
                f"{checkpoint.manifest.get('world_size')} rank(s)",
                fix="resume with the world size the checkpoint was saved with, or pass rank=",
            )
        failure: Exception | None = None
        try:
            with VerifyingFile(checkpoint.path / name, _algorithm_of(checkpoint.manifest), _hash_pool()) as source:
                try:
                    state = torch.load(source, map_location=map_location, weights_only=weights_only)
                except Exception as exc:  # damaged bytes may break the zip or the pickle first
                    failure = exc
                digest = source.digest()
        except OSError as exc:
            raise DamagedCheckpoint(f"{checkpoint.path / name} cannot be read: {exc}") from exc
        if digest != entry["digest"]:
            raise DamagedCheckpoint(
                f"{checkpoint.path / name} does not match its checksum",
                fix="an older checkpoint is used when one verifies; check the storage that held this one",
            )
        if failure is not None:
            raise failure
        return state

    def _nothing_to_load(self) -> NotFound:
        return NotFound(
            f"no valid checkpoint under {self.root}",
            fix="check the path, or start from scratch when this is the first run",
        )

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
    if manifest.get("version") != FORMAT_VERSION:
        return None, f"unsupported manifest version {manifest.get('version')}"
    if manifest.get("digest_algorithm") not in ALGORITHMS:
        return None, (f"unknown digest algorithm {manifest.get('digest_algorithm')!r} "
                      f"(this clusterkit reads {', '.join(ALGORITHMS)})")
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
    checkpoint = Checkpoint(step=manifest["step"], path=path, manifest=manifest)
    if mode == "full":
        try:
            _verify_files(checkpoint, list(files))
        except DamagedCheckpoint as damaged:
            return None, damaged.message
    return checkpoint, ""


def _identity(path: Path, files: dict[str, Any]) -> tuple[Any, ...] | None:
    """What stands for a checkpoint whose bytes were checked: its files' inodes, sizes and modification
    and change times (any write, truncation or replacement changes one), or None if one is missing."""
    try:
        return (path.name, *((name, *_stat_identity(path / name)) for name in (MANIFEST, *sorted(files))))
    except OSError:
        return None


def _stat_identity(path: Path) -> tuple[int, int, int, int]:
    found = path.stat()
    return found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns


def _algorithm_of(manifest: dict[str, Any]) -> ChecksumAlgorithm:
    return ALGORITHMS[manifest["digest_algorithm"]]


def _verify_files(checkpoint: Checkpoint, names: list[str], pool: ThreadPoolExecutor | None = None) -> None:
    """Re-read the named files of `checkpoint` and compare digests; DamagedCheckpoint if one differs."""
    try:
        digests = _digest_files(checkpoint.path, names, _algorithm_of(checkpoint.manifest), pool)
    except OSError as exc:
        raise DamagedCheckpoint(f"{checkpoint.path} cannot be read: {exc}") from exc
    for name in names:
        if digests[name]["digest"] != checkpoint.manifest["files"][name]["digest"]:
            raise DamagedCheckpoint(f"{name} does not match its checksum")


# ----- writing files ----------------------------------------------------------------------------


def _start_torch_file(state: Any, path: Path, algorithm: ChecksumAlgorithm, pool: Executor,
                      spool: SpoolBuffers | None = None) -> ChecksummedFile | SpooledChecksummedFile:
    """torch.save `state` into `path`, checksummed on the way (or into `spool`'s buffers, checksummed and written
    by `finish()`). The caller's memory is no longer used when this returns; `finish()` the file to make it
    durable, then close it."""
    import torch

    sink = ChecksummedFile(path, algorithm, pool) if spool is None else SpooledChecksummedFile(path, algorithm,
                                                                                                pool, spool)
    try:
        with _torch_crc32_off():
            try:
                torch.save(state, sink)
            except Exception:
                if sink.error is not None:  # torch reports a failed write as its own vague error
                    raise sink.error from None
                raise
        return sink
    except BaseException:
        sink.close()
        raise


def _in_host_memory(state: Any) -> bool:
    """Whether every tensor in `state` (dicts, lists and tuples searched) lives in host memory."""
    import torch

    pending = [state]
    while pending:
        node = pending.pop()
        if isinstance(node, torch.Tensor):
            if node.device.type != "cpu":
                return False
        elif isinstance(node, dict):
            pending.extend(node.values())
        elif isinstance(node, (list, tuple)):
            pending.extend(node)
    return True


def _hash_pool(*, background: bool = False) -> ThreadPoolExecutor:
    """Threads that hash large spans: as many as the cores; background saves get half, niced."""
    if background:
        return shared_executor("background-hash", max(1, hash_threads() // 2), low_priority=True)
    return shared_executor("hash", hash_threads())


_crc32 = {"lock": threading.Lock(), "users": 0, "before": True}


@contextmanager
def _torch_crc32_off() -> Iterator[None]:
    """torch.save's CRC32 per zip record runs serially before each write; our checksum covers every
    byte already. It is a process-wide switch: the last of concurrent saves turns it back."""
    import torch.serialization

    with _crc32["lock"]:
        if _crc32["users"] == 0:
            _crc32["before"] = torch.serialization.get_crc32_options()
            torch.serialization.set_crc32_options(False)
        _crc32["users"] += 1
    try:
        yield
    finally:
        with _crc32["lock"]:
            _crc32["users"] -= 1
            if _crc32["users"] == 0:
                torch.serialization.set_crc32_options(_crc32["before"])


def _digest_files(directory: Path, names: list[str], algorithm: ChecksumAlgorithm,
                  pool: ThreadPoolExecutor | None = None) -> dict[str, dict[str, Any]]:
    """Size and digest of each named file, its pieces read on several threads (`pool`, default the
    foreground hashing threads)."""
    result: dict[str, dict[str, Any]] = {}
    for name in names:
        size, digest = digest_file(directory / name, algorithm, pool or _hash_pool())
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


__all__ = ["Checkpoint", "CheckpointManager", "DamagedCheckpoint", "Verify", "verify_checkpoint"]

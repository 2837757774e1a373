"""Checkpoints that are either complete and verifiable or invisible: the manager, the API of the library.

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

The manager holds what is torch's (serializing and loading state, copies to host memory) and delegates
the rest: the names under `root` to `checkpoint_layout`, the manifest and its checks to
`checkpoint_manifest`, the rank coordination and the commit to `checkpoint_commit`, the deletion of old
checkpoints to `retention`.
"""


from __future__ import annotations

import copy
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from clusterkit import runtime
from clusterkit.errors import ClusterkitError, NotFound
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.resilience.checkpoint_commit import CommitProtocol, Topology, initialized_dist, topology_for
from clusterkit.resilience.checkpoint_files import (
    ChecksummedFile,
    SpooledChecksummedFile,
    SpoolBuffers,
    VerifyingFile,
    hash_pool,
    lower_priority,
)
from clusterkit.resilience.checkpoint_interval import CheckpointSchedule, parse_every
from clusterkit.resilience.checkpoint_layout import shard_name, step_dirs, step_number
from clusterkit.resilience.checkpoint_manifest import (
    Checkpoint,
    DamagedCheckpoint,
    FileEntries,
    Verify,
    algorithm_of,
    verify_checkpoint,
    verify_files,
)
from clusterkit.resilience.checksums import Checksum, ChecksumAlgorithm, algorithm_for
from clusterkit.resilience.heartbeat import resumed as record_resume
from clusterkit.resilience.heartbeat import stalled as record_stall
from clusterkit.resilience.retention import Retention

log = logging.getLogger(__name__)


@lean_dataclass(frozen=True)
class _TorchWrite:
    """A shard in the page cache or spooled in host buffers, waiting to be made durable and committed (or its
    error)."""

    topology: Topology
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
        checkpoint_every: int | str | None = None,
        failures_per_gpu_hour: float | None = None,
        gpus: int | None = None,
    ) -> None:
        if keep < 1:
            raise ClusterkitError(f"keep must be at least 1, got {keep}", fix="keep=1 or more")
        self._root = Path(root)
        self.checksum = algorithm_for(checksum)
        self._rank = rank
        self._world_size = world_size
        self._process_group = process_group
        self._retention = Retention(self._root, keep)
        self._protocol = CommitProtocol(self._root, commit_timeout_s, self._retention)
        self._background: ThreadPoolExecutor | None = None
        self._in_flight: Future[Checkpoint | None] | None = None
        self._async_group: Any = None
        self._host_copies = _HostCopies()
        self._spool = SpoolBuffers()
        self._last_commit: Checkpoint | None = None
        self._schedule: CheckpointSchedule | None = None
        self._agree_group: Any = None
        if checkpoint_every is None and os.environ.get(runtime.CHECKPOINT_EVERY_ENV):
            # The job spec's checkpoint_every, where the training passes none.
            checkpoint_every = parse_every(os.environ[runtime.CHECKPOINT_EVERY_ENV],
                                           f"${runtime.CHECKPOINT_EVERY_ENV}")
        if checkpoint_every is not None:
            self._schedule = CheckpointSchedule(
                checkpoint_every, failures_per_gpu_hour=failures_per_gpu_hour,
                gpus=gpus or self._topology(process_group).world_size, agree=self._agree_on_costs)

    @property
    def root(self) -> Path:
        """The directory the checkpoints live in."""
        return self._root

    @property
    def keep(self) -> int:
        """How many checkpoints that verify retention keeps (the newest)."""
        return self._retention.keep

    @keep.setter
    def keep(self, keep: int) -> None:
        self._retention.keep = keep

    # ----- saving -------------------------------------------------------------------------------

    def due(self, step: int) -> bool:
        """Whether to save at `step`: call it once per step, on every rank of the process group, even ranks that
        save nothing (`checkpoint_every` says how often; with "auto" the interval is chosen from this run's
        measured save costs and step time, agreed by the ranks at the step after each save, and logged)."""
        if self._schedule is None:
            raise ClusterkitError("due() needs a schedule", fix="CheckpointManager(..., checkpoint_every=N or 'auto')")
        in_flight = self._in_flight
        return self._schedule.due(step_number(step), writing=in_flight is not None and not in_flight.done())

    @property
    def schedule(self) -> CheckpointSchedule | None:
        """When saves are due (`checkpoint_every`): its `interval_steps` and the `reason` for them."""
        return self._schedule

    def _agree_on_costs(self, values: Sequence[float]) -> Sequence[float]:
        """The largest of each measurement over the ranks of the process group, so that every rank's `due` says
        the same (each calls this at the same step, the one after a save)."""
        dist = initialized_dist()
        if dist is None or dist.get_world_size() == 1:
            if self._topology(self._process_group).world_size > 1:
                raise ClusterkitError("checkpoint_every='auto' with ranks that coordinate through files: they "
                                      "cannot agree on the step of each save",
                                      fix="initialise torch.distributed first, or give a number of steps")
            return values
        import torch

        if self._agree_group is None:
            self._agree_group = dist.new_group(backend="gloo")  # its own group: NCCL would want device tensors
        tensor = torch.tensor(list(values), dtype=torch.float64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self._agree_group)
        return tensor.tolist()

    def save(self, step: int, state: Any) -> Checkpoint | None:
        """Write `state` (anything `torch.save` takes) as this rank's shard of checkpoint `step`.

        Returns the committed checkpoint on the rank that committed it, and on every rank when
        collectives coordinate the save; None on ranks that only contributed a shard.
        """
        step = step_number(step)
        called = time.monotonic()
        self.wait()
        committed = self._save_torch(step, state, self._process_group, background=False)
        record_stall(time.monotonic() - called)
        if self._schedule is not None:
            self._schedule.saved(time.monotonic() - called)
            self._schedule.written(0.0)
        return committed

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
        step = step_number(step)
        called = time.monotonic()
        self.wait()
        group = self._process_group
        if group is None and self._world_size is None and initialized_dist() is not None:
            # Collectives from the writer thread must not interleave with the training loop's
            # collectives on the same group; every rank reaches this line at the same step.
            if self._async_group is None:
                self._async_group = initialized_dist().new_group(backend="gloo")
            group = self._async_group
        if self._background is None:
            self._background = ThreadPoolExecutor(1, thread_name_prefix="clusterkit-checkpoint",
                                                  initializer=lower_priority)
        if _in_host_memory(state):
            started = self._start_torch_write(step, state, group, hash_pool(background=True), spool=self._spool)
            if started.error is not None:
                self._complete_torch_write(step, started)  # tells the peers, then raises the error here
            else:
                self._in_flight = self._background.submit(self._complete_torch_write, step, started)
        else:
            host_state = self._host_copies.copy(state, pin_memory=pin_memory)
            self._in_flight = self._background.submit(self._save_torch, step, host_state, group, background=True)
        record_stall(time.monotonic() - called)
        if self._schedule is not None and self._in_flight is not None:
            schedule, returned = self._schedule, time.monotonic()
            schedule.saved(returned - called)
            self._in_flight.add_done_callback(lambda _: schedule.written(time.monotonic() - returned))

    def wait(self) -> Checkpoint | None:
        """Block until the in-flight background save is done; re-raise its error."""
        in_flight, self._in_flight = self._in_flight, None
        return in_flight.result() if in_flight is not None else None

    def close(self) -> None:
        """Finish the in-flight save (re-raising its error) and old checkpoints' deletion."""
        try:
            self.wait()
        finally:
            self._retention.wait()
            if self._background is not None:
                self._background.shutdown()
                self._background = None
            self._spool.release()
            self._host_copies.release()

    def save_dcp(self, step: int, state_dict: dict[str, Any]) -> Checkpoint | None:
        """Save with `torch.distributed.checkpoint` into a pending directory, then commit.

        Files are checksummed while DCP writes them (a storage writer of ours), not re-read."""
        import torch.distributed.checkpoint as dcp

        from clusterkit.resilience.dcp_writer import ChecksummingWriter

        called = time.monotonic()
        with self._pending(step, kind="dcp") as (directory, files):
            with _torch_crc32_off():
                dcp.save(state_dict, storage_writer=ChecksummingWriter(directory, self.checksum, files, hash_pool()))
        record_stall(time.monotonic() - called)
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
        started = time.monotonic()
        for checkpoint in self._candidates("size"):
            state, problem, fatal = None, None, None
            try:
                if not topology.use_collectives and topology.world_size > 1:
                    # No way to hear from the other ranks: check their shards too, so that every
                    # rank reaches the same verdict.
                    verify_files(checkpoint, [n for n in checkpoint.manifest["files"] if n != shard_name(rank)])
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
                initialized_dist().all_gather_object(verdicts, verdict, group=topology.group)
                stop = next((f"rank {r}: {f}" for r, (_, _, f) in enumerate(verdicts) if f), None)
                if stop:
                    raise ClusterkitError(f"cannot resume from {checkpoint.path}: {stop}")
                problem = next((f"rank {r}: {p or f'saw step {s}'}" for r, (s, p, _) in enumerate(verdicts)
                                if p or s != checkpoint.step), None)
            if problem is None:
                record_resume(checkpoint.step, time.monotonic() - started)  # for status and the goodput ledger
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
            verify_files(checkpoint, list(checkpoint.manifest["files"]))
        dcp.load(state_dict, checkpoint_id=checkpoint.path)
        return checkpoint

    # ----- writing torch shards -----------------------------------------------------------------

    def _save_torch(self, step: int, state: Any, group: Any, *, background: bool) -> Checkpoint | None:
        started = self._start_torch_write(step, state, group, hash_pool(background=background))
        return self._complete_torch_write(step, started)

    def _start_torch_write(self, step: int, state: Any, group: Any, pool: Executor,
                           spool: SpoolBuffers | None = None) -> _TorchWrite:
        """This rank's shard written into the page cache, or into `spool` (not yet durable), or the error."""
        topology = self._topology(group)
        directory = self._protocol.open_pending(step, topology)
        path = directory / shard_name(topology.rank)
        try:
            sink = _start_torch_file(state, path, self.checksum, pool, spool)
            return _TorchWrite(topology, directory, path, sink, None)
        except BaseException as exc:  # peers must still hear about it, or they wait forever
            path.unlink(missing_ok=True)
            return _TorchWrite(topology, directory, path, None, exc)

    def _complete_torch_write(self, step: int, started: _TorchWrite) -> Checkpoint | None:
        """fsync the shard, then the commit protocol (which raises the write's error, if any)."""
        files: FileEntries = {}
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
        return self._protocol.finish(step, "torch", started.topology, started.directory, files, error,
                                     self.checksum)

    @contextmanager
    def _pending(self, step: int, kind: str) -> Iterator[tuple[Path, FileEntries]]:
        """A pending directory, and a dict for the block to record files it digested itself."""
        step = step_number(step)
        self.wait()
        topology = self._topology(self._process_group)
        directory = self._protocol.open_pending(step, topology)
        files: FileEntries = {}
        error: BaseException | None = None
        try:
            yield directory, files
        except BaseException as exc:
            error = exc
        self._last_commit = self._protocol.finish_pending(step, kind, topology, directory, files, error,
                                                          self.checksum)

    # ----- loading ------------------------------------------------------------------------------

    def _candidates(self, verify: Verify) -> Iterator[Checkpoint]:
        """Committed checkpoints that pass `verify`, newest first."""
        for _, path in step_dirs(self.root):
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
        name = shard_name(rank)
        entry = checkpoint.manifest["files"].get(name)
        if entry is None:
            raise ClusterkitError(
                f"{checkpoint.path} has no shard for rank {rank}; it was saved by "
                f"{checkpoint.manifest.get('world_size')} rank(s)",
                fix="resume with the world size the checkpoint was saved with, or pass rank=",
            )
        failure: Exception | None = None
        try:
            with VerifyingFile(checkpoint.path / name, algorithm_of(checkpoint.manifest), hash_pool()) as source:
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

    def _topology(self, group: Any) -> Topology:
        return topology_for(self._rank, self._world_size, group)


class _HostCopies:
    """Copies of state in host memory for background saves, in buffers kept from one copy to the next."""

    def __init__(self) -> None:
        self._buffers: list[Any] = []

    def copy(self, state: Any, *, pin_memory: bool) -> Any:
        """A deep copy of `state` whose tensors live in host memory, reusing the previous copy's buffers."""
        import torch

        previous, self._buffers = self._buffers, []
        by_identity: dict[int, Any] = {}  # tied weights stay one tensor
        needs_sync = False

        def to_host(tensor: torch.Tensor) -> torch.Tensor:
            nonlocal needs_sync
            index = len(self._buffers)
            reusable = previous[index] if index < len(previous) else None
            if reusable is None or reusable.shape != tensor.shape or reusable.dtype != tensor.dtype:
                pin = pin_memory and tensor.device.type != "cpu"
                reusable = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=pin)
            non_blocking = reusable.is_pinned() and tensor.device.type != "cpu"
            reusable.copy_(tensor.detach(), non_blocking=non_blocking)
            needs_sync = needs_sync or non_blocking
            self._buffers.append(reusable)
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

    def release(self) -> None:
        """Let the buffers go; the next copy allocates its own."""
        self._buffers = []


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


__all__ = ["Checkpoint", "CheckpointManager", "DamagedCheckpoint", "Verify", "verify_checkpoint"]

"""Progress beacons from the training loop, read by a supervisor to spot hung ranks.

Each rank owns one small file `rank-00003.hb` holding "STEP UNIX_TIME NODE", padded to a fixed width; a
rank that finished its training writes "STEP UNIX_TIME NODE done WORLD_SIZE" last (`heartbeat(step, done=True)`),
so a supervisor can tell a run that completed from one that stopped when asked to.
It is created once and then overwritten in place with one write: no new blocks, so a beat still lands
when training has filled the disk; and no fsync, because a heartbeat only has to be visible to other
processes, not survive a power cut. A beat that cannot be written is logged (once per kind of error)
and tried again at the next call: a heartbeat never raises into the training loop.

Where a try's time went is kept beside the beats, for `status` and the goodput ledger: a rank's first beat of the
process also goes to `rank-00003.first` (once), and a resume from a checkpoint writes `rank-00003.resumed` ("STEP
LOAD_SECONDS UNIX_TIME"); `read_try()` sums a try's directory up.

The other direction: on the warning before a time limit or a preemption the job (its batch script or the
supervisor) writes a stop request, and `stop_requested()` tells the training loop, which saves and exits 0.
A request reaches the ranks before any signal reaches torchrun, whose own window between its SIGTERM and its
SIGKILL (30 s; only recent torch reads TORCH_ELASTIC_SHUTDOWN_TIMEOUT) would otherwise bound the save.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path
from typing import NamedTuple

from clusterkit.runtime import HEARTBEAT_DIR_ENV, LISTENING_SUFFIX, STOP_FILE_ENV, TAKEN_SUFFIX

DEFAULT_MIN_INTERVAL_S = 5.0
STOP_POLL_S = 1.0  # stop_requested() looks at the request at most this often
BEAT_BYTES = 128  # one beat, padded: node names are at most 64 characters in Slurm
FIRST_SUFFIX = ".first"  # a rank's first beat of its process
RESUMED_SUFFIX = ".resumed"  # the checkpoint a rank resumed from
STALL_SUFFIX = ".stall"  # how many saves blocked a rank's loop, and for how long in all

log = logging.getLogger(__name__)
_last_write: dict[Path, float] = {}
_descriptors: dict[Path, int] = {}
_reported: set[str] = set()
_stop_looked: dict[str, float] = {}  # request path -> when it was last looked at (the monotonic clock)
_stop_seen: set[str] = set()
_stall = [0, 0.0]  # this process's saves and the seconds they blocked its loop


class Beat(NamedTuple):
    step: int
    time: float
    node: str  # where the rank runs: the evidence when it stops beating
    done: bool = False  # the rank finished its training
    world: int = 0  # with `done`: how many ranks the run has


def heartbeat(step: int, *, min_interval_s: float = DEFAULT_MIN_INTERVAL_S, done: bool = False) -> bool:
    """Record that this rank reached `step`; returns whether a file was written.

    A no-op when `$CLUSTERKIT_HEARTBEAT_DIR` is unset. Calls closer than `min_interval_s` to the
    previous write are dropped, so calling it every step costs a clock read. `done=True`, once after the
    last step, says the rank finished its training (always written): when every rank says so and the step
    exits 0, the supervisor records the run as completed even if a time-limit warning came meanwhile.
    """
    directory = os.environ.get(HEARTBEAT_DIR_ENV)
    if not directory:
        return False
    path = Path(directory) / f"rank-{current_rank():05d}.hb"
    now = time.time()
    last = _last_write.get(path)
    if last is not None and now - last < min_interval_s and not done:
        return False
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    world = int(os.environ.get("WORLD_SIZE") or os.environ.get("SLURM_NTASKS") or 1)
    line = f"{step} {now:.3f} {node}" + (f" done {world}" if done else "")
    line = line[: BEAT_BYTES - 1].ljust(BEAT_BYTES - 1) + "\n"
    try:
        os.pwrite(_descriptor(path), line.encode(), 0)
    except OSError as error:
        _report(error, path, "training goes on and the next beat tries again")
        return False
    if last is None:  # the process's first beat: when the try began to make progress
        _write_once(path.with_suffix(FIRST_SUFFIX), line)
    _last_write[path] = now
    return True


def resumed(step: int, load_seconds: float) -> None:
    """Record that this rank resumed from the checkpoint of `step`, loaded in `load_seconds` (CheckpointManager's
    resume() calls it). A no-op outside a supervised step; never raises."""
    directory = os.environ.get(HEARTBEAT_DIR_ENV)
    if directory:
        path = Path(directory) / f"rank-{current_rank():05d}{RESUMED_SUFFIX}"
        _write_once(path, f"{step} {load_seconds:.3f} {time.time():.3f}\n")


def stalled(seconds: float) -> None:
    """Add `seconds` that the training loop spent blocked by a checkpoint save to this rank's total for the try
    (CheckpointManager's saves call it): the goodput ledger's checkpoint stall. A no-op outside a supervised step;
    never raises."""
    directory = os.environ.get(HEARTBEAT_DIR_ENV)
    if not directory:
        return
    path = Path(directory) / f"rank-{current_rank():05d}{STALL_SUFFIX}"
    _stall[0] += 1
    _stall[1] += max(seconds, 0.0)
    _write_once(path, f"{_stall[0]} {_stall[1]:.3f}\n")


def _write_once(path: Path, line: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(line)
    except OSError as error:
        _report(error, path, "training goes on; status shows less of where this try's time went")


def stop_requested(*, min_interval_s: float = STOP_POLL_S) -> bool:
    """Whether the job asks this rank to save and stop: the warning before its time limit, or a preemption.

    Call it every step; save, then exit 0 (not `heartbeat(step, done=True)`: the run is not complete). False
    when `$CLUSTERKIT_STOP_FILE` is unset (not a clusterkit job, or one without a checkpoint_dir). The first
    call tells the job that its ranks read requests (it then gives them the warning's lead, less a margin for
    the requeue, before it signals the step); later calls look at the request at most every `min_interval_s`
    (one stat) and, once it is there, return True without looking again. Never raises.
    """
    request = os.environ.get(STOP_FILE_ENV)
    if not request:
        return False
    if request in _stop_seen:
        return True
    now = time.monotonic()
    last = _stop_looked.get(request)
    if last is None:
        _mark(request + LISTENING_SUFFIX, "the job signals the step instead of writing a request")
    elif now - last < min_interval_s:
        return False
    _stop_looked[request] = now
    if not os.path.exists(request):
        return False
    _stop_seen.add(request)
    _mark(request + TAKEN_SUFFIX, "an unsupervised job may take this stop for the run's end and not requeue")
    return True


def _mark(path: str, consequence: str) -> None:
    """Make the empty file `path` (and its directory): a marker the job's script or supervisor looks for."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
    except OSError as error:
        _report(error, Path(path), consequence)


def _descriptor(path: Path) -> int:
    """The rank's heartbeat file, opened once (and its directory made) for the life of the process."""
    if path not in _descriptors:
        path.parent.mkdir(parents=True, exist_ok=True)
        _descriptors[path] = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    return _descriptors[path]


def _report(error: OSError, path: Path, consequence: str) -> None:
    key = f"{path}:{error.errno}"
    if key not in _reported:
        _reported.add(key)
        log.warning("heartbeat to %s failed (%s); %s", path, error.strerror or error, consequence)


def read_heartbeats(directory: str | os.PathLike[str]) -> dict[int, Beat]:
    """Map each rank with a heartbeat file under `directory` to its (step, unix time, node)."""
    return _read_beats(Path(directory), ".hb")


def _read_beats(directory: Path, suffix: str) -> dict[int, Beat]:
    beats: dict[int, Beat] = {}
    for path in directory.glob(f"rank-*{suffix}"):
        try:
            rank = int(path.name[len("rank-"):-len(suffix)])
            fields = path.read_text().split()  # a torn or foreign file fails here
            if len(fields) == 3:
                beats[rank] = Beat(int(fields[0]), float(fields[1]), fields[2])
            elif len(fields) == 5 and fields[3] == "done":
                beats[rank] = Beat(int(fields[0]), float(fields[1]), fields[2], True, int(fields[4]))
        except (OSError, ValueError):
            continue  # vanished or not ours; a supervisor treats it as no heartbeat
    return beats


class TryProgress(NamedTuple):
    """What a try's heartbeat directory tells of it; None where its ranks did not say."""

    first_step: int | None = None  # the first step any rank reached, and when
    first_time: float | None = None
    resumed_from: int | None = None  # the checkpoint's step the ranks resumed from (rank 0's, else any rank's)
    load_seconds: float | None = None
    last_step: int | None = None  # the furthest step any rank reported, and when its beat was written
    last_time: float | None = None
    stall_seconds: float | None = None  # the loop blocked by checkpoint saves (the most any rank reported)
    saves: int | None = None


def read_try(directory: str | os.PathLike[str]) -> TryProgress:
    """A try's progress from its heartbeat directory: first beats, the resume and the last beats of its ranks."""
    firsts = list(_read_beats(Path(directory), FIRST_SUFFIX).values())
    resumes = _read_resumes(Path(directory))
    lasts = list(read_heartbeats(directory).values())
    first = min(firsts, key=lambda beat: beat.time, default=None)
    last = max(lasts, key=lambda beat: (beat.step, beat.time), default=None)
    resume = resumes.get(0) or next(iter(resumes.values()), None)
    stalls = _read_pairs(Path(directory), STALL_SUFFIX)
    stall = max(stalls.values(), key=lambda pair: pair[1], default=None)
    return TryProgress(first.step if first else None, first.time if first else None,
                       resume[0] if resume else None, resume[1] if resume else None,
                       last.step if last else None, last.time if last else None,
                       stall[1] if stall else None, int(stall[0]) if stall else None)


def _read_resumes(directory: Path) -> dict[int, tuple[int, float]]:
    return {rank: (int(step), seconds) for rank, (step, seconds) in _read_pairs(directory, RESUMED_SUFFIX).items()
            if step == int(step)}


def _read_pairs(directory: Path, suffix: str) -> dict[int, tuple[float, float]]:
    """Rank -> the first two numbers of each `rank-N{suffix}` file (a torn or foreign one is skipped)."""
    found: dict[int, tuple[float, float]] = {}
    for path in directory.glob(f"rank-*{suffix}"):
        try:
            first, second = path.read_text().split()[:2]
            found[int(path.name[len("rank-"):-len(suffix)])] = (float(first), float(second))
        except (OSError, ValueError):
            continue
    return found


def every_rank_done(beats: dict[int, Beat]) -> bool:
    """Whether every rank of the run said it finished its training (`heartbeat(step, done=True)`)."""
    worlds = {beat.world for beat in beats.values() if beat.done}
    if len(worlds) != 1:
        return False
    world = worlds.pop()
    return world > 0 and all(rank in beats and beats[rank].done for rank in range(world))


def current_rank() -> int:
    """The global rank as torchrun (`RANK`) or srun (`SLURM_PROCID`) exports it, else 0."""
    return int(os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or 0)

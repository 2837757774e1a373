"""Progress beacons from the training loop, read by a supervisor to spot hung ranks.

Each rank owns one small file `rank-00003.hb` holding "STEP UNIX_TIME NODE". Writes go to a temporary
file that replaces the old one, so a reader never sees a torn line; there is no fsync, because a
heartbeat only has to be visible to other processes, not survive a power cut.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import NamedTuple

from clusterkit.runtime import HEARTBEAT_DIR_ENV

DEFAULT_MIN_INTERVAL_S = 5.0

_last_write: dict[Path, float] = {}


class Beat(NamedTuple):
    step: int
    time: float
    node: str  # where the rank runs: the evidence when it stops beating


def heartbeat(step: int, *, min_interval_s: float = DEFAULT_MIN_INTERVAL_S) -> bool:
    """Record that this rank reached `step`; returns whether a file was written.

    A no-op when `$CLUSTERKIT_HEARTBEAT_DIR` is unset. Calls closer than `min_interval_s` to the
    previous write are dropped, so calling it every step costs a clock read.
    """
    directory = os.environ.get(HEARTBEAT_DIR_ENV)
    if not directory:
        return False
    path = Path(directory) / f"rank-{current_rank():05d}.hb"
    now = time.time()
    last = _last_write.get(path)
    if last is not None and now - last < min_interval_s:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    temporary.write_text(f"{step} {now:.3f} {node}\n")
    os.replace(temporary, path)
    _last_write[path] = now
    return True


def read_heartbeats(directory: str | os.PathLike[str]) -> dict[int, Beat]:
    """Map each rank with a heartbeat file under `directory` to its (step, unix time, node)."""
    beats: dict[int, Beat] = {}
    for path in Path(directory).glob("rank-*.hb"):
        try:
            rank = int(path.stem.removeprefix("rank-"))
            step_text, time_text, node = path.read_text().split()
            beats[rank] = Beat(int(step_text), float(time_text), node)
        except (OSError, ValueError):
            continue  # vanished or not ours; a supervisor treats it as no heartbeat
    return beats


def current_rank() -> int:
    """The global rank as torchrun (`RANK`) or srun (`SLURM_PROCID`) exports it, else 0."""
    return int(os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or 0)

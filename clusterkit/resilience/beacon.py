"""Liveness beacons: a node's silence, told apart from ranks that block in a collective or save a checkpoint.

`python -m clusterkit.resilience.beacon DIR`, one task per node of the allocation (the supervisor starts it as an
overlapping step beside the training step), rewrites `DIR/<node>.beat` every `BEAT_S` seconds from a process of its
own: it keeps beating while the node's ranks wait in an all-reduce or write a checkpoint (and ignores the warnings
meant for them), and stops when the node does (a kernel panic, a power loss, a frozen host: silence, not a reset).
Each beat is a fixed-width line written in place, opened and closed each time so that it reaches other clients of an
NFS share.

A watcher (the supervisor for the step's other nodes; the cluster agent for every node, the batch host above all)
never compares clocks across nodes: it notes, on its own monotonic clock, when each beacon's content last changed
(`BeaconWatch`). A node silent for `SILENCE_S` is probed (`probe`: a trivial srun on it); only a probe that gets no
answer in `PROBE_S` is evidence. A probe that answers counts as a sign of life, so a slow file system or a loaded
machine costs one probe, never a node.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

from clusterkit.errors import ClusterkitError
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.slurm import Slurm

BEAT_S = 1.0
SILENCE_S = 4.0  # a beacon unchanged this long (on the watcher's clock) gets its node probed
PROBE_S = 3.0  # a probe unanswered this long is evidence that the node is gone
START_S = 20.0  # a beacon not seen this long after the watch began counts as silent (srun, imports)
BEAT_BYTES = 96
SUFFIX = ".beat"
# srun's words for a launch the node itself refused or never answered (else a failed probe proves nothing about
# the node: the job ending, the controller busy).
_UNREACHABLE = re.compile(r"failed on node|Connection refused|Socket timed out|Communication connection failure|"
                          r"Zero Bytes were transmitted")


def beacon_file(directory: str | os.PathLike[str], node: str) -> Path:
    return Path(directory) / f"{node}{SUFFIX}"


def beat(directory: str | os.PathLike[str], node: str, count: int) -> None:
    """Write one beat of `node`: the time, this process and a count, padded, in place."""
    line = f"{time.time():.3f} {os.getpid()} {count}"[: BEAT_BYTES - 1].ljust(BEAT_BYTES - 1) + "\n"
    descriptor = os.open(beacon_file(directory, node), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(descriptor, line.encode(), 0)
    finally:
        os.close(descriptor)


def read_beacons(directory: str | os.PathLike[str]) -> dict[str, str]:
    """Each node's latest beat as written (a beacon that cannot be read is left out: silent)."""
    beats: dict[str, str] = {}
    try:
        paths = list(Path(directory).glob(f"*{SUFFIX}"))
    except OSError:
        return beats
    for path in paths:
        try:
            beats[path.name.removesuffix(SUFFIX)] = path.read_text()
        except OSError:
            continue
    return beats


@lean_dataclass(frozen=True)
class Silence:
    node: str
    seconds: float  # since its beacon last changed (or since the watch began, for one never seen)


class BeaconWatch:
    """When each node's beacon last changed, on the watcher's monotonic clock (nodes' clocks are never compared)."""

    def __init__(self, directory: str | os.PathLike[str], started: float, silence_s: float = SILENCE_S,
                 start_s: float = START_S) -> None:
        self.directory = directory
        self.started = started
        self.silence_s = silence_s
        self.start_s = start_s
        self._seen: dict[str, tuple[str, float]] = {}  # node -> (beat, when it changed)

    def silent(self, nodes: list[str] | tuple[str, ...], now: float) -> list[Silence]:
        """The nodes among `nodes` whose beacon has not changed for `silence_s` (never seen: `start_s`) at `now`."""
        beats = read_beacons(self.directory)
        quiet = []
        for node in nodes:
            line = beats.get(node)
            seen = self._seen.get(node)
            if line is not None and (seen is None or seen[0] != line):
                self._seen[node] = (line, now)
                continue
            if seen is None:
                if now - self.started > self.start_s:
                    quiet.append(Silence(node, now - self.started))
            elif now - seen[1] > self.silence_s:
                quiet.append(Silence(node, now - seen[1]))
        return quiet

    def alive(self, node: str, now: float) -> None:
        """`node` answered a probe: its silence counts from `now` again."""
        self._seen[node] = (self._seen.get(node, ("", now))[0], now)


def probe(slurm: Slurm, node: str, job_id: str = "", timeout: float = PROBE_S) -> str:
    """'' when a trivial step on `node` (inside job `job_id`, or the caller's own) answers, else the evidence."""
    job = [f"--jobid={job_id}"] if job_id else []
    try:
        result = slurm.run("srun", *job, "--overlap", "-N1", "-n1", "-w", node, "--quiet", "true", check=False,
                           timeout=timeout)
    except ClusterkitError:
        return f"srun on {node} got no answer within {timeout:.0f} s"
    if result.returncode == 0 or not _UNREACHABLE.search(result.stderr):
        return ""
    return f"srun on {node} failed: {(result.stderr.strip().splitlines() or [''])[-1][:160]}"


def evidence(silence: Silence, answer: str) -> str:
    return f"{silence.node}'s liveness beacon silent for {silence.seconds:.0f} s and {answer}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m " + __spec__.name if __spec__ else "beacon",
                                     description="beat for this node until stopped")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--interval", type=float, default=BEAT_S)
    args = parser.parse_args(argv)
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    # A warning (--signal=USR1@N) reaches every step: it is the training's, not the beacon's. SIGTERM (the job
    # ending, or a stop of the training step sent to every step) ends it: the supervisor starts it again.
    for number in (signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(number, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    args.directory.mkdir(parents=True, exist_ok=True)
    count = 0
    while True:
        try:
            beat(args.directory, node, count)
        except OSError as error:  # a full or vanished share: beat again next time; silence is the watcher's call
            print(f"clusterkit beacon on {node}: {error.strerror or error}", file=sys.stderr, flush=True)
        count += 1
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())

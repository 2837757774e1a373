"""End the step daemons a job left on this node when its batch host died silently.

Such a daemon's tasks are gone, but it keeps trying to tell the dead host (MessageTimeout, six times over: 360 s at
ParallelCluster's timings), and until it gives up the requeued job, the same job id, must not start a step here. The
cluster agent runs this on the node, as root, inside a reservation that keeps every other job off it, then lets the
node go at once instead of waiting those minutes out.

    python -m clusterkit.resilience.stale_steps JOB_ID --before UNIX_TIME

Only this node's daemons (those in the mount namespace of the step daemon that runs this: on a local cluster every
node shares one process table) that started before `--before` (the requeued job's own, should it run here later,
are younger), and what they started, get SIGKILL.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from pathlib import Path

from clusterkit.lean_dataclass import lean_dataclass

PROC = Path("/proc")


@lean_dataclass(frozen=True)
class ProcessInfo:
    pid: int
    parent: int
    started: float  # Unix time
    title: str  # its command line, NULs as spaces (a step daemon's is its title, `slurmstepd: [JOB.STEP]`)
    mount_namespace: str


def step_title(job_id: str) -> re.Pattern[str]:
    """A step daemon of `job_id` by its title: `slurmstepd: [7.0]`, `[7.batch]`, `[7.extern]`."""
    return re.compile(rf"^slurmstepd: \[{re.escape(job_id)}\.[A-Za-z0-9_]+\]")


def read_process(pid: int, boot_time: float, ticks_per_second: int, proc: Path = PROC) -> ProcessInfo | None:
    """What /proc says of `pid`, or None if it ended meanwhile."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
        title = (proc / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        namespace = os.readlink(proc / str(pid) / "ns" / "mnt")
    except OSError:
        return None
    # The fields after the command name (in parentheses, which may itself hold spaces or parentheses).
    fields = stat.rsplit(")", 1)[1].split()
    parent, start_ticks = int(fields[1]), int(fields[19])
    return ProcessInfo(pid, parent, boot_time + start_ticks / ticks_per_second, title, namespace)


def processes(proc: Path = PROC) -> list[ProcessInfo]:
    boot_time = next(float(line.split()[1]) for line in (proc / "stat").read_text().splitlines()
                     if line.startswith("btime "))
    ticks = os.sysconf("SC_CLK_TCK")
    found = (read_process(int(entry.name), boot_time, ticks, proc) for entry in proc.iterdir() if entry.name.isdigit())
    return [info for info in found if info is not None]


def stale(everything: list[ProcessInfo], job_id: str, before: float, namespace: str) -> list[int]:
    """The step daemons of `job_id` in `namespace` that started before `before`, each with what it started."""
    title = step_title(job_id)
    daemons = {info.pid for info in everything
               if info.mount_namespace == namespace and info.started < before and title.match(info.title)}
    children: dict[int, list[int]] = {}
    for info in everything:
        children.setdefault(info.parent, []).append(info.pid)
    found, pending = [], sorted(daemons)
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, []))
    return sorted(set(found))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clusterkit.resilience.stale_steps",
                                     description="SIGKILL this node's step daemons of JOB_ID older than --before")
    parser.add_argument("job_id", help="the job whose stale step daemons to end (digits)")
    parser.add_argument("--before", type=float, required=True, help="only those started before this Unix time")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[0-9]{1,12}", args.job_id):
        print(f"stale_steps: job id {args.job_id!r} is not a Slurm job id (digits)", file=sys.stderr)
        return 2
    # The step daemon that runs this one shares the node's namespace with the stale ones.
    namespace = os.readlink(PROC / str(os.getppid()) / "ns" / "mnt")
    victims = stale(processes(), args.job_id, args.before, namespace)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    print(f"stale_steps: job {args.job_id}: {len(victims)} process(es) ended: {' '.join(map(str, victims))}",
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Job states that follow requeues, for many jobs at the cost of one squeue and one sacct call a poll.

Why not sacct alone: after a node failure sacct shows the attempt that ended NODE_FAIL for a moment
before the requeued record appears, and a watcher that trusts it reports failure while Slurm is
running the job again. The controller's queue (squeue) is the truth while it lists a job (Slurm keeps
finished jobs there for MinJobAge); accounting (sacct -D) is the fallback and the history.
"""

from __future__ import annotations

import threading
import time

from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.slurm import AccountingRecord, Slurm

FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL",
                          "DEADLINE", "NODE_FAIL", "PREEMPTED", "SPECIAL_EXIT", "REVOKED"})


def is_final(state: str) -> bool:
    return state in FINAL_STATES


@lean_dataclass
class _Snapshot:
    taken: float
    queue: dict[str, str]
    accounting: dict[str, list[AccountingRecord]]


class JobTracker:
    """Caches one snapshot of the queue and accounting; every handle of a cluster shares it."""

    def __init__(self, slurm: Slurm, min_interval: float = 0.5) -> None:
        self.slurm = slurm
        self.min_interval = min_interval
        self.scheduler_calls = 0  # squeue + sacct invocations, for benchmarks
        self._watched: set[str] = set()
        self._snapshot: _Snapshot | None = None
        self._lock = threading.Lock()

    def watch(self, job_id: str) -> None:
        with self._lock:
            self._watched.add(job_id)
            self._snapshot = None  # a new job: the next question needs fresh data

    def _refresh(self) -> _Snapshot:
        poll = self.slurm.poll(sorted(self._watched))  # one round trip: squeue, and sacct -D of our jobs
        self.scheduler_calls += poll.commands
        return _Snapshot(time.monotonic(), poll.queue, by_job(poll.accounting))

    def snapshot(self, fresh: bool = False) -> _Snapshot:
        with self._lock:
            stale = self._snapshot is None or time.monotonic() - self._snapshot.taken >= self.min_interval
            if fresh or stale:
                self._snapshot = self._refresh()
            return self._snapshot

    def state(self, job_id: str, fresh: bool = False) -> str:
        snapshot = self.snapshot(fresh)
        return state_of(job_id, snapshot.queue, snapshot.accounting)

    def attempts(self, job_id: str) -> list[AccountingRecord]:
        return self.snapshot().accounting.get(job_id, [])


def by_job(records: list[AccountingRecord]) -> dict[str, list[AccountingRecord]]:
    grouped: dict[str, list[AccountingRecord]] = {}
    for record in records:
        grouped.setdefault(record.job_id, []).append(record)
    return grouped


def state_of(job_id: str, queue: dict[str, str], accounting: dict[str, list[AccountingRecord]]) -> str:
    """The controller's state while it lists the job, else accounting's last attempt, else UNKNOWN."""
    if job_id in queue:
        return queue[job_id]
    attempts = accounting.get(job_id)
    return attempts[-1].base_state if attempts else "UNKNOWN"


_trackers: dict[str, JobTracker] = {}


def tracker_for(slurm: Slurm) -> JobTracker:
    """One tracker per cluster (where its commands run, and its slurm.conf) in a process, so that polls
    are shared."""
    key = f"{slurm.transport.label}|{slurm.slurm_conf}"
    if key not in _trackers:
        _trackers[key] = JobTracker(slurm)
    return _trackers[key]

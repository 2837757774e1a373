"""A job handle for notebooks and the CLI: state, wait, result, logs, cancel; it follows requeues."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterkit.errors import ClusterkitError, NotFound
from clusterkit.jobs.attempts import Attempt, decisions, merge_attempts
from clusterkit.jobs.tracking import JobTracker, is_final
from clusterkit.slurm import AccountingRecord, SlurmCommandError

if TYPE_CHECKING:
    from clusterkit.jobs.records import JobRecord

# Neither the queue nor accounting knows the id for this long: it is not a job (sacct lags ~3 s).
UNKNOWN_GRACE_S = 15.0


class JobFailed(ClusterkitError):
    """The job ended in a state other than COMPLETED."""


@dataclass(frozen=True)
class JobStatus:
    """What `clusterkit status` shows: the job's state and every attempt, each with why it ended."""

    job_id: str
    cluster: str
    state: str
    stdout: str | None
    attempts: tuple[Attempt, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "cluster": self.cluster, "state": self.state, "stdout": self.stdout,
                "attempts": [attempt.to_dict() for attempt in self.attempts]}


class JobHandle:
    """One Slurm job (or array task) on one cluster.

    `submitit_job` is set for Python callables submitted through submitit: `result()` then returns
    the callable's return value. For job specs, `result()` returns the final state.
    """

    def __init__(self, job_id: str, cluster: str, tracker: JobTracker, stdout_path: Path | None = None,
                 stderr_path: Path | None = None, submitit_job: Any = None, record: JobRecord | None = None) -> None:
        self.job_id = job_id
        self.cluster = cluster
        self.tracker = tracker
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path
        self.submitit_job = submitit_job
        self.record = record
        tracker.watch(job_id)

    def __repr__(self) -> str:
        return f"JobHandle(job_id={self.job_id!r}, cluster={self.cluster!r}, state={self.state!r})"

    @property
    def state(self) -> str:
        """Slurm's state of the current attempt: PENDING, RUNNING, REQUEUED, COMPLETED, FAILED..."""
        return self.tracker.state(self.job_id)

    def done(self) -> bool:
        return is_final(self.state)

    def attempts(self) -> list[AccountingRecord]:
        """Every attempt of the job so far (`sacct -D`): a requeue adds one under the same id."""
        return self.tracker.attempts(self.job_id)

    def status(self) -> JobStatus:
        """The state and every attempt, each classified (node failure, hang, time limit, ...): accounting,
        the controller and the supervisor's decisions merged, so none is missing (see jobs.attempts)."""
        state = self.state
        controller = self.tracker.slurm.job_details(self.job_id)
        merged = merge_attempts(self.job_id, self.attempts(), controller, decisions(self.record))
        return JobStatus(self.job_id, self.cluster, state, str(self.stdout_path) if self.stdout_path else None,
                         tuple(merged))

    def follow_log(self, poll: float = 0.5, follow: bool = True) -> Iterator[str]:
        """The job's output as it grows, chunk by chunk, until the job ends (or once, without `follow`)."""
        position = 0
        while True:
            done = not follow or self.done()
            text = self.stdout()
            if len(text) > position:
                yield text[position:]
                position = len(text)
            if done:
                return
            time.sleep(poll)

    def wait(self, timeout: float | None = None, poll: float = 1.0,
             progress: Callable[[str], None] | None = None) -> str:
        """Block until the job reaches a final state; return that state."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last = None
        unknown_since = None
        while True:
            try:
                state = self.state
            except SlurmCommandError as error:
                # A controller or slurmdbd restart must not end the watch: keep asking.
                if progress:
                    progress(f"job {self.job_id}: Slurm did not answer ({error}); asking again")
                time.sleep(max(poll, 2.0))
                continue
            unknown_since = (unknown_since or time.monotonic()) if state == "UNKNOWN" else None
            if unknown_since is not None and time.monotonic() - unknown_since > UNKNOWN_GRACE_S:
                raise NotFound(f"Slurm knows no job {self.job_id} on cluster {self.cluster!r}",
                               fix="check the id with `clusterkit jobs` or squeue")
            if progress and state != last:
                progress(f"job {self.job_id}: {state}")
                last = state
            if is_final(state):
                return state
            if deadline is not None and time.monotonic() > deadline:
                raise ClusterkitError(f"job {self.job_id} still {state} after {timeout:.0f} s")
            time.sleep(poll)

    def result(self, timeout: float | None = None) -> Any:
        state = self.wait(timeout, poll=0.5)
        if self.submitit_job is not None:
            # submitit reads the pickled return value, or raises with the remote traceback.
            with self.tracker.slurm.environment():
                try:
                    return self.submitit_job.result()
                except Exception as error:
                    raise JobFailed(f"job {self.job_id} ended {state}: {error}") from error
        if state != "COMPLETED":
            where = f"; see {self.stdout_path}" if self.stdout_path else ""
            raise JobFailed(f"job {self.job_id} ended {state}{where}")
        return state

    def stdout(self) -> str:
        return _read(self.stdout_path)

    def stderr(self) -> str:
        return _read(self.stderr_path) if self.stderr_path != self.stdout_path else ""

    def cancel(self) -> None:
        self.tracker.slurm.cancel(self.job_id)
        self.tracker.snapshot(fresh=True)


def _read(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""

"""A job handle for notebooks and the CLI: state, wait, result, logs, cancel; it follows requeues."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterkit.errors import ClusterkitError, NotFound
from clusterkit.jobs.attempts import Attempt, decisions, merge_attempts, run_state, tries
from clusterkit.jobs.tracking import JobTracker, by_job, is_final, state_of
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.slurm import AccountingRecord, SlurmCommandError, checked_job_id
from clusterkit.transport import Transport, exists, read_bytes

if TYPE_CHECKING:
    from clusterkit.jobs.ledger import Ledger
    from clusterkit.jobs.records import JobRecord
    from clusterkit.jobs.recoveries import Try
    from clusterkit.jobs.timeline_picture import TimelinePicture
    from clusterkit.providers.base import Replacement

# Neither the queue nor accounting knows the id for this long: it is not a job (sacct lags ~3 s).
UNKNOWN_GRACE_S = 15.0


class JobFailed(ClusterkitError):
    """The job ended in a state other than COMPLETED."""


@lean_dataclass(frozen=True)
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


@lean_dataclass(frozen=True)
class RunRecords:
    """A supervised run's records, read once: what its ledger and its timeline are built from."""

    submitted: float  # unix times
    end: float
    made: list[dict[str, Any]]  # the supervisor's decisions
    tries: list[Try]
    attempt_ends: dict[str, str]  # attempt id -> accounting's end


class JobHandle:
    """One Slurm job (or array task) on one cluster.

    `submitit_job` is set for Python callables submitted through submitit: `result()` then returns
    the callable's return value. For job specs, `result()` returns the final state.
    """

    def __init__(self, job_id: str, cluster: str, tracker: JobTracker, stdout_path: Path | None = None,
                 stderr_path: Path | None = None, submitit_job: Any = None, record: JobRecord | None = None) -> None:
        self.job_id = checked_job_id(job_id)
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
        """Slurm's state of the current attempt: PENDING, RUNNING, REQUEUED, COMPLETED, FAILED...; COMPLETED for a
        job that ended after its supervisor recorded that the run completed (see attempts.run_state)."""
        state = self.tracker.state(self.job_id)
        if state == "COMPLETED" or not is_final(state):
            return state  # the decisions are read once the job ended otherwise: not at every poll of a wait
        return run_state(self.job_id, state, decisions(self.record, self.transport))

    def done(self) -> bool:
        return is_final(self.state)

    def attempts(self) -> list[AccountingRecord]:
        """Every attempt of the job so far (`sacct -D`): a requeue adds one under the same id."""
        return self.tracker.attempts(self.job_id)

    def status(self) -> JobStatus:
        """The state and every attempt, each classified (node failure, hang, time limit, ...): accounting,
        the controller and the supervisor's decisions merged, so none is missing (see jobs.attempts)."""
        from clusterkit.providers import open_cluster

        return self._status(open_cluster(self.cluster).replacements())

    def _status(self, replacements: dict[str, Replacement], made: list[dict[str, Any]] | None = None,
                tried: list[Try] | None = None) -> JobStatus:
        """`status()` with the run's records where the caller has read them already (each is a round trip over SSH)."""
        poll = self.tracker.slurm.poll([self.job_id], details_of=self.job_id)  # one round trip for all three
        accounting = by_job(poll.accounting)
        made = decisions(self.record, self.transport) if made is None else made
        tried = tries(self.record, self.transport) if tried is None else tried
        merged = merge_attempts(self.job_id, accounting.get(self.job_id, []), poll.details, made, replacements, tried)
        state = run_state(self.job_id, state_of(self.job_id, poll.queue, accounting), made)
        return JobStatus(self.job_id, self.cluster, state, str(self.stdout_path) if self.stdout_path else None,
                         tuple(merged))

    def goodput(self) -> Ledger:
        """Where every second of the run went, from its submission to the end of its last attempt (now, while it
        runs): productive steps, lost work, checkpoint stall, detection, recovery, queued, hang, other
        (jobs.ledger). Needs the supervisor's records: a supervised job with a checkpoint_dir."""
        from clusterkit.jobs.ledger import build
        from clusterkit.providers import open_cluster

        run = self._run_records(open_cluster(self.cluster).replacements())
        return build(self.job_id, run.submitted, run.end, run.made, run.tries, run.attempt_ends)

    def timeline(self) -> TimelinePicture:
        """The run's timeline as a picture: a row per node with its tries, the ledger's categories, each fault,
        decision, resume and the checkpoint it loaded (jobs.timeline). A notebook shows it inline; `.save(path)`
        writes the HTML page, `.save(path, "png")` or "svg" a picture. Needs what goodput() needs."""
        from clusterkit.jobs.timeline import build_timeline
        from clusterkit.jobs.timeline_picture import TimelinePicture
        from clusterkit.providers import open_cluster

        replacements = open_cluster(self.cluster).replacements()
        run = self._run_records(replacements)
        return TimelinePicture(build_timeline(self.job_id, run.submitted, run.end, run.made, run.tries,
                                              run.attempt_ends, replacements))

    def _run_records(self, replacements: dict[str, Replacement]) -> RunRecords:
        """What the ledger and the timeline are built from: the supervisor's records and accounting's ends."""
        from clusterkit.jobs.recoveries import parse_time

        everything = tries(self.record, self.transport)
        tried = [t for t in everything if t.attempt.rpartition(".")[0] == self.job_id]
        if not tried:
            raise ClusterkitError(f"job {self.job_id} has no record of its tries: the goodput ledger reads what a "
                                  "supervised run keeps", fix="supervise the job (supervise: true, with a "
                                  "checkpoint_dir) and look again once its step has started")
        made = decisions(self.record, self.transport)
        status = self._status(replacements, made, everything)
        ends = {f"{self.job_id}.{attempt.attempt}": attempt.end for attempt in status.attempts if attempt.end}
        last = status.attempts[-1].end if status.attempts else ""
        end = parse_time(last) if is_final(status.state) and last else None
        if end is None:
            end = time.time() if not is_final(status.state) else max(
                (t for attempt in tried for t in (attempt.ended, attempt.last_time) if t is not None), default=0.0)
        submitted = parse_time(self.record.submitted) if self.record else None
        if submitted is None:
            submitted = min(attempt.started for attempt in tried if attempt.started is not None)
        return RunRecords(submitted, end, made, tried, ends)

    def not_found(self) -> NotFound:
        """The error for a job that neither the controller nor accounting knows."""
        return NotFound(f"Slurm knows no job {self.job_id} on cluster {self.cluster!r}",
                        fix="check the id with `clusterkit jobs` or squeue")

    def follow_log(self, poll: float = 0.5, follow: bool = True) -> Iterator[str]:
        """The job's output as it grows, chunk by chunk, until the job ends (or once, without `follow`).
        Each poll reads only what is new (over SSH too)."""
        position = 0
        pending = b""
        while True:
            done = not follow or self.done()
            chunk = read_bytes(self.transport, self.stdout_path, position) if self.stdout_path else None
            if chunk:
                position += len(chunk)
                data, pending = _complete_utf8(pending + chunk)
                if data:
                    yield data
            if done:
                if pending:
                    yield pending.decode(errors="replace")
                return
            time.sleep(poll)

    @property
    def transport(self) -> Transport:
        return self.tracker.slurm.transport

    def log_exists(self) -> bool:
        return self.stdout_path is not None and exists(self.transport, self.stdout_path)

    def wait(self, timeout: float | None = None, poll: float = 1.0,
             progress: Callable[[str], None] | bool | None = None) -> str:
        """Block until the job reaches a final state; return that state.

        `progress`: a function that gets one line per change of state (the CLI's), or True for a
        progress bar (tqdm: a widget in Jupyter, a line in a terminal) with the state and the time.
        """
        if progress is True:
            return self._wait_with_bar(timeout, poll)
        progress = progress or None
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
                raise self.not_found()
            if progress and state != last:
                progress(f"job {self.job_id}: {state}")
                last = state
            if is_final(state):
                return state
            if deadline is not None and time.monotonic() > deadline:
                raise ClusterkitError(f"job {self.job_id} still {state} after {timeout:.0f} s")
            time.sleep(poll)

    def _wait_with_bar(self, timeout: float | None, poll: float) -> str:
        from tqdm.auto import tqdm

        with tqdm(total=None, desc=f"job {self.job_id} on {self.cluster}", unit="", leave=True,
                  bar_format="{desc}: {postfix} [{elapsed}]") as bar:
            def show(line: str) -> None:
                bar.set_postfix_str(line.split(": ", 1)[-1])

            state = self.wait(timeout, poll, progress=show)
            bar.set_postfix_str(state)
            return state

    def _repr_html_(self) -> str:
        """A small table for Jupyter: the state, each attempt with its nodes and why it ended, the log's tail."""
        status = self.status()
        rows = "".join(f"<tr><td>{a.attempt}</td><td>{escape(a.state)}</td><td>{escape(a.nodes)}</td>"
                       f"<td>{escape(a.start)}</td><td>{escape(a.end)}</td><td>{escape(a.classification)}</td></tr>"
                       for a in status.attempts)
        tail = "\n".join(self.stdout().splitlines()[-10:])
        return (f"<div><b>job {escape(self.job_id)}</b> on {escape(self.cluster)}: <b>{escape(status.state)}</b>"
                "<table><tr><th>attempt</th><th>state</th><th>nodes</th><th>start</th><th>end</th>"
                f"<th>why it ended</th></tr>{rows}</table>"
                + (f"<pre>{escape(tail)}</pre>" if tail else "") + "</div>")

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
        return self._read(self.stdout_path)

    def stderr(self) -> str:
        return self._read(self.stderr_path) if self.stderr_path != self.stdout_path else ""

    def _read(self, path: Path | None) -> str:
        data = read_bytes(self.transport, path) if path is not None else None
        return data.decode(errors="replace") if data else ""

    def cancel(self) -> bool:
        """Cancel the job; False when it had already ended. NotFound when Slurm knows no such job."""
        try:
            cancelled = self.tracker.slurm.cancel(self.job_id)
        except NotFound:
            if self.tracker.state(self.job_id, fresh=True) == "UNKNOWN":
                raise self.not_found() from None
            cancelled = False  # the controller has forgotten it; accounting knows how it ended
        self.tracker.snapshot(fresh=True)
        return cancelled


def _complete_utf8(data: bytes) -> tuple[str, bytes]:
    """Decode what forms whole characters; keep a character cut by the read for the next chunk."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode(), data[cut:]
        except UnicodeDecodeError:
            continue
    return data.decode(errors="replace"), b""

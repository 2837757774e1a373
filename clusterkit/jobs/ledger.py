"""A run's goodput ledger: every second from its submission to its end in exactly one category.

Built from what a supervised run records, nothing measured anew: the tries of the step (`tries.jsonl`: when each
started and ended, its first and last step and when, the checkpoint it resumed from, the seconds saves blocked its
loop), the supervisor's decisions (what ended each try, when a failure was acted on), and accounting's end of each
attempt (when Slurm itself ended one, its batch host gone). The wall-clock is cut into consecutive spans, so the
categories (goodput.categories) add up to it by construction:

    submission -> first try's start             queued
    a try's start -> its first step              start-up: other for the first try, recovery after a failure
    first step -> last step                      productive, less the loop's checkpoint stall and, where a failure
                                                 followed, the steps computed again (lost work: those after the
                                                 checkpoint the next try resumed from, at the try's step time)
    last step -> the failure acted on            detection (a hang: hang)
    the failure -> the next try's start          recovery (requeue, scheduling, credential hold, replacement)
    a planned stop -> the next try's start       queued (time limit or preemption: the job waits its turn again)
    anything else                                other

The first step of a try is taken as its start of progress (its own step time, one step, counts as start-up), and
a fault as happening at the last beat before it: both err by at most a step. `build()` is pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clusterkit import runtime
from clusterkit.goodput.categories import (
    CATEGORIES,
    CHECKPOINT_STALL,
    DETECTION,
    HANG,
    LOST_WORK,
    OTHER,
    PRODUCTIVE,
    QUEUED,
    RECOVERY,
)
from clusterkit.jobs.recoveries import Try, acted_at, decision_time
from clusterkit.lean_dataclass import lean_dataclass

FAILURES = (runtime.NODE_FAILURE, runtime.HANG, runtime.APPLICATION_ERROR, runtime.TERMINATED)
PLANNED = (runtime.TIME_LIMIT, runtime.PREEMPTED)


@lean_dataclass(frozen=True)
class Span:
    """A stretch of the run's wall-clock in one category (unix times), with what it was."""

    start: float
    end: float
    category: str
    what: str
    attempt: str = ""  # the attempt (JOBID.RESTART) it belongs to, '' between attempts


@lean_dataclass(frozen=True)
class Ledger:
    job_id: str
    start: float  # the submission (unix time)
    end: float  # the end of the last attempt, or now for a running job
    spans: tuple[Span, ...]

    @property
    def wall_s(self) -> float:
        return self.end - self.start

    @property
    def categories(self) -> dict[str, float]:
        """Seconds in each category, every category named (in goodput.categories' order)."""
        seconds = dict.fromkeys(CATEGORIES, 0.0)
        for span in self.spans:
            seconds[span.category] += span.end - span.start
        return seconds

    @property
    def goodput(self) -> float:
        """The productive share of the wall-clock."""
        return self.categories[PRODUCTIVE] / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        return {"job_id": self.job_id, "wall_s": round(self.wall_s, 3),
                "categories": {name: round(value, 3) for name, value in self.categories.items()},
                "goodput": round(self.goodput, 4),
                "spans": [{"start": span.start, "end": span.end, "category": span.category, "what": span.what,
                           "attempt": span.attempt} for span in self.spans]}


class _Cursor:
    """Lays spans end to end from `start`, never backwards (nodes' clocks and whole-second stamps disagree a
    little) and never past `end`."""

    def __init__(self, start: float, end: float) -> None:
        self.at, self.end = start, end
        self.spans: list[Span] = []

    def to(self, until: float | None, category: str, what: str, attempt: str = "") -> None:
        if until is None:
            return
        until = min(max(until, self.at), self.end)
        if until > self.at:
            self.spans.append(Span(self.at, until, category, what, attempt))
            self.at = until


def build(job_id: str, submitted: float, end: float, made: list[dict[str, Any]], tries: list[Try],
          attempt_ends: Mapping[str, str] | None = None) -> Ledger:
    """The ledger of job `job_id` from its submission (unix time) to `end`."""
    mine = [t for t in tries if t.attempt.rpartition(".")[0] == job_id and t.started is not None]
    decided = [d for d in made if str(d.get("attempt", "")).rpartition(".")[0] == job_id]
    cursor = _Cursor(submitted, max(end, submitted))
    after = QUEUED, "waiting in the queue for the first start"
    for index, current in enumerate(mine):
        following = mine[index + 1] if index + 1 < len(mine) else None
        cursor.to(current.started, *after)
        first = current.first_time if current.first_time is not None else current.last_time
        cursor.to(first, OTHER if index == 0 else RECOVERY,
                  "start-up: job start, imports, rendezvous, checkpoint load", current.attempt)
        decision = _ending(current, following, decided)
        kind = str(decision.get("decision", "")) if decision else ""
        _progress(cursor, current, following if kind in FAILURES else None)
        stop = _acted_at(decision, current, attempt_ends or {})
        if kind == runtime.HANG:
            cursor.to(stop, HANG, "no progress until the hang was seen", current.attempt)
        elif kind in FAILURES:
            cursor.to(stop, DETECTION, f"{kind.replace('_', ' ')}: until it was acted on", current.attempt)
        ended = current.ended if current.ended is not None else stop
        if ended is not None and following is not None and following.started is not None:
            ended = min(ended, following.started)  # a try ends before the next one starts, whatever was recorded
        cursor.to(ended, OTHER, "the step's end", current.attempt)
        if kind in PLANNED:
            after = QUEUED, f"{kind.replace('_', ' ')}: requeued, waiting in the queue again"
        elif kind in FAILURES or (following is not None and kind != runtime.COMPLETED):
            after = RECOVERY, "recovery: requeue or relaunch, scheduling, credential hold, replacement"
        else:
            after = OTHER, "after the step"
    cursor.to(cursor.end, *after)
    return Ledger(job_id, submitted, cursor.end, tuple(cursor.spans))


def _progress(cursor: _Cursor, current: Try, following: Try | None) -> None:
    """The try's first to last step: productive, less its checkpoint stall and the steps a failure lost."""
    if current.first_time is None or current.last_time is None:
        return
    span = max(current.last_time - max(current.first_time, cursor.at), 0.0)
    steps = (current.last_step or 0) - (current.first_step or 0)
    step_time = (current.last_time - current.first_time) / steps if steps > 0 else 0.0
    lost_steps = 0
    if following is not None and current.last_step is not None:
        resumed = following.resumed_from
        if resumed is None and following.first_step is not None:
            resumed = following.first_step - 1  # a run that does not resume through CheckpointManager
        if resumed is not None:
            lost_steps = max(current.last_step - max(resumed, (current.first_step or 1) - 1), 0)
    lost = min(lost_steps * step_time, span)
    stall = min(current.stall_seconds or 0.0, span - lost)
    productive_end = current.last_time - lost - stall
    cursor.to(productive_end, PRODUCTIVE, f"training, steps {current.first_step} to {current.last_step}",
              current.attempt)
    cursor.to(productive_end + stall, CHECKPOINT_STALL,
              f"the loop blocked by {current.saves or 0} checkpoint save(s)", current.attempt)
    cursor.to(current.last_time, LOST_WORK, f"{lost_steps} step(s) computed again after the failure",
              current.attempt)


def _ending(current: Try, following: Try | None, decided: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The decision that ended a try: the first of its attempt's made after it started and before the next began."""
    for decision in decided:
        when = decision_time(decision)
        if decision.get("attempt") != current.attempt or when is None:
            continue
        if current.started is not None and when < current.started - 1:
            continue
        if following is not None and following.started is not None and when > following.started + 1 \
                and following.attempt == current.attempt:
            continue  # a later try's decision in the same attempt
        return decision
    return None


def _acted_at(decision: dict[str, Any] | None, current: Try, attempt_ends: Mapping[str, str]) -> float | None:
    """When the failure that ended a try was acted on: the decision's time, or, where Slurm ended the attempt (its
    decision is recorded when the next attempt starts), when its node was marked or the attempt ended."""
    if decision is None:
        return current.ended
    return acted_at(decision, attempt_ends) or decision_time(decision)

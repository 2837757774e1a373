"""Every recovery of a run explained: what failed, how it was seen, what was done, and what it cost.

A recovery is one node failure that the supervisor (or Slurm, for an attempt whose batch host died) acted on. Its
story comes from three records, none enough alone:

- the supervisor's decisions (`decisions.jsonl`): when the failure was seen, the nodes, the evidence, whether they
  were marked DOWN or drained, whether the step was relaunched on spares or the job requeued;
- the tries of the step (`tries.jsonl`, written by the supervisor from each try's heartbeat directory): when each try
  started and ended, the checkpoint step it resumed from, its first step (when training went on) and its last;
- the cluster's replacements (its provider's `replacements()`): when a failed node's replacement was ready.

`explain()` is pure: the same records give the same story, so status, a notebook and the goodput ledger agree.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from clusterkit import runtime
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.providers.base import Replacement


@lean_dataclass(frozen=True)
class Try:
    """One try of a supervised step, from tries.jsonl; None where it was not recorded."""

    attempt: str  # JOBID.RESTART
    number: int
    nodes: tuple[str, ...] = ()
    started: float | None = None  # unix times
    ended: float | None = None  # None: still running, or its supervisor died with its node
    first_step: int | None = None
    first_time: float | None = None
    resumed_from: int | None = None
    load_seconds: float | None = None
    last_step: int | None = None
    last_time: float | None = None
    stall_seconds: float | None = None  # the loop blocked by checkpoint saves
    saves: int | None = None


@lean_dataclass(frozen=True)
class Recovery:
    """One node failure and the recovery from it."""

    attempt: int  # the attempt the failure ended or interrupted
    seen_at: str  # when clusterkit (or Slurm) acted on it, ISO 8601
    nodes: tuple[str, ...]
    marked_down: tuple[str, ...]  # gone: marked DOWN, so Slurm let go of them at once
    drained: tuple[str, ...]  # sick: drained with the evidence
    evidence: str
    action: str  # "relaunched" (on spares, in the same allocation) or "requeued"
    relaunched_on: tuple[str, ...] = ()
    replacement_ready_at: str | None = None  # the last of the failed nodes' replacements to be ready
    replacing: tuple[str, ...] = ()  # failed nodes whose replacement is still booting
    resumed_at: str | None = None  # the first step after the recovery
    seconds_to_resume: float | None = None  # from seen_at to resumed_at
    resumed_from_step: int | None = None  # the checkpoint the resumed try loaded
    last_step_before: int | None = None  # the furthest step reached before the failure
    steps_lost: int | None = None  # steps computed again: last_step_before - resumed_from_step

    def describe(self) -> str:
        """One line for a person."""
        marked = "; ".join(part for part in (f"{','.join(self.marked_down)} marked DOWN" if self.marked_down else "",
                                              f"{','.join(self.drained)} drained" if self.drained else "") if part)
        told = [f"{_clock(self.seen_at)}: {marked or 'node failure'} ({self.evidence})"]
        told.append(f"relaunched on {','.join(self.relaunched_on)}" if self.action == "relaunched" else "requeued")
        if self.replacing:
            told.append("waiting for " + ", ".join(f"{node}'s replacement" for node in self.replacing))
        elif self.replacement_ready_at:
            told.append(f"replacement ready {_clock(self.replacement_ready_at)}")
        if self.resumed_at:
            resumed = f"resumed {_clock(self.resumed_at)}"
            if self.seconds_to_resume is not None:
                resumed += f" (+{self.seconds_to_resume:.0f} s)"
            if self.resumed_from_step is not None:
                resumed += f" from step {self.resumed_from_step}"
            told.append(resumed)
        else:
            told.append("not resumed yet")
        if self.steps_lost is not None:
            told.append(f"{self.steps_lost} step{'s' if self.steps_lost != 1 else ''} lost")
        return "; ".join(told)


def parse_tries(entries: Iterable[Mapping[str, Any]]) -> list[Try]:
    """The tries in tries.jsonl's entries (a start line and an end line each), in the order they started."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for entry in entries:
        attempt, number = str(entry.get("attempt", "")), entry.get("try")
        if not isinstance(number, int) or not attempt:
            continue
        known = found.setdefault((attempt, number), {"attempt": attempt, "number": number})
        if entry.get("event") == "started":
            known.update(started=_number(entry.get("time")),
                         nodes=tuple(str(node) for node in entry.get("nodes", []) if isinstance(node, str)))
        elif entry.get("event") == "ended" and "ended_recorded" not in known:
            # The first end recorded stands: a supervisor cut off with its node and back later ends its try again.
            known["ended_recorded"] = True
            known.update(ended=_number(entry.get("time")),
                         **{name: _number(entry.get(name)) for name in
                            ("first_time", "load_seconds", "last_time", "stall_seconds")},
                         **{name: _integer(entry.get(name)) for name in
                            ("first_step", "resumed_from", "last_step", "saves")})
    tries = [Try(**{key: value for key, value in fields.items() if key != "ended_recorded"})
             for fields in found.values()]
    return sorted(tries, key=lambda t: (t.started if t.started is not None else float("inf"), t.attempt, t.number))


def explain(job_id: str, made: list[dict[str, Any]], tries: list[Try], replacements: Mapping[str, Replacement],
            attempt_ends: Mapping[str, str] | None = None) -> list[Recovery]:
    """Every node failure of job `job_id` that was acted on, explained, in order. `attempt_ends`: attempt id ->
    accounting's end time, for a failure Slurm ended an attempt with (its decision is recorded only when the next
    attempt starts)."""
    recoveries = []
    for decision in made:
        attempt = str(decision.get("attempt", ""))
        job, _, index = attempt.rpartition(".")
        if decision.get("decision") != runtime.NODE_FAILURE or job != job_id or not index.isdigit():
            continue
        recorded = decision_time(decision)
        seen = acted_at(decision, attempt_ends or {}) or recorded
        nodes = tuple(str(node) for node in decision.get("nodes", []))
        down = tuple(str(node) for node in decision.get("marked_down", []))
        failed = next((t for t in reversed(tries) if t.attempt == attempt
                       and (t.started is None or recorded is None or t.started <= recorded)), None)
        after = recorded if recorded is not None else seen
        resumed = next((t for t in tries if t.started is not None and after is not None and t.started > after), None)
        since = failed.started if failed is not None and failed.started is not None else seen
        until = resumed.started if resumed is not None and resumed.started is not None else float("inf")
        ran_on = nodes or (failed.nodes if failed is not None else ())
        replaced = [r for r in replacements.values() if since is not None and r.node in ran_on
                    and since - 1 <= (parse_time(r.terminated_at) or 0) <= until]
        evidence = str(decision.get("evidence", ""))
        if not nodes and replaced:
            # Slurm found the node itself and requeued the job before any supervisor said which: the cluster's
            # replacement of a node of the run in that window names it, and why it was replaced.
            nodes = down = tuple(sorted(r.node for r in replaced))
            evidence += "; " + "; ".join(f"{r.node} replaced: {r.replaced_because}" for r in replaced)
        ready = [r.ready_at for r in replaced if r.ready_at]
        resumed_at = resumed.first_time if resumed is not None else None
        last = failed.last_step if failed is not None else None
        start = resumed.resumed_from if resumed is not None else None
        recoveries.append(Recovery(
            attempt=int(index), seen_at=_iso(seen) if seen is not None else str(decision.get("time", "")),
            nodes=nodes, marked_down=down, drained=tuple(node for node in nodes if node not in down),
            evidence=evidence,
            action="relaunched" if decision.get("action") == runtime.RELAUNCH else "requeued",
            relaunched_on=tuple(str(node) for node in decision.get("relaunched_on", [])),
            replacement_ready_at=max(ready, key=lambda text: parse_time(text) or 0) if ready else None,
            replacing=tuple(r.node for r in replaced if r.in_progress),
            resumed_at=_iso(resumed_at) if resumed_at is not None else None,
            seconds_to_resume=round(resumed_at - seen, 1) if resumed_at is not None and seen is not None else None,
            resumed_from_step=start, last_step_before=last,
            steps_lost=max(last - start, 0) if last is not None and start is not None else None))
    return recoveries


def acted_at(decision: Mapping[str, Any], attempt_ends: Mapping[str, str]) -> float | None:
    """When a failure Slurm ended an attempt with was acted on (its decision is recorded only when the next attempt
    starts): when the node was marked (its reason's time, which the next supervisor read back), else when
    accounting says the attempt ended; None for a decision the supervisor made as it acted."""
    if "slurm_state" not in decision:
        return None
    return parse_time(str(decision.get("acted_at", ""))) or parse_time(attempt_ends.get(str(decision.get("attempt")),
                                                                                         ""))


def decision_time(decision: Mapping[str, Any]) -> float | None:
    """When a decision was made: its unix time, else its (whole-second) local time."""
    unix = _number(decision.get("unix"))
    return unix if unix is not None else parse_time(str(decision.get("time", "")))


def parse_time(text: str) -> float | None:
    """Unix time of an ISO 8601 time (the supervisor's %z form too); a time without a zone is this machine's."""
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        pass
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _iso(unix: float) -> str:
    return dt.datetime.fromtimestamp(unix).astimezone().isoformat(timespec="seconds")


def _clock(text: str) -> str:
    """The time of day of an ISO time, as a person reads it in a table."""
    unix = parse_time(text)
    return dt.datetime.fromtimestamp(unix).strftime("%H:%M:%S") if unix is not None else text


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None

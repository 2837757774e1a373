"""A run's timeline as a figure model: what `clusterkit timeline JOB` draws, built from the run's own records.

One time axis, one row for the run and one per node:

- the run's row: the goodput ledger's spans (jobs.ledger), each in its category, waits named as what they are
  (queued, recovery: requeue, scheduling, replacement), and marks for each decision the supervisor (or Slurm) made
  with its evidence, each resume (the checkpoint step it loaded, the steps computed again) and each checkpoint a
  resume loaded (placed at its step's time, from the try's step times: the records keep the count of saves, not
  their times);
- a row per node: the tries of the step it ran in, the last step before a fault that took it out (a fault happens
  after the last beat before it, as in the ledger), and the time it was out of the run after being marked DOWN or
  drained (until its replacement was ready, it ran again, or the run ended).

`build_timeline()` is pure: the same records give the same figure, on the head node or over SSH from a laptop.
Drawing it is jobs.timeline_picture's job, which alone loads the plotting library.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clusterkit import runtime
from clusterkit.jobs.ledger import FAILURES, Ledger, build
from clusterkit.jobs.recoveries import Try, acted_at, decision_time, parse_time
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.providers.base import Replacement

RUN_ROW = "run"
# Bar kinds besides the goodput categories (a node's rows): a try running on it, and the node out of the run.
RUNNING = "running"
OUT = "out"
# Mark kinds.
FAULT = "fault"  # the last step before a failure, on the failed nodes' rows
DECISION = "decision"  # what the supervisor (or Slurm) decided, when it acted, with the evidence
RESUME = "resume"  # the first step after a recovery
CHECKPOINT = "checkpoint"  # a checkpoint a resume loaded
# More nodes than this and nodes with the very same history share a row (a 2,000-node run is not 2,000 rows).
MAX_NODE_ROWS = 64


@lean_dataclass(frozen=True)
class Bar:
    """A stretch of time on a row (unix times): a goodput category on the run's row, a try or a wait on a node's."""

    start: float
    end: float
    kind: str
    label: str
    text: str = ""  # written on the bar where it is wide enough: a try's attempt and steps


@lean_dataclass(frozen=True)
class Mark:
    """A moment on a row: a fault, a decision, a resume or a checkpoint, with what the records say of it."""

    at: float
    kind: str
    label: str


@lean_dataclass(frozen=True)
class Row:
    name: str  # RUN_ROW, a node, or several nodes with one history ("n5, n6 (2 nodes)")
    nodes: tuple[str, ...]
    bars: tuple[Bar, ...]
    marks: tuple[Mark, ...]


@lean_dataclass(frozen=True)
class Timeline:
    job_id: str
    start: float  # the submission
    end: float
    rows: tuple[Row, ...]  # the run's row first, then the nodes in the order they first ran
    ledger: Ledger
    failures: int  # the failures the supervisor (or Slurm) acted on
    steps_lost: int  # steps computed again after them

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(node for row in self.rows[1:] for node in row.nodes)

    def summary(self) -> str:
        """One line for a person: the goodput and what the failures cost."""
        failures = f"{self.failures:,} failure{'s' if self.failures != 1 else ''}"
        return (f"job {self.job_id}: goodput {self.ledger.goodput:.1%} of {_duration(self.ledger.wall_s)}; "
                f"{failures}, {self.steps_lost:,} step{'s' if self.steps_lost != 1 else ''} computed again; "
                f"{len(self.nodes):,} node{'s' if len(self.nodes) != 1 else ''}")

    def to_dict(self) -> dict[str, object]:
        return {"job_id": self.job_id, "start": self.start, "end": self.end, "summary": self.summary(),
                "failures": self.failures, "steps_lost": self.steps_lost, "ledger": self.ledger.to_dict(),
                "rows": [{"name": row.name, "nodes": list(row.nodes),
                          "bars": [{"start": b.start, "end": b.end, "kind": b.kind, "label": b.label, "text": b.text}
                                   for b in row.bars],
                          "marks": [{"at": m.at, "kind": m.kind, "label": m.label} for m in row.marks]}
                         for row in self.rows]}


def build_timeline(job_id: str, submitted: float, end: float, made: list[dict[str, Any]], tries: list[Try],
                   attempt_ends: Mapping[str, str] | None = None,
                   replacements: Mapping[str, Replacement] | None = None) -> Timeline:
    """The timeline of job `job_id` from its submission (unix time) to `end`: the same records as the ledger's,
    and the cluster's node replacements where its provider knows them."""
    ends = attempt_ends or {}
    ledger = build(job_id, submitted, end, made, tries, ends)
    mine = [t for t in tries if t.attempt.rpartition(".")[0] == job_id and t.started is not None]
    decided = [d for d in made if str(d.get("attempt", "")).rpartition(".")[0] == job_id]
    run_marks: list[Mark] = []
    node_marks: dict[str, list[Mark]] = {}
    node_bars: dict[str, list[Bar]] = {}
    failures, lost_total = 0, 0
    stopped: dict[int, float] = {}  # a try's index -> when the failure that ended it was acted on
    ran: dict[str, list[int]] = {}  # node -> the tries it ran in, by index
    for index, current in enumerate(mine):
        for node in current.nodes:
            ran.setdefault(node, []).append(index)
    for decision in decided:
        when = acted_at(decision, ends) or decision_time(decision)
        if when is None:
            continue
        kind = str(decision.get("decision", ""))
        evidence = str(decision.get("evidence", ""))
        nodes = tuple(str(node) for node in decision.get("nodes", []) if isinstance(node, str))
        run_marks.append(Mark(when, DECISION, f"{kind.replace('_', ' ')} ({_clock(when)}): {evidence}"))
        if kind not in FAILURES:
            continue
        failures += 1
        recorded = decision_time(decision) or when  # the try that failed had started when this was written
        index = next((i for i in reversed(range(len(mine))) if mine[i].attempt == decision.get("attempt")
                      and (mine[i].started or 0.0) <= recorded), None)
        failed = mine[index] if index is not None else None
        if index is not None:
            stopped.setdefault(index, when)
        if failed is not None and failed.last_time is not None:
            for node in nodes or failed.nodes:
                node_marks.setdefault(node, []).append(Mark(
                    failed.last_time, FAULT, f"last step {failed.last_step} at {_clock(failed.last_time)}, "
                                             f"then {kind.replace('_', ' ')}: {evidence}"))
        down = {str(node) for node in decision.get("marked_down", [])}
        for node in nodes:
            how = "marked DOWN" if node in down else "drained"
            until, why = _back(node, when, [mine[i] for i in ran.get(node, ())], replacements or {}, ledger.end)
            node_bars.setdefault(node, []).append(Bar(when, until, OUT, f"{how} at {_clock(when)}: {why}"))
    runs = [Bar(current.started or 0.0, _try_end(current, mine, index, stopped.get(index, ledger.end)), RUNNING,
                _describe_try(current), _steps(current)) for index, current in enumerate(mine)]
    for previous, current in zip(mine, mine[1:]):
        if current.first_time is None:
            continue
        resumed = current.resumed_from
        if resumed is None and current.first_step is not None:
            resumed = current.first_step - 1  # as the ledger takes it: a run that does not resume through
            # CheckpointManager goes on after the last step it kept, or from the beginning
        lost = 0
        if resumed is not None and previous.last_step is not None:
            lost = max(previous.last_step - max(resumed, (previous.first_step or 1) - 1), 0)
        lost_total += lost
        start = (f"the checkpoint of step {resumed}" if current.resumed_from is not None
                 else "the beginning" if not resumed else f"step {resumed}, by its own record")
        run_marks.append(Mark(current.first_time, RESUME,
                              f"attempt {current.attempt} try {current.number} on {_nodes(current.nodes)}: step "
                              f"{current.first_step} at {_clock(current.first_time)}, resumed from {start}; "
                              f"{lost} step{'s' if lost != 1 else ''} computed again"))
        saved_at = _step_time(previous, resumed)
        if saved_at is not None:
            run_marks.append(Mark(saved_at, CHECKPOINT, f"checkpoint of step {resumed} (about {_clock(saved_at)}, "
                                                        f"from the step times of attempt {previous.attempt} try "
                                                        f"{previous.number}): the resume at "
                                                        f"{_clock(current.first_time)} loaded it"))
    run = Row(RUN_ROW, (), tuple(Bar(s.start, s.end, s.category, s.what) for s in ledger.spans),
              tuple(sorted(run_marks, key=lambda m: m.at)))
    # A node's history: the tries it ran in, and its own bars and marks (out of the run, faults). Past
    # MAX_NODE_ROWS, nodes with the same history share a row.
    histories: dict[object, list[str]] = {}
    order = dict.fromkeys([*ran, *node_bars, *node_marks])
    for node in order:
        history = (tuple(ran.get(node, ())), tuple(node_bars.get(node, ())), tuple(node_marks.get(node, ())))
        histories.setdefault(history if len(order) > MAX_NODE_ROWS else node, []).append(node)
    rows = []
    for members in histories.values():
        node = members[0]
        bars = [runs[index] for index in ran.get(node, ())] + node_bars.get(node, [])
        rows.append(Row(node if len(members) == 1 else f"{node} and {len(members) - 1:,} more", tuple(members),
                        tuple(sorted(bars, key=lambda b: b.start)),
                        tuple(sorted(node_marks.get(node, []), key=lambda m: m.at))))
    return Timeline(job_id, ledger.start, ledger.end, (run, *rows), ledger, failures, lost_total)


def _try_end(current: Try, tries: list[Try], index: int, stop: float) -> float:
    """A try's end: recorded, else the next try's start; never after the next try started or after the failure
    that ended it was acted on (a supervisor that died with its node records its end when it is back, if ever)."""
    following = tries[index + 1].started if index + 1 < len(tries) else None
    ended = min(current.ended if current.ended is not None else stop, stop,
                following if following is not None else stop)
    return max(ended, current.started or ended)


def _describe_try(current: Try) -> str:
    steps = (f"steps {current.first_step} to {current.last_step}" if current.first_step is not None
             else "no step recorded")
    resumed = f", resumed from step {current.resumed_from}" if current.resumed_from is not None else ""
    saves = f", {current.saves} checkpoint save{'s' if current.saves != 1 else ''}" if current.saves else ""
    return f"attempt {current.attempt} try {current.number} on {_nodes(current.nodes)}: {steps}{resumed}{saves}"


def _steps(current: Try) -> str:
    steps = f": steps {current.first_step}-{current.last_step}" if current.first_step is not None else ""
    return f"{current.attempt}{f' try {current.number}' if current.number else ''}{steps}"


def _nodes(nodes: tuple[str, ...], shown: int = 4) -> str:
    """A try's nodes for a label: a 2,000-node try is not 2,000 names on every mark."""
    if len(nodes) <= shown:
        return ",".join(nodes)
    return f"{','.join(nodes[:shown])},... ({len(nodes)} nodes)"


def _back(node: str, since: float, tries: list[Try], replacements: Mapping[str, Replacement],
          end: float) -> tuple[float, str]:
    """Until when a failed node was out of the run (`tries`: those it ran in), and why then."""
    replaced = replacements.get(node)
    ready = parse_time(replaced.ready_at) if replaced is not None and replaced.ready_at else None
    if ready is not None and ready >= since:
        return min(ready, end), f"its replacement was ready at {_clock(ready)}"
    again = next((t.started for t in tries if t.started is not None and t.started > since), None)
    if again is not None:
        return again, f"it ran again at {_clock(again)}"
    return end, "not in the run again"


def _step_time(current: Try, step: int | None) -> float | None:
    """When `current` reached `step`, from its first and last steps' times; None outside them."""
    if step is None or current.first_step is None or current.last_step is None or current.first_time is None \
            or current.last_time is None or not current.first_step <= step <= current.last_step:
        return None
    if current.last_step == current.first_step:
        return current.first_time
    fraction = (step - current.first_step) / (current.last_step - current.first_step)
    return current.first_time + fraction * (current.last_time - current.first_time)


def _clock(unix: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(unix, dt.timezone.utc).strftime("%H:%M:%S")


def _duration(seconds: float) -> str:
    if seconds < 180:
        return f"{seconds:.0f} s"
    if seconds < 3 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"

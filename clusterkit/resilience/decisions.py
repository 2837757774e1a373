"""The supervisor's choice after a step, as a value: `decide(outcome, budget, health) -> Decision`.

No clock, no files, no Slurm: the supervisor (supervisor.py) runs the step, gathers what it needs to know,
asks `decide()`, then carries the decision out (saves the counts, drains, records, requeues or exits).
"""

from __future__ import annotations

import dataclasses
import enum
import re
import signal

from clusterkit import runtime
from clusterkit.lean_dataclass import lean_dataclass

# A warning that came no further from the limit than the lead the job asked for (--signal=B:USR1@N), plus this
# slack for the time Slurm and the supervisor took to deliver it and ask how much is left, is the time limit's.
WARNING_SLACK_S = 60.0
UNKNOWN_LEAD_S = 900.0  # without --signal-lead: a warning this close to the limit is the time limit's
# How launchers say a rank died of a signal: torchrun's failure summary, and srun's line per task.
_TORCHRUN_SIGNAL = re.compile(r"host\s*: (?P<node>\S+)\s+rank\s*: (?P<rank>\d+)[^\n]*\s+exitcode\s*: -(?P<signal>\d+)")
_SRUN_KILLED = re.compile(r"srun: error: (?P<node>\S+): tasks? (?P<rank>[\d,\-]+): Killed")

NodeEvidence = tuple[tuple[str, str], ...]  # (node, what is wrong with it), in the order found


class Kind(str, enum.Enum):
    """The decision recorded in decisions.jsonl (its value is the name there)."""

    COMPLETED = runtime.COMPLETED
    NODE_FAILURE = runtime.NODE_FAILURE
    HANG = runtime.HANG
    APPLICATION_ERROR = runtime.APPLICATION_ERROR
    TIME_LIMIT = runtime.TIME_LIMIT
    PREEMPTED = runtime.PREEMPTED
    CHECKPOINT_STORAGE_FULL = runtime.CHECKPOINT_STORAGE_FULL
    BUDGET_EXHAUSTED = runtime.BUDGET_EXHAUSTED
    TERMINATED = runtime.TERMINATED


class Action(enum.Enum):
    """What the supervisor does about a decision."""

    FINISH = "finish"  # the run is complete: exit 0
    RETRY = "retry"  # start the step again on the same nodes
    RELAUNCH = runtime.RELAUNCH  # start the step again on `Decision.nodes`, healthy ones and spares (after draining)
    REQUEUE = "requeue"  # requeue the job (after draining `Decision.drain`)
    STOP = "stop"  # the run ends here (after draining `Decision.drain`); a resubmission goes on uncharged
    LEAVE = "leave"  # Slurm is ending the job: exit and let Slurm decide what is next


class Bound(enum.Enum):
    """A count of the run with a bound of its own; the value names the count in Budget and the record."""

    FAILURES = "failures"
    TIME_LIMIT_REQUEUES = "time_limit_requeues"
    PREEMPTIONS = "preemptions"


_BOUND_NAMES = {Bound.FAILURES: "the restart budget", Bound.TIME_LIMIT_REQUEUES: "the bound on time-limit requeues",
                Bound.PREEMPTIONS: "the bound on preemptions"}


@lean_dataclass(frozen=True)
class Outcome:
    """How one try of the step ended, as the supervisor saw it."""

    exit_code: int | None  # None: the supervisor stopped it
    nodes: tuple[str, ...] = ()  # the step's nodes (the allocation, unless it holds spares)
    spares: tuple[str, ...] = ()  # the allocation's nodes held beside the step, none of them found bad
    hang_evidence: str = ""
    bad_nodes: NodeEvidence = ()  # found beside the step (its health check, a silent beacon), which then stopped it
    unreachable: tuple[str, ...] = ()  # of bad_nodes: those that did not answer (gone, not sick)
    signalled: bool = False  # the job was warned (time limit or preemption)
    asked_to_stop: bool = False  # the supervisor passed the warning on to the step
    finished: bool = False  # every rank said it finished its training
    terminated: bool = False  # Slurm is ending the job (SIGTERM to the supervisor)
    log_tail: str = ""  # the step's output (its end), where it went to a file
    time_left: float | None = None  # seconds before the time limit when the warning came; None: unknown
    signal_lead: float | None = None  # the warning's lead the job asked for (--signal=...@N); None: not given
    saved: str = ""  # with a warning: what the step left (a new checkpoint or none)

    @property
    def complete(self) -> bool:
        """Exit 0 is complete unless it answers our stop; a step we stopped is complete when every rank said it
        finished its training (the warning came after the last step, and its exit code is our stop's)."""
        return (self.finished and self.asked_to_stop) or (self.exit_code == 0 and not self.asked_to_stop)

    @property
    def failed(self) -> bool:
        """A hang or a non-zero exit that nothing else explains: what Health is gathered for."""
        return not (self.bad_nodes or self.terminated or self.complete or self.signalled)


@lean_dataclass(frozen=True)
class Budget:
    """The run's counts so far (kept across requeues in run_state.py) and their bounds (None: no bound)."""

    max_restarts: int
    app_retries: int
    max_time_limit_requeues: int | None = None
    max_preemptions: int | None = None
    failures: int = 0  # restarts after a node failure, a hang or an application error
    application_failures: int = 0
    time_limit_requeues: int = 0
    preemptions: int = 0

    def bound(self, bound: Bound) -> int | None:
        return {Bound.FAILURES: self.max_restarts, Bound.TIME_LIMIT_REQUEUES: self.max_time_limit_requeues,
                Bound.PREEMPTIONS: self.max_preemptions}[bound]

    def used(self, bound: Bound) -> int:
        return int(getattr(self, bound.value))


@lean_dataclass(frozen=True)
class Health:
    """What the supervisor found after a failed step, in this order; each check runs only when the ones before it
    found nothing (health checks prove nothing on a job Slurm is tearing down)."""

    job_ending: bool = False  # Slurm is ending the job (cancel, a node it saw die)
    storage_full: str = ""  # evidence that the checkpoint storage cannot hold the next checkpoint
    free_bytes: int | None = None  # with storage_full: what is left there
    bad_nodes: NodeEvidence = ()  # nodes Slurm sees down or whose health check fails
    unreachable: tuple[str, ...] = ()  # of bad_nodes: those that did not answer


@lean_dataclass(frozen=True)
class Decision:
    kind: Kind
    action: Action
    evidence: str
    budget: Budget  # the counts after this decision: what the supervisor saves
    exit_code: int  # the supervisor's exit status when the action ends the attempt
    step_exit: int | None = None  # the step's exit code (None: the supervisor stopped it), for the record
    drain: NodeEvidence = ()  # drain these nodes with their evidence first
    down: tuple[str, ...] = ()  # of drain: mark these DOWN instead (gone: Slurm lets go of them at once)
    spent: Bound | None = None  # with BUDGET_EXHAUSTED: the bound that is reached
    free_bytes: int | None = None  # with CHECKPOINT_STORAGE_FULL
    nodes: tuple[str, ...] = ()  # with RELAUNCH: the step's nodes from now on

    @property
    def stopped(self) -> bool:
        """The supervisor ended the run itself: a resubmission of it goes on without a charge."""
        return self.action in (Action.FINISH, Action.STOP)


def charge(budget: Budget, bound: Bound) -> Budget | None:
    """`budget` with one more of `bound`'s count, or None when its bound is reached."""
    limit = budget.bound(bound)
    if limit is not None and budget.used(bound) >= limit:
        return None
    return dataclasses.replace(budget, **{bound.value: budget.used(bound) + 1})


def exhausted(budget: Budget, bound: Bound, why: str, step_exit: int | None = None, exit_code: int = 1,
              drain: NodeEvidence = (), down: tuple[str, ...] = ()) -> Decision:
    """The decision when `charge(budget, bound)` is refused."""
    evidence = f"{why}; {_BOUND_NAMES[bound]} of {budget.bound(bound)} is spent"
    return Decision(Kind.BUDGET_EXHAUSTED, Action.STOP, evidence, budget, exit_code, step_exit, drain, down,
                    spent=bound)


def warning_cause(time_left: float | None, signal_lead: float | None) -> Kind:
    """TIME_LIMIT when the warning came as close to the limit as the job asked for (within the slack), else
    PREEMPTED. Without the time left, a job that asked for a warning is taken at its word."""
    if time_left is None:
        return Kind.TIME_LIMIT if signal_lead is not None else Kind.PREEMPTED
    lead = signal_lead if signal_lead is not None else UNKNOWN_LEAD_S
    return Kind.TIME_LIMIT if time_left <= lead + WARNING_SLACK_S else Kind.PREEMPTED


def decide(outcome: Outcome, budget: Budget, health: Health) -> Decision:
    """The supervisor's choice after one try of the step. The first row that fits decides:

    outcome                           health             budget             decision                 action
    bad node beside, a spare each     -                  failures left      node_failure             drain, relaunch
    bad node found beside the step    -                  failures left      node_failure             drain, requeue
    bad node found beside the step    -                  failures spent     budget_exhausted         drain, stop
    Slurm ending the job (SIGTERM)    -                  -                  terminated               leave
    complete (Outcome.complete)       -                  -                  completed                finish
    warned, lead + 60 s or less left  -                  time limits left   time_limit               requeue
    warned, lead + 60 s or less left  -                  time limits spent  budget_exhausted         stop
    warned earlier                    -                  preemptions left   preempted                requeue
    warned earlier                    -                  preemptions spent  budget_exhausted         stop
    failed (hang or non-zero exit)    job ending         -                  terminated               leave
    failed                            storage full       -                  checkpoint_storage_full  stop
    failed, a spare per bad node      a bad node         failures left      node_failure             drain, relaunch
    failed                            a bad node         failures left      node_failure             drain, requeue
    failed                            a bad node         failures spent     budget_exhausted         drain, stop
    hung                              all nodes healthy  failures left      hang                     retry
    hung                              all nodes healthy  failures spent     budget_exhausted         stop
    non-zero exit                     all nodes healthy  app retries spent  application_error        stop
    non-zero exit                     all nodes healthy  failures left      application_error        retry
    non-zero exit                     all nodes healthy  failures spent     budget_exhausted         stop

    The lead is the one the job asked for (--signal-lead), else 900 s; a warning without the time left is the time
    limit's when the job asked for one. A count is spent when it has reached its bound (a bound of None never
    is; time limits and preemptions have bounds of their own). Every non-zero exit counts against the
    application's retries, including the one that then finds the restart budget spent. Health is looked at only
    for a failed step (Outcome.failed). With a healthy spare for each bad node of the step (Outcome.spares), the
    step is relaunched on its healthy nodes and as many spares, in the same allocation, in place of a requeue;
    like a requeue (and HyperPod's auto-resume, which counts a retry) it spends one restart. On HyperPod the
    supervised step runs without auto-resume, so that no restart happens that this table did not choose. A bad node
    that did not answer (Outcome.unreachable, Health.unreachable) is marked DOWN rather than drained: Slurm then lets go of
    it at once (a job does not sit COMPLETING on a silent node until SlurmdTimeout) and ParallelCluster's
    clustermgtd replaces a DOWN static node at its next loop.
    """
    code = outcome.exit_code
    if outcome.bad_nodes:
        return _node_failure(budget, "found beside the step: " + _joined(outcome.bad_nodes), outcome.bad_nodes,
                             code, outcome, outcome.unreachable)
    if outcome.terminated:
        return Decision(Kind.TERMINATED, Action.LEAVE, "Slurm terminated the job (cancelled, a node failed, or the "
                        "time limit); Slurm requeues it if it is requeueable", budget, code or 143, code)
    nodes = ",".join(outcome.nodes)
    if outcome.complete:
        if outcome.asked_to_stop:
            evidence = f"every rank finished its training on {nodes} before the warning stopped the step (exit {code})"
        else:
            late = "; it finished before the warning was passed on" if outcome.signalled else ""
            evidence = f"step exited 0 on {nodes}{late}"
        return Decision(Kind.COMPLETED, Action.FINISH, evidence, budget, 0, code)
    if outcome.signalled:
        cause = warning_cause(outcome.time_left, outcome.signal_lead)
        why = (f"warned {'before the time limit' if cause is Kind.TIME_LIMIT else 'of a preemption'}"
               + (f" with {outcome.time_left:.0f} s left" if outcome.time_left is not None else "")
               + f"; {outcome.saved}")
        bound = Bound.TIME_LIMIT_REQUEUES if cause is Kind.TIME_LIMIT else Bound.PREEMPTIONS
        after = charge(budget, bound)
        if after is None:
            return exhausted(budget, bound, why, code)
        return Decision(cause, Action.REQUEUE, why, after, 1, code)
    failure = outcome.hang_evidence or exit_evidence(code, outcome.log_tail)
    if health.job_ending:
        return Decision(Kind.TERMINATED, Action.LEAVE, f"{failure} while Slurm was ending the job; no node judged",
                        budget, code or 143, code)
    if health.storage_full:
        return Decision(Kind.CHECKPOINT_STORAGE_FULL, Action.STOP, f"{failure}; {health.storage_full}: a restart "
                        "would fail the same way; free space there, then resubmit", budget, code or 1, code,
                        free_bytes=health.free_bytes)
    if health.bad_nodes:
        return _node_failure(budget, f"{failure}; " + _joined(health.bad_nodes), health.bad_nodes, code, outcome,
                             health.unreachable)
    if outcome.hang_evidence:
        kind, evidence = Kind.HANG, f"{failure}; all nodes healthy: retrying the step on the same nodes"
    else:
        budget = dataclasses.replace(budget, application_failures=budget.application_failures + 1)
        times = budget.application_failures
        if times > budget.app_retries:
            return Decision(Kind.APPLICATION_ERROR, Action.STOP, f"{failure} with all nodes healthy, {times} times: "
                            "the application fails; stopping", budget, code or 1, code)
        kind, evidence = Kind.APPLICATION_ERROR, (f"{failure} with all nodes healthy: retrying the step "
                                                  f"({times} of {budget.app_retries})")
    after = charge(budget, Bound.FAILURES)
    if after is None:
        return exhausted(budget, Bound.FAILURES, failure, code, code or 1)
    return Decision(kind, Action.RETRY, evidence, after, 1, code)


def _node_failure(budget: Budget, evidence: str, bad: NodeEvidence, code: int | None, outcome: Outcome,
                  unreachable: tuple[str, ...]) -> Decision:
    """Drain the bad nodes with their evidence (mark those that did not answer DOWN), then, if the restart budget
    allows, relaunch the step on its healthy nodes and a spare for each bad one where the allocation holds enough,
    else requeue."""
    down = tuple(node for node, _ in bad if node in unreachable)
    after = charge(budget, Bound.FAILURES)
    if after is None:
        return exhausted(budget, Bound.FAILURES, evidence, code, drain=bad, down=down)
    failed = {node for node, _ in bad}
    healthy = [node for node in outcome.nodes if node not in failed]
    spares = [node for node in outcome.spares if node not in failed]
    missing = len(outcome.nodes) - len(healthy)
    if outcome.spares and len(spares) >= missing:
        nodes = (*healthy, *spares[:missing])
        return Decision(Kind.NODE_FAILURE, Action.RELAUNCH, f"{evidence}; relaunching the step on {','.join(nodes)} "
                        f"(spare {','.join(spares[:missing])}) in the same allocation", after, 1, code, bad, down,
                        nodes=nodes)
    if outcome.spares:
        evidence += f"; {len(spares)} spare(s) left for {missing} lost node(s): requeueing"
    return Decision(Kind.NODE_FAILURE, Action.REQUEUE, evidence, after, 1, code, bad, down)


def _joined(bad: NodeEvidence) -> str:
    return "; ".join(evidence for _, evidence in bad)


def exit_evidence(code: int | None, output: str) -> str:
    """'step exited N', or which rank a signal killed where the launcher's report (torchrun's failure
    summary, srun's line per task) or the return code (-N, or 128+N from a shell) says so."""
    # A SIGKILL is the cause; SIGTERMs in the same report are often torchrun's own teardown of the others.
    reports = sorted(_TORCHRUN_SIGNAL.finditer(output), key=lambda match: match["signal"] != str(int(signal.SIGKILL)))
    torchrun = reports[0] if reports else None
    srun = _SRUN_KILLED.search(output)
    if torchrun:
        number, who = int(torchrun["signal"]), f"rank {torchrun['rank']} on {torchrun['node']}"
    elif srun:
        number, who = signal.SIGKILL, f"task {srun['rank']} on {srun['node']}"
    elif code is not None and (code < 0 or 128 < code < 128 + signal.NSIG):
        number, who = abs(code) if code < 0 else code - 128, "the step"
    else:
        return f"step exited {code}"
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    hint = " (out of memory?)" if number == signal.SIGKILL else ""
    return f"{who} killed by {name}{hint}, step exited {code}"

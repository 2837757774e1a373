"""Every attempt of a job, and why each ended: Slurm's accounting, the controller, and the supervisor.

A requeue starts a new attempt under the same job id. Three sources know about attempts, and none
alone is enough: accounting (`sacct -D`) lags the controller by seconds and has been seen to lose an
attempt when two nodes failed at once; the controller (`scontrol show job`, its Restarts) knows how often the job
restarted and its current attempt, but forgets the job minutes after it ends; the supervisor (inside
supervised jobs) records each decision in the run's `decisions.jsonl`, keyed by attempt
(`JOBID.RESTART`). `merge_attempts` puts them together; the CLI's `status`, a notebook's
`handle.status()` and the watcher read the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterkit import runtime
from clusterkit.jobs.recoveries import Recovery, Try, explain, parse_tries
from clusterkit.jobs.tracking import is_final
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.providers import base
from clusterkit.slurm import AccountingRecord
from clusterkit.transport import LOCAL, Transport, read_bytes

if TYPE_CHECKING:
    from clusterkit.jobs.records import JobRecord
    from clusterkit.providers.base import Replacement

IN_PROGRESS_STATES = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUE_HOLD",
                      "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT")
NOT_IN_ACCOUNTING = "unknown"  # the state of an attempt that accounting lost
_BY_SLURM_STATE = {"COMPLETED": "completed", "NODE_FAIL": "node_failure", "BOOT_FAIL": "node_failure",
                   "TIMEOUT": "time_limit", "PREEMPTED": "preempted", "CANCELLED": "cancelled", "FAILED": "failed",
                   "OUT_OF_MEMORY": "out_of_memory"}


@lean_dataclass(frozen=True)
class Attempt:
    """One attempt of a job: Slurm's record of it and why it ended."""

    attempt: int
    state: str
    exit_code: str
    nodes: str
    start: str
    end: str
    classification: str
    # The node failures that ended or interrupted this attempt and how the run recovered from each (jobs.recoveries).
    recoveries: tuple[Recovery, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def decisions(record: JobRecord | None, transport: Transport = LOCAL) -> list[dict[str, Any]]:
    """The supervisor's decisions for a supervised job (all attempts of its run), wherever its run is."""
    if record is None or not record.run_state_dir:
        return []
    data = read_bytes(transport, Path(record.run_state_dir) / runtime.DECISIONS_FILE)
    return runtime.parse_decisions(data) if data else []


def tries(record: JobRecord | None, transport: Transport = LOCAL) -> list[Try]:
    """The supervisor's record of each try of the step (all attempts of its run), wherever its run is."""
    if record is None or not record.run_state_dir:
        return []
    data = read_bytes(transport, Path(record.run_state_dir) / runtime.TRIES_FILE)
    return parse_tries(runtime.parse_decisions(data)) if data else []


def run_state(job_id: str, state: str, made: list[dict[str, Any]]) -> str:
    """The job's state as its user needs it: Slurm's, except that a job that ended after its supervisor recorded
    that the run completed (in any attempt of this job) is COMPLETED. Slurm's state is that of its last attempt's
    batch script, which can end FAILED after the training is done; a finished run called failed would be
    restarted."""
    if state == "COMPLETED" or not is_final(state):
        return state
    if any(d.get("decision") == runtime.COMPLETED and _job_of(d) == job_id for d in made):
        return "COMPLETED"
    return state


def _job_of(decision: dict[str, Any]) -> str:
    """The job a decision was made in: its attempt id (JOBID.RESTART) less the restart."""
    return str(decision.get("attempt", "")).rpartition(".")[0]


# Pending reasons that say the job waits for nodes that are down or drained (squeue's, scontrol's words).
WAITS_FOR_NODES = ("UnavailableNodes:", "DOWN, DRAINED", "ReqNodeNotAvail")


def classify(state: str, attempt_id: str, made: list[dict[str, Any]], pending_reason: str = "",
             replacing: tuple[str, ...] = ()) -> str:
    """Why an attempt ended: the supervisor's decision where there is one, else Slurm's state. A pending
    attempt says what it waits for (Slurm's reason), since a job that can never start waits forever, and,
    where it waits for down nodes while the cluster replaces some (`replacing`), for those replacements."""
    if state == "PENDING" and pending_reason:
        if replacing and any(words in pending_reason for words in WAITS_FOR_NODES):
            waits = ", ".join(f"{node}'s replacement" for node in replacing)
            return f"pending: {pending_reason}; waiting for {waits}"
        return f"pending: {pending_reason}"
    if state in IN_PROGRESS_STATES:
        return "in progress"
    mine = [d for d in made if d.get("attempt") == attempt_id]
    if mine and mine[-1].get("decision") != runtime.TERMINATED:  # "terminated": Slurm's state says why
        return str(mine[-1]["decision"])
    if state == "REQUEUED":
        return "requeued"
    if state == NOT_IN_ACCOUNTING:
        return "requeued (not in accounting)"  # a later attempt exists: this one ended in a requeue
    return _BY_SLURM_STATE.get(state, state.lower())


def merge_attempts(job_id: str, accounting: list[AccountingRecord], controller: dict[str, str],
                   made: list[dict[str, Any]], replacements: Mapping[str, Replacement] | None = None,
                   tries: list[Try] | None = None) -> list[Attempt]:
    """Every attempt of `job_id` from accounting, the controller's view (`scontrol show job`, empty once
    it forgot the job) and the supervisor's decisions; attempts only some of them know still show.
    `replacements`: the cluster's node replacements (its provider knows): one in progress is named in a pending
    reason; `tries`: the supervisor's record of each try of the step; with both, each node failure is explained
    (jobs.recoveries)."""
    replacements = replacements or {}
    replacing = base.replacing(replacements)
    # A --no-kill job that lost a node, or was shrunk, has a RESIZING record for its part before the resize: the
    # same attempt, not one of its own.
    accounting = [record for record in accounting if record.base_state != "RESIZING"]
    restarts = int(controller["Restarts"]) if controller.get("Restarts", "").isdigit() else None
    decided = [int(index) for d in made for job, _, index in [str(d.get("attempt", "")).rpartition(".")]
               if job == job_id and index.isdigit()]
    count = max(len(accounting), restarts + 1 if restarts is not None else 0, max(decided, default=-1) + 1)
    slots: list[AccountingRecord | None] = [None] * count
    # The controller's current attempt is the accounting record that started when it did: that anchors
    # the records (a lost attempt is then a gap before them, not a shift of every later one).
    anchor = next((i for i, r in enumerate(accounting)
                   if restarts is not None and r.start and r.start == controller.get("StartTime")), None)
    offset = restarts - anchor if anchor is not None and restarts is not None and restarts >= anchor else 0
    if restarts is None:
        # Forgotten by the controller, the job has ended and accounting has caught up: its last record is the last
        # attempt, and attempts more than it knows (the supervisor's) were lost before it (a requeue that kept the
        # submit time overwrites the attempt before it).
        offset = count - len(accounting)
    for index, record in enumerate(accounting):
        slots[index + offset] = record
    if restarts is not None and slots[restarts] is None:  # accounting has not caught up with the controller
        slots[restarts] = AccountingRecord(job_id, controller.get("JobName", ""), controller.get("JobState", ""),
                                           controller.get("ExitCode", ""), controller.get("NodeList", ""),
                                           controller.get("StartTime", ""), controller.get("EndTime", ""))
    ends = {f"{job_id}.{index}": record.end for index, record in enumerate(slots) if record is not None}
    explained = explain(job_id, made, tries or [], replacements, ends)
    merged = []
    for index, record in enumerate(slots):
        attempt_id = f"{job_id}.{index}"
        mine = tuple(recovery for recovery in explained if recovery.attempt == index)
        if record is None:
            merged.append(Attempt(index, NOT_IN_ACCOUNTING, "", "", "", "", classify(NOT_IN_ACCOUNTING, attempt_id,
                                                                                       made), mine))
        else:
            reason = pending_reason(controller) if index == restarts else ""
            merged.append(Attempt(index, record.state, record.exit_code, record.node_list, record.start, record.end,
                                  classify(record.base_state, attempt_id, made, reason, replacing), mine))
    return merged


def pending_reason(controller: dict[str, str]) -> str:
    """What the controller's pending job waits for (`scontrol show job`'s Reason), '' when nothing or not
    pending. scontrol writes a reason's spaces as underscores; the node list after it is left as it is."""
    reason = controller.get("Reason", "")
    if controller.get("JobState") != "PENDING" or reason in ("", "None"):
        return ""
    text, nodes_said, nodes = reason.partition("UnavailableNodes:")
    return text.replace("_", " ") + nodes_said + nodes

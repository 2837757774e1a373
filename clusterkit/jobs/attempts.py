"""Why each attempt of a job ended: Slurm's state, refined by the supervisor's decision where there is one.

A requeue starts a new attempt under the same job id. The supervisor (inside supervised jobs)
appends each decision to the run's `decisions.jsonl` (see clusterkit.runtime), keyed by attempt
(`JOBID.RESTART`); the CLI's `status`, a notebook's `handle.status()` and the watcher read it here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterkit import runtime

if TYPE_CHECKING:
    from clusterkit.jobs.records import JobRecord
    from clusterkit.slurm import AccountingRecord

IN_PROGRESS_STATES = ("PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING", "SUSPENDED")
_BY_SLURM_STATE = {"COMPLETED": "completed", "NODE_FAIL": "node_failure", "BOOT_FAIL": "node_failure",
                   "TIMEOUT": "time_limit", "PREEMPTED": "preempted", "CANCELLED": "cancelled", "FAILED": "failed",
                   "OUT_OF_MEMORY": "out_of_memory"}


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job: Slurm's record of it and why it ended."""

    attempt: int
    state: str
    exit_code: str
    nodes: str
    start: str
    end: str
    classification: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def decisions(record: JobRecord | None) -> list[dict[str, Any]]:
    """The supervisor's decisions for a supervised job (all attempts of its run)."""
    if record is None or not record.run_state_dir:
        return []
    path = Path(record.run_state_dir) / runtime.DECISIONS_FILE
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            found.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a full disk: the others still count
    return found


def classify(attempt: AccountingRecord, attempt_index: int, record: JobRecord | None,
             made: list[dict[str, Any]] | None = None) -> str:
    """Why an attempt ended: Slurm's state, refined by the supervisor's decision where there is one."""
    state = attempt.base_state
    if state in IN_PROGRESS_STATES:
        return "in progress"
    made = decisions(record) if made is None else made
    mine = [d for d in made if d.get("attempt") == f"{attempt.job_id}.{attempt_index}"]
    if mine and mine[-1].get("decision") != runtime.TERMINATED:  # "terminated": Slurm's state says why
        return str(mine[-1]["decision"])
    return _BY_SLURM_STATE.get(state, state.lower())


def attempts(accounting: list[AccountingRecord], record: JobRecord | None) -> list[Attempt]:
    made = decisions(record)
    return [Attempt(index, a.state, a.exit_code, a.node_list, a.start, a.end, classify(a, index, record, made))
            for index, a in enumerate(accounting)]

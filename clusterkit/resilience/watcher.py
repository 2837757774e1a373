"""Outside the job: follow it across requeues, and resubmit where Slurm did not requeue.

Slurm requeues a requeueable job after a node failure by itself (the handle follows that). Where it
did not (requeue disabled, BOOT_FAIL, the job ended NODE_FAIL, or the supervisor asked for a requeue
it could not get) the watcher resubmits the same script, excluding the bad nodes, into the same
working directory: same run id and checkpoint root, so training resumes from `latest()`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.jobs import records
from clusterkit.jobs.handle import JobHandle
from clusterkit.jobs.submit import job_handle, submit_script
from clusterkit.resilience.supervisor import DECISIONS_LOG, NODE_FAILURE, TERMINATED
from clusterkit.slurm import AccountingRecord

# Ends after which the same script, rerun on other nodes, is expected to succeed.
RESUBMITTABLE = {"NODE_FAIL", "BOOT_FAIL", "TIMEOUT", "PREEMPTED"}


@dataclass
class WatchResult:
    job_ids: list[str]
    state: str
    classification: str
    resubmissions: int
    events: list[str] = field(default_factory=list)


def decisions(record: records.JobRecord | None) -> list[dict]:
    """The supervisor's decisions for a supervised job (all attempts of its run)."""
    if record is None or not record.run_state_dir:
        return []
    path = Path(record.run_state_dir) / DECISIONS_LOG
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def classify(attempt: AccountingRecord, attempt_index: int, record: records.JobRecord | None) -> str:
    """Why an attempt ended: Slurm's state, refined by the supervisor's decision where there is one."""
    state = attempt.base_state
    if state in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING", "SUSPENDED"):
        return "in progress"
    made = [d for d in decisions(record) if d.get("attempt") == f"{attempt.job_id}.{attempt_index}"]
    if made and made[-1]["decision"] != TERMINATED:  # "terminated": Slurm's state says why
        return made[-1]["decision"]
    return {"COMPLETED": "completed", "NODE_FAIL": "node_failure", "BOOT_FAIL": "node_failure",
            "TIMEOUT": "time_limit", "PREEMPTED": "preempted", "CANCELLED": "cancelled",
            "FAILED": "failed", "OUT_OF_MEMORY": "out_of_memory"}.get(state, state.lower())


def _bad_nodes(handle: JobHandle, record: records.JobRecord | None) -> list[str]:
    """Nodes of the last attempt that Slurm now sees as down, failing or drained, and those the
    supervisor found bad (sacct names the whole allocation of a NODE_FAIL, not the culprit)."""
    slurm = handle.tracker.slurm
    attempts = handle.attempts()
    nodes: set[str] = set()
    if attempts and attempts[-1].node_list:
        used = set(slurm.hostnames(attempts[-1].node_list))
        nodes.update(n.name for n in slurm.nodes() if n.name in used and
                     (not n.responding or n.base_state in ("down", "fail", "drain", "drng")))
    for decision in decisions(record):
        if decision.get("decision") == NODE_FAILURE and decision.get("job_id") == handle.job_id:
            nodes.update(decision.get("nodes", []))
    return sorted(nodes)


def watch(job_id: str, cluster: str | None = None, *, resubmit: bool = False, max_resubmits: int = 3,
          poll: float = 2.0, progress: Callable[[str], None] = lambda _: None) -> WatchResult:
    handle = job_handle(job_id, cluster)
    result = WatchResult([handle.job_id], "", "", 0)

    def say(message: str) -> None:
        result.events.append(message)
        progress(message)

    while True:
        state = handle.wait(poll=poll, progress=say)
        record = records.find(handle.cluster, handle.job_id)
        attempts = handle.attempts()
        last = attempts[-1] if attempts else None
        result.state = state
        result.classification = classify(last, len(attempts) - 1, record) if last else state.lower()
        supervisor_wanted_requeue = result.classification == NODE_FAILURE and state == "FAILED"
        if not resubmit or (state not in RESUBMITTABLE and not supervisor_wanted_requeue):
            return result
        if record is None or not record.script:
            say(f"job {handle.job_id} ended {state}; it was not submitted by clusterkit, so there is no "
                "script to resubmit")
            return result
        if result.resubmissions >= max_resubmits:
            say(f"job {handle.job_id} ended {state}; resubmission budget of {max_resubmits} spent")
            return result
        bad = _bad_nodes(handle, record)
        exclude = [f"--exclude={','.join(bad)}"] if bad else []
        replacement = records.JobRecord(job_id="", cluster=record.cluster, name=record.name, kind=record.kind,
                                        submitted="", spec_file=record.spec_file, workdir=record.workdir,
                                        run_state_dir=record.run_state_dir, resubmitted_from=handle.job_id)
        handle = submit_script(replacement, Path(record.script).read_text(), *exclude)
        result.resubmissions += 1
        result.job_ids.append(handle.job_id)
        say(f"job {result.job_ids[-2]} ended {state} ({result.classification}); resubmitted as job "
            f"{handle.job_id}" + (f" excluding {','.join(bad)}" if bad else ""))

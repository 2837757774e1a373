"""Outside the job: follow it across requeues, and resubmit where Slurm did not requeue.

Slurm requeues a requeueable job after a node failure by itself (the handle follows that). Where it
did not (requeue disabled, BOOT_FAIL, the job ended NODE_FAIL, or the supervisor asked for a requeue
it could not get) the watcher resubmits the same script, excluding the bad nodes, into the same
working directory: same run id and checkpoint root, so training resumes from `latest()`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import field
from typing import TypeVar

from clusterkit.jobs import records
from clusterkit.jobs.attempts import Attempt, decisions
from clusterkit.jobs.handle import JobHandle
from clusterkit.jobs.plan import plan_from_record
from clusterkit.jobs.submit import job_handle, submit
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.runtime import NODE_FAILURE
from clusterkit.transport import ConnectionProblem

# Ends after which the same script, rerun on other nodes, is expected to succeed.
RESUBMITTABLE = {"NODE_FAIL", "BOOT_FAIL", "TIMEOUT", "PREEMPTED"}
# A login node out of reach this long in a row (a Wi-Fi blip, a VPN reconnecting, a laptop asleep) ends the watch.
RECONNECT_FOR_S = 600.0
RECONNECT_DELAYS_S = (2.0, 5.0, 10.0, 30.0, 60.0)  # between tries, the last one repeated

T = TypeVar("T")


@lean_dataclass
class WatchResult:
    job_ids: list[str]
    state: str
    classification: str
    resubmissions: int
    events: list[str] = field(default_factory=list)


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
    for decision in decisions(record, handle.transport):
        if decision.get("decision") == NODE_FAILURE and decision.get("job_id") == handle.job_id:
            nodes.update(decision.get("nodes", []))
    return sorted(nodes)


def _riding_out_outages(ask: Callable[[], T], job_id: str, reconnect_for: float,
                        say: Callable[[str], None]) -> T:
    """`ask()`, asked again while the cluster is out of reach, for up to `reconnect_for` s of failures in a row."""
    first_failure = None
    tries = 0
    while True:
        try:
            return ask()
        except ConnectionProblem as problem:
            now = time.monotonic()
            first_failure = first_failure or now
            if now - first_failure >= reconnect_for:
                raise ConnectionProblem(f"{problem.message}, for {now - first_failure:.0f} s in a row; watching job "
                                        f"{job_id} stopped", fix=problem.fix) from None
            delay = min(RECONNECT_DELAYS_S[min(tries, len(RECONNECT_DELAYS_S) - 1)],
                        first_failure + reconnect_for - now)
            say(f"job {job_id}: {problem.message}; trying again in {delay:.0f} s")
            time.sleep(delay)
            tries += 1


def watch(job_id: str, cluster: str | None = None, *, resubmit: bool = False, max_resubmits: int = 3,
          poll: float = 2.0, progress: Callable[[str], None] = lambda _: None,
          reconnect_for: float = RECONNECT_FOR_S) -> WatchResult:
    """Follow the job to its end, resubmitting (with `resubmit`) where Slurm did not requeue. A cluster
    reached over SSH may be out of reach for `reconnect_for` s in a row; the watch goes on after."""
    handle = job_handle(job_id, cluster)
    result = WatchResult([handle.job_id], "", "", 0)

    def say(message: str) -> None:
        result.events.append(message)
        progress(message)

    def outcome(handle: JobHandle) -> tuple[str, tuple[Attempt, ...]]:
        return handle.wait(poll=poll, progress=say), handle.status().attempts

    while True:
        state, attempts = _riding_out_outages(lambda: outcome(handle), handle.job_id, reconnect_for, say)
        record = handle.record
        result.state = state
        result.classification = attempts[-1].classification if attempts else state.lower()
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
        bad = _riding_out_outages(lambda: _bad_nodes(handle, record), handle.job_id, reconnect_for, say)
        # Not asked again on a failure: sbatch may have run before the connection dropped, and a second
        # copy of the job would write the same checkpoints.
        handle = submit(plan_from_record(record).with_exclusions(bad, resubmitted_from=handle.job_id))
        result.resubmissions += 1
        result.job_ids.append(handle.job_id)
        say(f"job {result.job_ids[-2]} ended {state} ({result.classification}); resubmitted as job "
            f"{handle.job_id}" + (f" excluding {','.join(bad)}" if bad else ""))

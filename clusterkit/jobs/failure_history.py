"""A cluster's failure rate from clusterkit's own records: the failures its supervised runs met per GPU-hour.

`checkpoint_every: auto` plans the interval for a failure rate. Where the job spec gives none, the plan takes the
cluster's: over its most recent supervised runs (the job records of this cluster that keep a run state directory),
every failure a supervisor acted on (a node failure, a hang, an application error, a step ended by Slurm) over the
node-hours their tries ran (tries.jsonl: each try's nodes, its start and end). With less history than
MIN_NODE_HOURS the rate says too little, and Llama 3's is used instead. `summarize` is pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from clusterkit.jobs import records
from clusterkit.jobs.attempts import decisions, tries
from clusterkit.jobs.ledger import FAILURES
from clusterkit.jobs.recoveries import Try
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.transport import Transport

MIN_NODE_HOURS = 24.0
RECENT_RUNS = 50  # each run is two reads, over SSH two round trips


@lean_dataclass(frozen=True)
class FailureHistory:
    runs: int
    failures: int
    node_hours: float

    def per_gpu_hour(self, gpus_per_node: int) -> float | None:
        """Failures per GPU-hour, or None with too little history to tell. No failure yet is planned as one (the
        rate is at most that)."""
        if self.node_hours < MIN_NODE_HOURS:
            return None
        return max(self.failures, 1) / (self.node_hours * max(gpus_per_node, 1))

    def describe(self) -> str:
        return (f"{self.failures} failure(s) in {self.node_hours:,.1f} node-hours of {self.runs} supervised "
                f"run(s)")


def summarize(runs: Iterable[tuple[list[dict[str, Any]], list[Try]]]) -> FailureHistory:
    """Failures and node-hours over runs given as (the supervisor's decisions, the tries)."""
    count, failures, seconds = 0, 0, 0.0
    for made, tried in runs:
        count += 1
        failures += sum(1 for decision in made if decision.get("decision") in FAILURES)
        for one in tried:
            end = one.ended if one.ended is not None else one.last_time
            if one.started is not None and end is not None and end > one.started:
                seconds += (end - one.started) * len(one.nodes)
    return FailureHistory(count, failures, seconds / 3600.0)


def cluster_history(cluster: str, transport: Transport) -> FailureHistory:
    """The history of the cluster's most recent supervised runs (a run resubmitted under new job ids once)."""
    seen: set[str] = set()
    chosen = []
    for record in reversed(records.all_records(cluster)):
        if record.run_state_dir and record.run_state_dir not in seen:
            seen.add(record.run_state_dir)
            chosen.append(record)
        if len(chosen) == RECENT_RUNS:
            break
    return summarize((decisions(record, transport), tries(record, transport)) for record in chosen)

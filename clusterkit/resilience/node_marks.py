"""How clusterkit marks a node it found bad, per Slurm flavor: one pure function for the supervisor and the agent.

On stock Slurm a sick node is drained and a gone one marked DOWN, each with clusterkit's evidence as the reason
(ParallelCluster's clustermgtd replaces either). On SageMaker HyperPod the node is also marked for HyperPod's own
replacement, the way HyperPod documents it from Slurm: `State=FAIL Reason=Action:Replace`, the reason exactly that.
A gone node is marked DOWN with the evidence first, so that Slurm lets go of it at once (as on stock Slurm), then
FAIL for the replacement; the evidence stays in the supervisor's decisions and the agent's log.
"""

from __future__ import annotations

from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.slurm import REPLACE_REASON, Flavor

REASON_PREFIX = "clusterkit"  # of every reason clusterkit sets; what the next attempt reads back as its evidence
MAX_REASON = 200  # characters of evidence kept in a node's reason


@lean_dataclass(frozen=True)
class NodeMark:
    """One `scontrol update NodeName=node State=state Reason=reason`."""

    node: str
    state: str  # DOWN, DRAIN or FAIL
    reason: str


def marks_for(node: str, evidence: str, gone: bool, flavor: Flavor, who: str = REASON_PREFIX) -> tuple[NodeMark, ...]:
    """The updates that mark a bad node, in order: `gone` (it does not answer) is DOWN, else DRAIN, with
    `who: evidence` as the reason; on HyperPod a sick node is FAIL for replacement instead of drained, and a gone one
    DOWN and then FAIL."""
    reason = f"{who}: {evidence}"[:MAX_REASON]
    replace = NodeMark(node, "FAIL", REPLACE_REASON)
    if flavor is Flavor.HYPERPOD:
        return (NodeMark(node, "DOWN", reason), replace) if gone else (replace,)
    return (NodeMark(node, "DOWN" if gone else "DRAIN", reason),)


def marked_by_clusterkit(reason: str) -> bool:
    """Whether a node's reason is one clusterkit sets (its evidence, or HyperPod's replacement request)."""
    return reason.startswith(REASON_PREFIX) or reason == REPLACE_REASON

"""What every provider and every cluster offers: the CLI and notebooks call only this.

    provider = provider_named("aws")
    plan = provider.plan(ClusterRequest(name="train", preset="p4de"))   # offline: a ClusterPlan[AwsPlanDetails]
    plan = provider.prepare(plan)        # asks the world (AWS, this machine), changes nothing
    cluster = provider.apply(plan)       # the one step with effects; uses exactly what the plan holds
    cluster.describe(); cluster.resize(...); cluster.deletion(); cluster.delete()

What crosses this interface is typed: a provider's plan details and saved state are its own dataclasses
(`Provider[D, S]`), nodes are `NodeInfo` (Slurm's view) or `InstanceInfo` (EC2's), a resize returns a
`ResizeResult`. JSON appears only at the edges: `to_dict()` for --output json, `to_json()` for records.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Protocol, TypeVar, Union

from clusterkit.errors import ClusterkitError
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.registry import JsonObject

if TYPE_CHECKING:  # slurm loads when a verb talks to Slurm, not with every verb that names a cluster
    from clusterkit.providers.plan import ClusterPlan, ClusterRequest, Option, PlanDetails
    from clusterkit.registry import ClusterRecord, SavedState
    from clusterkit.slurm import Flavor, NodeInfo, Slurm

Progress = Callable[[str], None]


def quiet(_: str) -> None:
    """Progress that goes nowhere (scripts, tests)."""


@lean_dataclass(frozen=True)
class Replacement:
    """The latest replacement of one node: `booting` until its fresh node serves, then `ready`."""

    node: str
    state: str
    terminated_at: str  # ISO 8601 times, UTC
    ready_by: str  # when the boot is expected to end
    ready_at: str | None = None
    replaced_because: str = ""  # the state and reason that made it unhealthy

    @property
    def in_progress(self) -> bool:
        return self.state == "booting"


def replacing(replacements: dict[str, Replacement]) -> tuple[str, ...]:
    """The nodes whose replacement is still in progress, sorted."""
    return tuple(sorted(node for node, replacement in replacements.items() if replacement.in_progress))


@lean_dataclass(frozen=True)
class DeletionPlan:
    """What deleting a cluster removes and what it leaves; `confirm`: a person should agree first;
    `storage_deleted`: shared storage (and its files) among `deletes`, which a delete removes only
    when asked to in so many words (`delete-cluster --delete-storage`)."""

    name: str
    deletes: tuple[str, ...]
    keeps: tuple[str, ...] = ()
    confirm: bool = False
    storage_deleted: tuple[str, ...] = ()

    def to_dict(self) -> JsonObject:
        return {"name": self.name, "deletes": list(self.deletes), "keeps": list(self.keeps), "confirm": self.confirm,
                "storage_deleted": list(self.storage_deleted)}


@lean_dataclass(frozen=True)
class InstanceInfo:
    """One EC2 instance of a cluster, as its cloud sees it (`name` is the instance id)."""

    name: str
    node_type: str  # HeadNode or Compute
    queue: str | None
    instance_type: str
    state: str
    private_ip: str | None


Node = Union["NodeInfo", InstanceInfo]  # a node as Slurm sees it, or as EC2 does


def slurm_nodes(slurm: Slurm) -> tuple[NodeInfo, ...]:
    """The nodes of a cluster whose controller answers, as Slurm describes them."""
    return tuple(slurm.nodes())


@lean_dataclass(frozen=True)
class ClusterInfo:
    """`describe()`: the same shape for every provider. `details` holds, for show and for --output json, what
    only one provider has."""

    name: str
    provider: str
    status: str  # running, creating, updating, deleting, degraded, stopped, failed, gone, unknown
    created: str = ""
    nodes: tuple[Node, ...] = ()
    details: JsonObject = field(default_factory=dict)
    where: str = ""  # how to reach it, in words: "in us-east-1; head node 10.0.0.10"

    def node_rows(self) -> list[JsonObject]:
        return [dataclasses.asdict(node) for node in self.nodes]

    def to_dict(self) -> JsonObject:
        return {"name": self.name, "provider": self.provider, "status": self.status, "created": self.created,
                **self.details, "nodes": self.node_rows()}  # type: ignore[dict-item]


@lean_dataclass(frozen=True)
class ComputeResourceSize:
    name: str
    min_count: int
    max_count: int


@lean_dataclass(frozen=True)
class ResizeResult:
    """What `resize()` left: every compute resource of the resized queue and its bounds."""

    name: str
    queue: str
    compute_resources: tuple[ComputeResourceSize, ...]

    def to_dict(self) -> JsonObject:
        return {"name": self.name, "queue": self.queue,
                "compute_resources": [dataclasses.asdict(size) for size in self.compute_resources]}


class NodeAction(str, enum.Enum):
    """What a cluster's provider is asked to do to nodes named by the user."""

    REPLACE = "replace"  # new hardware in the node's place; the instance's volumes are lost
    REBOOT = "reboot"  # the same instance, started again


@lean_dataclass(frozen=True)
class NodeRequest:
    """One call a node action makes: the provider's `operation` (boto3's name) on `node_ids` of `cluster_name`."""

    operation: str
    cluster_name: str
    node_ids: tuple[str, ...]

    def to_dict(self) -> JsonObject:
        return {"operation": self.operation, "ClusterName": self.cluster_name, "NodeIds": list(self.node_ids)}


@lean_dataclass(frozen=True)
class NodeActionPlan:
    """`replace-node`/`reboot-node` before anything is asked: each node as named and the id it maps to, and the
    exact requests an apply sends (a dry run prints them)."""

    cluster: str
    action: NodeAction
    nodes: tuple[tuple[str, str], ...]  # (as the user named it, its instance id)
    requests: tuple[NodeRequest, ...]

    def to_dict(self) -> JsonObject:
        return {"cluster": self.cluster, "action": self.action.value,
                "nodes": [{"name": name, "node_id": node_id} for name, node_id in self.nodes],
                "requests": [request.to_dict() for request in self.requests]}


def cannot_act_on_nodes(cluster: str, provider: str, action: NodeAction, fix: str) -> ClusterkitError:
    """The one-line refusal of a provider that cannot replace or reboot nodes by name."""
    return ClusterkitError(f"cluster {cluster!r} is a {provider} cluster: clusterkit cannot {action.value} its nodes "
                           "by name", fix=fix)


class Cluster(Protocol):
    """A cluster known to the registry (or this machine's own Slurm)."""

    @property
    def name(self) -> str: ...

    def describe(self) -> ClusterInfo: ...

    def slurm(self) -> Slurm:
        """The Slurm that runs this cluster's jobs; a ClusterkitError with a fix when none is reachable."""
        ...

    def flavor(self) -> Flavor:
        """Whose Slurm runs its jobs: stock Slurm, or SageMaker HyperPod's (which replaces a node marked for it and
        re-runs a step started with --auto-resume=1); a job's script is rendered for it."""
        ...

    def runs_dir(self) -> str | None:
        """Where per-run directories go on the cluster when jobs are submitted from elsewhere (over
        SSH); None when the submitter's directories are the cluster's."""
        ...

    def python(self) -> str:
        """The interpreter that runs Python functions on the nodes unless told otherwise."""
        ...

    def queues(self) -> dict[str, list[str]]:
        """Partition -> the EC2 instance types its nodes are (the default partition first); empty when
        the nodes are no EC2 type clusterkit knows (a local cluster)."""
        ...

    def replacements(self) -> dict[str, Replacement]:
        """Each node's latest replacement (booting or ready), for `status` to say what a pending job waits for and
        when a failed node's replacement was ready; empty where clusterkit cannot see replacements
        (ParallelCluster's clustermgtd keeps its own)."""
        ...

    def resize(self, queue: str, max_count: int, min_count: int | None = None, compute_resource: str | None = None,
               progress: Progress = quiet) -> ResizeResult: ...

    def deletion(self) -> DeletionPlan:
        """What `delete` would remove and keep (a dry run of it)."""
        ...

    def plan_node_action(self, action: NodeAction, names: list[str]) -> NodeActionPlan:
        """The requests that replace or reboot the nodes `names` (Slurm names or instance ids); asks the provider
        which node is which, changes nothing. A provider that cannot is a ClusterkitError with the fix."""
        ...

    def act_on_nodes(self, plan: NodeActionPlan, progress: Progress = quiet) -> tuple[str, ...]:
        """Send the plan's requests; the ids being replaced or rebooted. Nodes refused are one ClusterkitError."""
        ...

    def delete(self, progress: Progress = quiet) -> None: ...


D = TypeVar("D", bound="PlanDetails")
S = TypeVar("S", bound="SavedState")


class Provider(Protocol[D, S]):
    """`D`: the provider's plan details; `S`: the state its records keep (read back with `read_state`)."""

    name: str
    options: tuple[Option, ...]  # the request fields and create-cluster flags it takes, declared once

    def plan(self, request: ClusterRequest) -> ClusterPlan[D]:
        """Everything a create would write and do, from the request alone."""
        ...

    def prepare(self, plan: ClusterPlan[D], progress: Progress = quiet) -> ClusterPlan[D]:
        """The plan checked against the world it will change (an account, this machine); changes nothing."""
        ...

    def apply(self, plan: ClusterPlan[D], progress: Progress = quiet) -> Cluster:
        """Create the cluster the prepared plan describes."""
        ...

    def read_state(self, record: ClusterRecord[JsonObject]) -> ClusterRecord[S]:
        """The record with its JSON read into this provider's state; a damaged one is a ClusterkitError."""
        ...

    def open(self, record: ClusterRecord[S]) -> Cluster: ...

"""What every provider and every cluster offers: the CLI and notebooks call only this.

    provider = provider_named("aws")
    plan = provider.plan(ClusterRequest(name="train", preset="p4de"))   # offline, changes nothing
    plan = provider.prepare(plan)        # asks the world (AWS, this machine), changes nothing
    cluster = provider.apply(plan)       # the one step with effects; uses exactly what the plan holds
    cluster.describe(); cluster.resize(...); cluster.deletion(); cluster.delete()
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any, Protocol

from clusterkit.lean_dataclass import lean_dataclass

if TYPE_CHECKING:
    from clusterkit.cluster.plan import ClusterPlan, ClusterRequest
    from clusterkit.registry import ClusterRecord
    from clusterkit.slurm import Slurm

Progress = Callable[[str], None]


def quiet(_: str) -> None:
    """Progress that goes nowhere (scripts, tests)."""


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

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "deletes": list(self.deletes), "keeps": list(self.keeps), "confirm": self.confirm,
                "storage_deleted": list(self.storage_deleted)}


@lean_dataclass(frozen=True)
class ClusterInfo:
    """`describe()`: the same shape for every provider. `details` holds what only one provider has."""

    name: str
    provider: str
    status: str  # running, creating, updating, deleting, degraded, stopped, failed, gone, unknown
    created: str = ""
    nodes: tuple[dict[str, Any], ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    where: str = ""  # how to reach it, in words: "in us-east-1; head node 10.0.0.10"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "provider": self.provider, "status": self.status, "created": self.created,
                **self.details, "nodes": [dict(node) for node in self.nodes]}


class Cluster(Protocol):
    """A cluster known to the registry (or this machine's own Slurm)."""

    @property
    def name(self) -> str: ...

    def describe(self) -> ClusterInfo: ...

    def slurm(self) -> Slurm:
        """The Slurm that runs this cluster's jobs; a ClusterkitError with a fix when none is reachable."""
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

    def resize(self, queue: str, max_count: int, min_count: int | None = None, compute_resource: str | None = None,
               progress: Progress = quiet) -> dict[str, Any]: ...

    def deletion(self) -> DeletionPlan:
        """What `delete` would remove and keep (a dry run of it)."""
        ...

    def delete(self, progress: Progress = quiet) -> None: ...


class Provider(Protocol):
    name: str

    def plan(self, request: ClusterRequest) -> ClusterPlan:
        """Everything a create would write and do, from the request alone."""
        ...

    def prepare(self, plan: ClusterPlan, progress: Progress = quiet) -> ClusterPlan:
        """The plan checked against the world it will change (an account, this machine); changes nothing."""
        ...

    def apply(self, plan: ClusterPlan, progress: Progress = quiet) -> Cluster:
        """Create the cluster the prepared plan describes."""
        ...

    def open(self, record: ClusterRecord) -> Cluster: ...

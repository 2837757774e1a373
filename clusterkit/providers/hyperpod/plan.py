"""The `hyperpod` provider's typed data: what its plan holds (`HyperPodPlanDetails`) and what its records keep
(`HyperPodClusterState`). JSON only at the edges: `plan_fields()` for --output json, `to_json`/`from_json` for the
registry.
"""

from __future__ import annotations

import json
from dataclasses import field

from clusterkit.cluster.spec import ClusterSpec
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.registry import JsonObject


@lean_dataclass(frozen=True)
class HyperPodPlanDetails:
    """A HyperPod plan: the checked spec, the exact `create_cluster` keyword arguments, and the lifecycle set apply
    uploads (s3:// URL -> local file) under `lifecycle_uri`."""

    spec: ClusterSpec | None = None
    region: str | None = None
    request: JsonObject | None = None
    lifecycle_uri: str | None = None
    uploads: dict[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.spec is not None and self.request is not None

    @property
    def document(self) -> str | None:
        """The request as JSON: what --output-config writes (`aws sagemaker create-cluster --cli-input-json`)."""
        return json.dumps(self.request, indent=2) + "\n" if self.request is not None else None

    @property
    def prerequisites_template(self) -> str | None:
        return None

    @property
    def where(self) -> str:
        return f"in {self.region}" if self.region else ""

    def notes(self) -> tuple[str, ...]:
        return ()

    def summary_lines(self) -> tuple[str, ...]:
        if self.request is None:
            return ()
        lines = []
        for group in self.request["InstanceGroups"]:  # type: ignore[union-attr]
            slurm = group["SlurmConfig"]  # type: ignore[index,call-overload]
            partition = f", partition {slurm['PartitionNames'][0]}" if slurm.get("PartitionNames") else ""  # type: ignore[union-attr,index]
            lines.append(f"# {group['InstanceGroupName']}: {group['InstanceCount']} x {group['InstanceType']} "  # type: ignore[index,call-overload]
                         f"({slurm['NodeType']}{partition})")  # type: ignore[index]
        return tuple(lines)

    def plan_fields(self) -> JsonObject:
        return {"create_cluster_request": self.request, "uploads": dict(self.uploads),  # type: ignore[dict-item]
                "details": {"region": self.region, "lifecycle_uri": self.lifecycle_uri}}


@lean_dataclass
class HyperPodClusterState:
    """What a HyperPod cluster's record keeps: where it is, its ARN, and its partitions' instance types."""

    region: str
    cluster_arn: str | None = None
    queues: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        return {"region": self.region, "cluster_arn": self.cluster_arn,
                "queues": {queue: list(types) for queue, types in self.queues.items()}}  # type: ignore[dict-item]

    @classmethod
    def from_json(cls, data: JsonObject) -> HyperPodClusterState:
        arn = data.get("cluster_arn")
        queues = data.get("queues") or {}
        return cls(region=str(data["region"]), cluster_arn=None if arn is None else str(arn),
                   queues={str(q): [str(t) for t in types] for q, types in queues.items()})  # type: ignore[union-attr]

"""The `hyperpod` provider's typed data: what its plan holds (`HyperPodPlanDetails`) and what its records keep
(`HyperPodClusterState`). JSON only at the edges: `plan_fields()` for --output json, `to_json`/`from_json` for the
registry.
"""

from __future__ import annotations

import json
from dataclasses import field

from clusterkit.cluster.spec import DEFAULT_DELETION_POLICY, ClusterSpec
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.providers.aws.plan import KeptStack
from clusterkit.registry import JsonObject


@lean_dataclass(frozen=True)
class HyperPodPlanDetails:
    """A HyperPod plan: the checked spec, the exact `create_cluster` keyword arguments, the exact
    `fsx.create_file_system` ones for a new FSx for Lustre, and the lifecycle set apply uploads (s3:// URL -> local
    file) under `lifecycle_uri`."""

    spec: ClusterSpec | None = None
    region: str | None = None
    request: JsonObject | None = None
    lifecycle_uri: str | None = None
    uploads: dict[str, str] = field(default_factory=dict)
    execution_role: str | None = None
    parameters_text: str | None = None  # clusterkit-lifecycle.json, one file of the set
    prepared: PreparedFacts | None = None  # None until the account was asked
    file_system_request: JsonObject | None = None  # None: the spec mounts an existing file system, or none
    identity_file: str | None = None  # the SSH key for the controller (else the user's agent and ssh config)

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
        if self.prepared is None:
            return ()
        where = self.prepared.vpc_id or f"the new network of prerequisites stack {self.prepared.network_stack}"
        return (f"account {self.prepared.account}; nodes in {where}",
                *((f"file system {self.prepared.lustre_dns_name}",) if self.prepared.lustre_dns_name else ()))

    def summary_lines(self) -> tuple[str, ...]:
        if self.request is None:
            return ()
        lines = []
        fsx = self.file_system_request
        if fsx is not None:
            lustre: dict = fsx["LustreConfiguration"]  # type: ignore[assignment]
            throughput = lustre.get("PerUnitStorageThroughput")
            lines.append(f"# new FSx for Lustre: {fsx['StorageCapacity']} GiB {lustre['DeploymentType']}"
                         + (f", {throughput} MB/s per TiB" if throughput else ""))
        for group in self.request["InstanceGroups"]:  # type: ignore[union-attr]
            slurm: dict = group["SlurmConfig"]  # type: ignore[index,call-overload]
            partition = f", partition {slurm['PartitionNames'][0]}" if slurm.get("PartitionNames") else ""
            count, kind = group["InstanceCount"], group["InstanceType"]  # type: ignore[index,call-overload]
            lines.append(f"# {group['InstanceGroupName']}: {count} x {kind} "  # type: ignore[index,call-overload]
                         f"({slurm['NodeType']}{partition})")
        return tuple(lines)

    def plan_fields(self) -> JsonObject:
        details: JsonObject = {"region": self.region, "lifecycle_uri": self.lifecycle_uri}
        if self.prepared is not None:
            details.update(prepared=True, **self.prepared.to_json())
        if self.region is not None:
            from clusterkit.providers.hyperpod.controller import planned_access

            details["controller_access"] = planned_access(self.region, self.identity_file)
        return {"create_cluster_request": self.request,
                "create_file_system_request": self.file_system_request,
                "uploads": dict(self.uploads), "details": details}  # type: ignore[dict-item]


@lean_dataclass(frozen=True)
class PreparedFacts:
    """What preparing learnt from the account: who asked, the nodes' VPC (apply makes their security group in it),
    the file system's DNS name, whether the lifecycle bucket must be made, and clusterkit's prerequisites network
    when no subnet was given: `network_stack` in `network_zone`, made by apply when `create_network` (the nodes' VPC
    is then known only once it exists), else made earlier and reused."""

    account: str
    caller: str
    vpc_id: str
    create_bucket: bool = False
    lustre_dns_name: str | None = None
    network_stack: str | None = None
    network_zone: str | None = None
    create_network: bool = False

    def to_json(self) -> JsonObject:
        return {"account": self.account, "caller": self.caller, "vpc_id": self.vpc_id,
                "create_bucket": self.create_bucket, "lustre_dns_name": self.lustre_dns_name,
                "network_stack": self.network_stack, "network_zone": self.network_zone,
                "create_network": self.create_network}


@lean_dataclass
class HyperPodClusterState:
    """What a HyperPod cluster's record keeps: where it is, its ARN, the request it was made with (its groups, for
    resizing), the security group clusterkit made for it, what it mounts (`lustre_created`: the file system was made
    by this cluster's create, and goes with the cluster only when `lustre_deletion_policy` is Delete), and its
    partitions' instance types."""

    region: str
    request_file: str
    cluster_arn: str | None = None
    security_group_id: str | None = None
    lustre_file_system_id: str | None = None
    lustre_created: bool = False
    lustre_deletion_policy: str = DEFAULT_DELETION_POLICY
    lifecycle_uri: str | None = None
    queues: dict[str, list[str]] = field(default_factory=dict)
    prerequisites: KeptStack | None = None  # clusterkit's prerequisites network the nodes are in, when it chose it
    identity_file: str | None = None  # the SSH key for the controller, as given at create

    def to_json(self) -> JsonObject:
        return {"region": self.region, "request_file": self.request_file, "cluster_arn": self.cluster_arn,
                "security_group_id": self.security_group_id, "lustre_file_system_id": self.lustre_file_system_id,
                "lustre_created": self.lustre_created, "lustre_deletion_policy": self.lustre_deletion_policy,
                "lifecycle_uri": self.lifecycle_uri,
                "queues": {queue: list(types) for queue, types in self.queues.items()},  # type: ignore[dict-item]
                "prerequisites": self.prerequisites.to_json() if self.prerequisites else None,
                "identity_file": self.identity_file}

    @classmethod
    def from_json(cls, data: JsonObject) -> HyperPodClusterState:
        def text(key: str) -> str | None:
            value = data.get(key)
            return None if value is None else str(value)

        queues = data.get("queues") or {}
        prerequisites = data.get("prerequisites")
        return cls(region=str(data["region"]), request_file=str(data["request_file"]), cluster_arn=text("cluster_arn"),
                   security_group_id=text("security_group_id"), lustre_file_system_id=text("lustre_file_system_id"),
                   lustre_created=data.get("lustre_created") is True,
                   lustre_deletion_policy=text("lustre_deletion_policy") or DEFAULT_DELETION_POLICY,
                   lifecycle_uri=text("lifecycle_uri"),
                   queues={str(q): [str(t) for t in types] for q, types in queues.items()},  # type: ignore[union-attr]
                   prerequisites=KeptStack.from_json(prerequisites) if isinstance(prerequisites, dict) else None,
                   identity_file=text("identity_file"))

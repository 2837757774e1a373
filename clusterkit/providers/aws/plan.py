"""The `aws` provider's typed data: what its plan holds (`AwsPlanDetails`) and what its records keep
(`AwsClusterState`). JSON only at the edges: `plan_fields()` for --output json, `to_json`/`from_json` for
the registry.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING

from clusterkit.cluster.prerequisites import Prerequisites
from clusterkit.cluster.spec import ClusterSpec
from clusterkit.cluster.summary import ClusterSummary
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.registry import JsonObject, JsonValue

if TYPE_CHECKING:  # a dry run loads no transport
    from clusterkit.transport import SshTarget


@lean_dataclass(frozen=True)
class StackPlan:
    """clusterkit's prerequisites stack for the cluster: what it holds and, once prepared, which stack it is and
    whether apply creates it (`template` and `parameters`) or uses one made earlier."""

    network: bool
    database: bool
    template: str | None = None  # the CloudFormation template, when apply may create it
    stack: str | None = None  # prepared: its name
    create: bool = False  # prepared: apply creates it
    parameters: dict[str, str] = field(default_factory=dict)

    @property
    def holds(self) -> Prerequisites:
        return Prerequisites(network=self.network, database=self.database)

    @property
    def makes(self) -> str:
        return ", ".join(part for part, wanted in (("network", self.network),
                                                   ("accounting database", self.database)) if wanted)

    def to_json(self) -> JsonObject:
        data: JsonObject = {"network": self.network, "database": self.database}
        if self.template is not None:
            data.update(makes=self.makes, template=self.template)
        data["cost_per_hour"] = dict(self.holds.cost_per_hour())  # type: ignore[arg-type]
        if self.stack is not None:
            data.update(stack=self.stack, create=self.create)
            if self.create:
                data["parameters"] = dict(self.parameters)  # type: ignore[arg-type]
        return data


@lean_dataclass(frozen=True)
class AccountFacts:
    """What `prepare` learnt from the account: who asked, where, and what resolution chose."""

    region: str
    account: str
    caller: str  # the caller's ARN
    chosen: dict[str, str] = field(default_factory=dict)  # e.g. subnet_id, availability_zone, image_id
    create_scripts_bucket: bool = False  # apply makes the node-scripts bucket before uploading


@lean_dataclass(frozen=True)
class AwsPlanDetails:
    """An AWS plan: the checked spec, its ParallelCluster config and that config's text, the node scripts apply
    uploads, the prerequisites stack, the head node's SSH key, and (once prepared) what the account told."""

    spec: ClusterSpec | None = None
    config: JsonObject | None = None
    config_text: str | None = None
    summary: ClusterSummary | None = None
    uploads: dict[str, str] = field(default_factory=dict)  # s3:// URL -> clusterkit node script apply uploads
    identity_file: str | None = None
    prerequisites: StackPlan | None = None
    account: AccountFacts | None = None  # None until prepared

    @property
    def complete(self) -> bool:
        return self.spec is not None and self.config_text is not None

    @property
    def document(self) -> str | None:
        return self.config_text

    @property
    def prerequisites_template(self) -> str | None:
        return self.prerequisites.template if self.prerequisites else None

    @property
    def where(self) -> str:
        region = self.account.region if self.account else self.spec.region if self.spec else None
        return f"in {region}" if region else ""

    def notes(self) -> tuple[str, ...]:
        return tuple(f"chose {key}: {value}" for key, value in (self.account.chosen if self.account else {}).items())

    def summary_lines(self) -> tuple[str, ...]:
        return tuple(self.summary.lines()) if self.summary else ()

    def plan_fields(self) -> JsonObject:
        details: JsonObject = {}
        if self.identity_file:
            details["identity_file"] = self.identity_file
        if self.prerequisites is not None or self.account is not None:
            details["prerequisites"] = self.prerequisites.to_json() if self.prerequisites else None
        if self.account is not None:
            details.update(prepared=True, region=self.account.region, account=self.account.account,
                           caller=self.account.caller, chosen=dict(self.account.chosen),  # type: ignore[arg-type]
                           create_scripts_bucket=self.account.create_scripts_bucket)
        return {"config": self.config, "config_text": self.config_text,
                "summary": self.summary.to_dict() if self.summary else None,  # type: ignore[dict-item]
                "uploads": dict(self.uploads), "details": details}  # type: ignore[dict-item]


@lean_dataclass
class KeptStack:
    """The prerequisites stack a cluster's record names: whether its create made it, and what it holds."""

    stack: str
    created: bool
    network: bool = False
    database: bool = False
    cost_per_hour: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        return {"stack": self.stack, "created": self.created, "network": self.network, "database": self.database,
                "cost_per_hour": dict(self.cost_per_hour)}  # type: ignore[dict-item]

    @classmethod
    def from_json(cls, data: JsonObject) -> KeptStack:
        costs = data.get("cost_per_hour") or {}
        return cls(stack=str(data["stack"]), created=bool(data.get("created")), network=bool(data.get("network")),
                   database=bool(data.get("database")),
                   cost_per_hour={str(k): float(v) for k, v in costs.items()})  # type: ignore[union-attr,arg-type]


@lean_dataclass
class AwsClusterState:
    """What an AWS cluster's record keeps: where its stack is, its config file, what its create chose and made,
    and how to reach its head node (`ssh`, once known)."""

    region: str
    config_file: str
    stack_id: str | None = None  # None until ParallelCluster's create returned it
    stack_name: str | None = None  # None: the cluster's name
    account: str | None = None
    chosen: dict[str, str] = field(default_factory=dict)
    queues: dict[str, list[str]] | None = None  # None: a record from before queues were kept in it
    os: str | None = None
    key_name: str | None = None
    identity_file: str | None = None
    shared_dir: str | None = None
    prerequisites: KeptStack | None = None
    ssh: SshTarget | None = None

    def to_json(self) -> JsonObject:
        queues: JsonValue = ({queue: list(types) for queue, types in self.queues.items()}  # type: ignore[misc]
                             if self.queues is not None else None)
        return {"region": self.region, "stack_name": self.stack_name, "stack_id": self.stack_id,
                "config_file": self.config_file, "account": self.account,
                "chosen": dict(self.chosen), "queues": queues, "os": self.os,  # type: ignore[dict-item]
                "key_name": self.key_name, "identity_file": self.identity_file, "shared_dir": self.shared_dir,
                "prerequisites": self.prerequisites.to_json() if self.prerequisites else None,
                "ssh": self.ssh.to_dict() if self.ssh else None}  # type: ignore[dict-item]

    @classmethod
    def from_json(cls, data: JsonObject) -> AwsClusterState:
        from clusterkit.transport import SshTarget

        def text(key: str) -> str | None:
            value = data.get(key)
            return None if value is None else str(value)

        queues, prerequisites, ssh = data.get("queues"), data.get("prerequisites"), data.get("ssh")
        return cls(region=str(data["region"]), config_file=str(data["config_file"]), stack_id=text("stack_id"),
                   stack_name=text("stack_name"), account=text("account"),
                   chosen={str(k): str(v) for k, v in (data.get("chosen") or {}).items()},  # type: ignore[union-attr]
                   queues=({str(q): [str(t) for t in types] for q, types in queues.items()}  # type: ignore[union-attr]
                           if isinstance(queues, dict) else None),
                   os=text("os"), key_name=text("key_name"), identity_file=text("identity_file"),
                   shared_dir=text("shared_dir"),
                   prerequisites=KeptStack.from_json(prerequisites) if isinstance(prerequisites, dict) else None,
                   ssh=SshTarget.from_dict(ssh) if isinstance(ssh, dict) else None)  # type: ignore[arg-type]

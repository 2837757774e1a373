"""The cluster spec: a short description of a training cluster, as dataclasses.

Field names are the spec's YAML keys, so a finding's path (`queues[0].compute[1].instance_type`)
is the same in Python and in the user's file. `None` means "not set": renderers and validators
then apply the documented default, and a rule can still tell a value the user chose from a default.

Annotations here are types, not strings (no `from __future__ import annotations`): the spec reader needs
the types, and turning strings back into types compiles each one, milliseconds at every CLI start.
"""

from dataclasses import field
from typing import Any

from clusterkit import catalog, offerings
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.spec_reader import ValueProblem, field_options, is_mapping, text_of

PARALLELCLUSTER_VERSION = "3.16"
DEFAULT_OS = "ubuntu2204"
DEFAULT_REGION = "us-east-1"
DEFAULT_HEAD_NODE_TYPE = "c5.9xlarge"
# Without an explicit CIDR, SSH is reachable only from private (RFC 1918 10/8) addresses: never the world.
DEFAULT_SSH_CIDR = "10.0.0.0/8"
DEFAULT_MIN_COUNT = 0
DEFAULT_MAX_COUNT = 10
DEFAULT_LUSTRE_DEPLOYMENT = "PERSISTENT_2"
DEFAULT_LUSTRE_CAPACITY_GIB = 1200
DEFAULT_LUSTRE_THROUGHPUT = 250  # MB/s per TiB, for PERSISTENT_* only
# Storage the cluster creates outlives it unless the spec says Delete: checkpoints live on /fsx.
DEFAULT_DELETION_POLICY = "Retain"
# ParallelCluster mounts the instance-store NVMe here; enroot's data belongs there, not on the root volume.
EPHEMERAL_MOUNT_DIR = "/scratch"
# Where shared storage is mounted when the spec has none: ParallelCluster shares /home from the head node.
DEFAULT_SHARED_DIR = "/home"
# Where enroot keeps its data on nodes without instance storage (head node, CPU queues).
ROOT_VOLUME_ENROOT_DIR = "/var/enroot"
# AWS-managed policies every node role gets unless the spec names its own: SSM Session Manager (reach
# nodes without an SSH key or an open port) and read-only ECR (pull training images).
DEFAULT_NODE_POLICIES = ("AmazonSSMManagedInstanceCore", "AmazonEC2ContainerRegistryReadOnly")
# The bucket clusterkit uploads its node scripts to when the spec names none; ACCOUNT is filled in at create.
DEFAULT_SCRIPTS_BUCKET = "clusterkit-{account}-{region}"
# `network`: clusterkit's prerequisites stack (a VPC with a public and a private subnet, NAT, S3 endpoint), or the
# spec's subnets (else the default VPC's). None: create it when no subnet is given and the account has no private
# subnet where the nodes can run.
NETWORK_CREATE = "create"
NETWORK_EXISTING = "existing"
NETWORK_MODES = (NETWORK_CREATE, NETWORK_EXISTING)


@lean_dataclass
class PlacementGroupSpec:
    """A placement group: on or off (None: on, except for reserved capacity), or an existing one by name or id."""

    enabled: bool | None = None
    name: str | None = None
    id: str | None = None


@lean_dataclass
class IamSpec:
    """Extra permissions of a node role. `None`: DEFAULT_NODE_POLICIES; `[]`: none at all."""

    additional_policies: list[str] | None = None  # policy ARNs, or names of AWS-managed policies

    @property
    def effective_policies(self) -> list[str]:
        return list(DEFAULT_NODE_POLICIES) if self.additional_policies is None else list(self.additional_policies)


@lean_dataclass
class ComputeSpec:
    """One compute resource of a queue: an instance type, its node counts, EFA and reservations."""

    name: str
    instance_type: str
    min_count: int | None = None  # static nodes (always on)
    max_count: int | None = None  # static + dynamic nodes
    efa: bool | None = None  # None: on when the instance type has EFA
    capacity_reservation_id: str | None = None
    capacity_reservation_resource_group_arn: str | None = None  # an EC2 resource group of reservations (ODCR)
    placement_group: PlacementGroupSpec | None = None  # overrides the queue's
    disable_hyperthreading: bool | None = None
    slurm_settings: dict[str, str] = field(default_factory=dict)  # node-level slurm.conf keys, e.g. Sockets

    @property
    def effective_min_count(self) -> int:
        return DEFAULT_MIN_COUNT if self.min_count is None else self.min_count

    @property
    def effective_max_count(self) -> int:
        return DEFAULT_MAX_COUNT if self.max_count is None else self.max_count

    @property
    def instance(self) -> catalog.InstanceType | None:
        """The catalog's entry (a curated type: its figures and price); None for any other type."""
        return catalog.find_instance_type(self.instance_type)

    @property
    def facts(self) -> catalog.InstanceType | None:
        """The type's facts, for every type in EC2's table (a curated one's are its catalog entry)."""
        return offerings.table().facts(self.instance_type)

    @property
    def efa_enabled(self) -> bool:
        if self.efa is not None:
            return self.efa
        facts = self.facts
        return bool(facts and facts.efa)

    @property
    def reserved(self) -> bool:
        return self.capacity_reservation_id is not None or self.capacity_reservation_resource_group_arn is not None


@lean_dataclass
class ScriptSpec:
    """A custom action: a script (https:// or s3:// URL) and its arguments."""

    script: str
    args: list[str] = field(default_factory=list)


@lean_dataclass
class CustomActionsSpec:
    """The scripts ParallelCluster runs on a node at start, once configured, and after an update."""

    on_node_start: list[ScriptSpec] = field(default_factory=list)
    on_node_configured: list[ScriptSpec] = field(default_factory=list)
    on_node_updated: list[ScriptSpec] = field(default_factory=list)


@lean_dataclass
class QueueSpec:
    """A Slurm queue (partition): its compute resources, capacity type, subnets and node settings."""

    name: str
    compute: list[ComputeSpec]
    capacity_type: str = "ONDEMAND"  # ONDEMAND, SPOT or CAPACITY_BLOCK
    subnet_ids: list[str] = field(default_factory=list)  # empty: the cluster's subnet_id
    placement_group: PlacementGroupSpec | None = None
    exclusive: bool | None = None  # Slurm JobExclusiveAllocation
    root_volume_gb: int | None = None
    custom_actions: CustomActionsSpec | None = None
    iam: IamSpec = field(default_factory=IamSpec)
    gpu_health_checks: bool | None = None  # None: on when every compute resource has GPUs

    def instance_facts(self) -> list[catalog.InstanceType]:
        """The facts of the queue's instance types that exist (unknown types are a rule's business)."""
        return [facts for facts in (compute.facts for compute in self.compute) if facts is not None]

    @property
    def gpu_health_checks_enabled(self) -> bool:
        if self.gpu_health_checks is not None:
            return self.gpu_health_checks
        facts = self.instance_facts()
        return bool(facts) and len(facts) == len(self.compute) and all(f.accelerator == "gpu" for f in facts)


def uses_reserved_capacity(queue: QueueSpec, compute: ComputeSpec) -> bool:
    """Capacity Blocks and (AWS-delivered) reservations: capacity that is not in our placement group."""
    return queue.capacity_type == "CAPACITY_BLOCK" or compute.reserved


@lean_dataclass
class HeadNodeSpec:
    """The head node: slurmctld, the shared directories and where jobs are submitted."""

    instance_type: str = DEFAULT_HEAD_NODE_TYPE
    root_volume_gb: int = 200
    subnet_id: str | None = None  # None: the cluster's subnet_id (a public subnet here, private queues: fine)
    # Security groups the head node joins besides ParallelCluster's own (e.g. a database's client group).
    additional_security_groups: list[str] = field(default_factory=list)
    custom_actions: CustomActionsSpec | None = None
    iam: IamSpec = field(default_factory=IamSpec)


@lean_dataclass
class LoginNodesSpec:
    """A pool of login nodes: where people ssh to and submit from, so the head node is left to Slurm."""

    name: str
    instance_type: str
    count: int = 1
    subnet_id: str | None = None  # None: the head node's subnet
    iam: IamSpec = field(default_factory=IamSpec)


@lean_dataclass
class ImageSpec:
    """The nodes' image: ParallelCluster's official AMI for `os`, or a custom one."""

    # An AMI id (ami-...) or name. A name is looked up at create (the newest available image of that name);
    # a dry run writes a placeholder id and says so. Rocky Linux needs one: ParallelCluster publishes none.
    custom_ami: str | None = None


@lean_dataclass
class SshSpec:
    """SSH to the head node: the EC2 key pair and who may connect."""

    key_name: str | None = None
    allowed_cidr: str | None = None  # None: DEFAULT_SSH_CIDR


@lean_dataclass
class DataRepositoryAssociationSpec:
    """A link between a path of an FSx for Lustre file system and an S3 prefix."""

    name: str
    file_system_path: str
    data_repository_path: str
    batch_import_metadata_on_create: bool = False
    imported_file_chunk_size: int | None = None
    auto_import_policy: list[str] = field(default_factory=list)  # NEW, CHANGED, DELETED
    auto_export_policy: list[str] = field(default_factory=list)


@lean_dataclass
class LustreSpec:
    """FSx for Lustre: a new file system, or an existing one by `file_system_id`."""

    name: str = "fsx"
    mount_dir: str = "/fsx"
    file_system_id: str | None = None
    deployment_type: str | None = None
    storage_capacity_gib: int | None = None
    per_unit_storage_throughput: int | None = None
    data_compression: str | None = None
    import_path: str | None = None
    export_path: str | None = None
    auto_import_policy: str | None = None
    imported_file_chunk_size: int | None = None
    data_repository_associations: list[DataRepositoryAssociationSpec] = field(default_factory=list)
    deletion_policy: str | None = None  # None: DEFAULT_DELETION_POLICY (Retain); Delete removes it with the cluster

    @property
    def is_new(self) -> bool:
        return self.file_system_id is None

    @property
    def effective_deployment_type(self) -> str:
        return self.deployment_type or DEFAULT_LUSTRE_DEPLOYMENT

    @property
    def effective_capacity_gib(self) -> int:
        return self.storage_capacity_gib or DEFAULT_LUSTRE_CAPACITY_GIB

    @property
    def effective_throughput(self) -> int | None:
        if not self.effective_deployment_type.startswith("PERSISTENT"):
            return self.per_unit_storage_throughput
        return self.per_unit_storage_throughput or DEFAULT_LUSTRE_THROUGHPUT


@lean_dataclass
class EfsSpec:
    """Amazon EFS, e.g. for /home: a new encrypted file system or an existing one."""

    name: str = "home"
    mount_dir: str = "/home"
    file_system_id: str | None = None
    throughput_mode: str | None = None  # bursting (EFS's default) or provisioned
    provisioned_throughput: int | None = None  # MiB/s, 1-1024; required with throughput_mode: provisioned
    deletion_policy: str | None = None  # None: DEFAULT_DELETION_POLICY (Retain)

    @property
    def is_new(self) -> bool:
        return self.file_system_id is None


@lean_dataclass
class OpenZfsSpec:
    """An existing FSx for OpenZFS volume (ParallelCluster mounts it, never creates it)."""

    volume_id: str
    name: str = "home"
    mount_dir: str = "/home"


@lean_dataclass
class EbsSpec:
    """An EBS volume mounted on the head node and shared with the compute nodes over NFS."""

    name: str
    mount_dir: str
    size_gib: int | None = None  # None: ParallelCluster's 35 GiB (st1 and sc1 need 500 or more)
    volume_type: str = "gp3"
    volume_id: str | None = None  # an existing volume
    deletion_policy: str | None = None  # new volumes: None is DEFAULT_DELETION_POLICY; Delete, Retain or Snapshot

    @property
    def is_new(self) -> bool:
        return self.volume_id is None


@lean_dataclass
class StorageSpec:
    """The shared file systems, by kind; each names its mount directory."""

    lustre: list[LustreSpec] = field(default_factory=list)
    efs: list[EfsSpec] = field(default_factory=list)
    openzfs: list[OpenZfsSpec] = field(default_factory=list)
    ebs: list[EbsSpec] = field(default_factory=list)


@lean_dataclass
class PyxisSpec:
    """pyxis and enroot, which ParallelCluster (>= 3.11) ships disabled, enabled by clusterkit's node script."""

    enabled: bool = True
    # Where enroot keeps container data on nodes with instance storage; others use ROOT_VOLUME_ENROOT_DIR.
    enroot_dir: str = f"{EPHEMERAL_MOUNT_DIR}/enroot"


@lean_dataclass
class NeuronSpec:
    """The Neuron driver, runtime and tools on Trainium/Inferentia nodes (ParallelCluster's AMIs carry none).

    None: installed on queues whose instances have Neuron devices, unless the cluster boots a custom AMI."""

    install: bool | None = None


@lean_dataclass
class DockerSpec:
    """The Docker engine on the compute nodes, and NVIDIA's container toolkit on GPU queues, for `runtime: docker`
    jobs (ParallelCluster's AMIs carry neither). Installed by clusterkit's node script on Ubuntu.

    None: installed on every queue of an Ubuntu cluster, unless it boots a custom AMI (which brings its own)."""

    install: bool | None = None


ACCOUNTING_CREATE = "create"
ACCOUNTING_NONE = "none"


def _accounting_short_form(value: Any) -> Any:
    """`accounting: create` (a database in clusterkit's prerequisites stack) and `accounting: none`."""
    if is_mapping(value):
        return value
    text = text_of(value)
    if text == ACCOUNTING_CREATE:
        return {"create": True}
    if text == ACCOUNTING_NONE:
        return None
    raise ValueProblem(f"accounting is `{ACCOUNTING_CREATE}`, `{ACCOUNTING_NONE}` or an existing database",
                       fix="write create, none, or {uri: HOST:PORT, user_name: NAME, password_secret_arn: ARN}")


@lean_dataclass
class AccountingSpec:
    """Slurm accounting database; the password lives in Secrets Manager, never in the config.

    Either an existing database (uri, user_name, password_secret_arn), or `create: true` (YAML: `accounting:
    create`): a small encrypted RDS for MySQL in clusterkit's prerequisites stack, reachable from the head node only,
    its password generated into Secrets Manager. Creating fills in the three fields from the stack's outputs."""

    uri: str | None = None  # host:port, no scheme
    user_name: str | None = None
    password_secret_arn: str | None = None
    create: bool = False

    @property
    def pending(self) -> bool:
        """A database clusterkit will create and whose address is not known yet."""
        return self.create and self.uri is None


@lean_dataclass
class SlurmSpec:
    """Slurm settings: scaling down, queue updates, requeue, slurm.conf keys and accounting."""

    scaledown_idletime: int | None = None  # minutes; ParallelCluster's default is 10
    queue_update_strategy: str | None = None  # DRAIN, COMPUTE_FLEET_STOP or TERMINATE
    # Requeue on node failure keeps the job id so a training run resumes from its checkpoint.
    job_requeue: bool = True
    custom_settings: dict[str, str] = field(default_factory=dict)
    # None (YAML: absent or `none`): no accounting database.
    accounting: AccountingSpec | None = field(default=None, metadata=field_options(short=_accounting_short_form))


@lean_dataclass
class ClusterkitSpec:
    """clusterkit itself on the nodes: a node action on the head node installs it into a virtualenv on shared
    storage, whose Python then runs jobs' supervisor."""

    install: bool = True
    package: str | None = None  # what pip installs; None: this clusterkit's version from the package index


@lean_dataclass
class MonitoringSpec:
    """CloudWatch: detailed monitoring, logs and their retention, the dashboard."""

    detailed_monitoring: bool = False
    cloudwatch_logs: bool = True
    log_retention_days: int = 30
    dashboard: bool = True


@lean_dataclass
class ClusterSpec:
    """A whole cluster as a user writes it; `plan_spec` turns it into a ParallelCluster config."""

    name: str
    queues: list[QueueSpec]
    region: str = DEFAULT_REGION
    os: str = DEFAULT_OS
    image: ImageSpec = field(default_factory=ImageSpec)
    subnet_id: str | None = None  # head node, and queues without their own subnet_ids
    network: str | None = None  # NETWORK_MODES; None: chosen at create (see NETWORK_CREATE)
    head_node: HeadNodeSpec = field(default_factory=HeadNodeSpec)
    login_nodes: list[LoginNodesSpec] = field(default_factory=list)
    ssh: SshSpec = field(default_factory=SshSpec)
    storage: StorageSpec = field(default_factory=StorageSpec)
    pyxis: PyxisSpec = field(default_factory=PyxisSpec)
    neuron: NeuronSpec = field(default_factory=NeuronSpec)
    docker: DockerSpec = field(default_factory=DockerSpec)
    slurm: SlurmSpec = field(default_factory=SlurmSpec)
    monitoring: MonitoringSpec = field(default_factory=MonitoringSpec)
    clusterkit: ClusterkitSpec = field(default_factory=ClusterkitSpec)
    # Where clusterkit uploads its node scripts at create; None: DEFAULT_SCRIPTS_BUCKET of the account.
    scripts_bucket: str | None = None
    tags: dict[str, str] = field(default_factory=dict)

    def queue_subnets(self, queue: QueueSpec) -> list[str]:
        if queue.subnet_ids:
            return list(queue.subnet_ids)
        return [self.subnet_id] if self.subnet_id else []

    def head_subnet(self) -> str | None:
        return self.head_node.subnet_id or self.subnet_id

    @property
    def has_accounting(self) -> bool:
        return self.slurm.accounting is not None

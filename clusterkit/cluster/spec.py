"""The cluster spec: a short description of a training cluster, as dataclasses.

Field names are the spec's YAML keys, so a finding's path (`queues[0].compute[1].instance_type`)
is the same in Python and in the user's file. `None` means "not set": renderers and validators
then apply the documented default, and a rule can still tell a value the user chose from a default.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clusterkit import catalog

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
# Public post-install script from aws-samples that enables the pyxis/enroot shipped (disabled) since 3.11.
DEFAULT_PYXIS_SCRIPT = (
    "https://raw.githubusercontent.com/aws-samples/aws-parallelcluster-post-install-scripts/main/pyxis/postinstall.sh"
)
# ParallelCluster mounts the instance-store NVMe here; enroot's data belongs there, not on the root volume.
EPHEMERAL_MOUNT_DIR = "/scratch"


@dataclass
class PlacementGroupSpec:
    enabled: bool | None = None
    name: str | None = None
    id: str | None = None


@dataclass
class ComputeSpec:
    name: str
    instance_type: str
    min_count: int | None = None  # static nodes (always on)
    max_count: int | None = None  # static + dynamic nodes
    efa: bool | None = None  # None: on when the instance type has EFA
    capacity_reservation_id: str | None = None
    placement_group: PlacementGroupSpec | None = None  # overrides the queue's
    disable_hyperthreading: bool | None = None

    @property
    def effective_min_count(self) -> int:
        return DEFAULT_MIN_COUNT if self.min_count is None else self.min_count

    @property
    def effective_max_count(self) -> int:
        return DEFAULT_MAX_COUNT if self.max_count is None else self.max_count

    @property
    def instance(self) -> catalog.InstanceType | None:
        return catalog.find_instance_type(self.instance_type)

    @property
    def efa_enabled(self) -> bool:
        if self.efa is not None:
            return self.efa
        instance = self.instance
        return bool(instance and instance.efa)


@dataclass
class ScriptSpec:
    script: str
    args: list[str] = field(default_factory=list)


@dataclass
class CustomActionsSpec:
    on_node_start: list[ScriptSpec] = field(default_factory=list)
    on_node_configured: list[ScriptSpec] = field(default_factory=list)
    on_node_updated: list[ScriptSpec] = field(default_factory=list)


@dataclass
class QueueSpec:
    name: str
    compute: list[ComputeSpec]
    capacity_type: str = "ONDEMAND"  # ONDEMAND, SPOT or CAPACITY_BLOCK
    subnet_ids: list[str] = field(default_factory=list)  # empty: the cluster's subnet_id
    placement_group: PlacementGroupSpec | None = None
    exclusive: bool | None = None  # Slurm JobExclusiveAllocation
    root_volume_gb: int | None = None
    custom_actions: CustomActionsSpec | None = None


def uses_reserved_capacity(queue: QueueSpec, compute: ComputeSpec) -> bool:
    """Capacity Blocks and (AWS-delivered) reservations: capacity that is not in our placement group."""
    return queue.capacity_type == "CAPACITY_BLOCK" or compute.capacity_reservation_id is not None


@dataclass
class HeadNodeSpec:
    instance_type: str = DEFAULT_HEAD_NODE_TYPE
    root_volume_gb: int = 200
    subnet_id: str | None = None  # None: the cluster's subnet_id
    custom_actions: CustomActionsSpec | None = None


@dataclass
class SshSpec:
    key_name: str | None = None
    allowed_cidr: str | None = None  # None: DEFAULT_SSH_CIDR


@dataclass
class DataRepositoryAssociationSpec:
    name: str
    file_system_path: str
    data_repository_path: str
    batch_import_metadata_on_create: bool = False
    imported_file_chunk_size: int | None = None
    auto_import_policy: list[str] = field(default_factory=list)  # NEW, CHANGED, DELETED
    auto_export_policy: list[str] = field(default_factory=list)


@dataclass
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
    deletion_policy: str | None = None  # Delete (ParallelCluster's default) or Retain

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


@dataclass
class EfsSpec:
    """Amazon EFS, e.g. for /home: a new encrypted file system or an existing one."""

    name: str = "home"
    mount_dir: str = "/home"
    file_system_id: str | None = None
    throughput_mode: str | None = None  # bursting, provisioned or elastic
    deletion_policy: str | None = None


@dataclass
class OpenZfsSpec:
    """An existing FSx for OpenZFS volume (ParallelCluster mounts it, never creates it)."""

    volume_id: str
    name: str = "home"
    mount_dir: str = "/home"


@dataclass
class EbsSpec:
    name: str
    mount_dir: str
    size_gib: int | None = None
    volume_type: str = "gp3"
    volume_id: str | None = None  # an existing volume


@dataclass
class StorageSpec:
    lustre: list[LustreSpec] = field(default_factory=list)
    efs: list[EfsSpec] = field(default_factory=list)
    openzfs: list[OpenZfsSpec] = field(default_factory=list)
    ebs: list[EbsSpec] = field(default_factory=list)


@dataclass
class PyxisSpec:
    enabled: bool = True
    script: str = DEFAULT_PYXIS_SCRIPT
    enroot_dir: str = f"{EPHEMERAL_MOUNT_DIR}/enroot"


@dataclass
class AccountingSpec:
    """Slurm accounting database; the password lives in Secrets Manager, never in the config."""

    uri: str
    user_name: str
    password_secret_arn: str


@dataclass
class SlurmSpec:
    scaledown_idletime: int | None = None  # minutes; ParallelCluster's default is 10
    queue_update_strategy: str | None = None  # DRAIN, COMPUTE_FLEET_STOP or TERMINATE
    # Requeue on node failure keeps the job id so a training run resumes from its checkpoint.
    job_requeue: bool = True
    custom_settings: dict[str, str] = field(default_factory=dict)
    accounting: AccountingSpec | None = None


@dataclass
class MonitoringSpec:
    detailed_monitoring: bool = False
    cloudwatch_logs: bool = True
    log_retention_days: int = 30
    dashboard: bool = True


@dataclass
class ClusterSpec:
    name: str
    queues: list[QueueSpec]
    region: str = DEFAULT_REGION
    os: str = DEFAULT_OS
    subnet_id: str | None = None  # head node, and queues without their own subnet_ids
    head_node: HeadNodeSpec = field(default_factory=HeadNodeSpec)
    ssh: SshSpec = field(default_factory=SshSpec)
    storage: StorageSpec = field(default_factory=StorageSpec)
    pyxis: PyxisSpec = field(default_factory=PyxisSpec)
    slurm: SlurmSpec = field(default_factory=SlurmSpec)
    monitoring: MonitoringSpec = field(default_factory=MonitoringSpec)
    tags: dict[str, str] = field(default_factory=dict)

    def queue_subnets(self, queue: QueueSpec) -> list[str]:
        if queue.subnet_ids:
            return list(queue.subnet_ids)
        return [self.subnet_id] if self.subnet_id else []

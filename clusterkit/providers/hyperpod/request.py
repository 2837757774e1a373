"""A cluster spec as SageMaker HyperPod's `CreateCluster` request, and the lifecycle files its nodes run. Pure.

The request is the exact keyword arguments of boto3's `sagemaker.create_cluster`: a Controller group (the spec's
head node), a Login group per login pool, and a Compute group per compute resource of each queue, in the queue's
partition. HyperPod runs every node all the time (it has no dynamic nodes), so a group holds the compute
resource's `max_count` nodes. Every group runs clusterkit's lifecycle set from one S3 prefix named by the SHA-256
of the whole set, the cluster's own parameters file among it.

A new FSx for Lustre file system in the spec is FSx's `CreateFileSystem` request, the exact keyword arguments of
boto3's `fsx.create_file_system`: made before the cluster, in its subnet and its nodes' security group, and mounted
by its DNS and mount names as an existing one is.
"""

from __future__ import annotations

import json
import re

from clusterkit import __version__
from clusterkit.cluster import node_scripts
from clusterkit.cluster.render import PLACEHOLDER_ACCOUNT, PLACEHOLDER_SUBNET, clusterkit_venv
from clusterkit.cluster.spec import ROOT_VOLUME_ENROOT_DIR, ClusterSpec, ComputeSpec, LustreSpec, QueueSpec
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.offerings import table
from clusterkit.registry import JsonObject, JsonValue

CONTROLLER_GROUP = "controller"
ON_CREATE = "on_create.sh"
PARAMETERS_FILE = "clusterkit-lifecycle.json"
# HyperPod reads lifecycle scripts only from buckets whose names start with "sagemaker-".
LIFECYCLE_BUCKET_PREFIX = "sagemaker-"
DEFAULT_LIFECYCLE_BUCKET = LIFECYCLE_BUCKET_PREFIX + "clusterkit-{account}-{region}"
INSTANCE_TYPE_PREFIX = "ml."
PLACEHOLDER_SECURITY_GROUP = "sg-00000000000000000"
# Where HyperPod's images mount the instance store (NVMe): enroot's data goes there on nodes that have one.
NVME_DIR = "/opt/dlami/nvme"
# On-start deep health checks: HyperPod runs them on GPU and Trainium instances (its deep health check docs).
DEEP_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity")
CLUSTER_TAG = "clusterkit:cluster"  # on what create makes for a cluster (security group, file system)
_ROLE_RE = re.compile(r"arn:aws[a-z-]*:iam::(?P<account>\d{12}):role/.+")


@lean_dataclass(frozen=True)
class GroupSource:
    """One instance group and the spec field it comes from (where a finding about it points)."""

    name: str
    path: str  # head_node, login_nodes[0], queues[0].compute[1]
    instance_type: str  # the EC2 type the spec names
    node_type: str  # Controller, Login or Compute
    count: int
    queue: QueueSpec | None = None
    compute: ComputeSpec | None = None


def hyperpod_type(instance_type: str) -> str:
    return INSTANCE_TYPE_PREFIX + instance_type


def groups(spec: ClusterSpec) -> list[GroupSource]:
    found = [GroupSource(CONTROLLER_GROUP, "head_node", spec.head_node.instance_type, "Controller", 1)]
    found += [GroupSource(f"login-{pool.name}", f"login_nodes[{i}]", pool.instance_type, "Login", pool.count)
              for i, pool in enumerate(spec.login_nodes)]
    found += [GroupSource(f"{queue.name}-{compute.name}", f"queues[{q}].compute[{c}]", compute.instance_type,
                          "Compute", compute.effective_max_count, queue, compute)
              for q, queue in enumerate(spec.queues) for c, compute in enumerate(queue.compute)]
    return found


def account_of(execution_role: str | None) -> str | None:
    """The account an execution role's ARN names."""
    match = _ROLE_RE.fullmatch(execution_role or "")
    return match["account"] if match else None


def lifecycle_bucket(spec: ClusterSpec, execution_role: str | None) -> str:
    """The spec's scripts bucket, else clusterkit's own for HyperPod in the execution role's account."""
    account = account_of(execution_role) or PLACEHOLDER_ACCOUNT
    return spec.scripts_bucket or DEFAULT_LIFECYCLE_BUCKET.format(account=account, region=spec.region)


def deep_health_checks(source: GroupSource) -> bool:
    """On-start deep health checks for GPU and Trainium groups, unless the queue turned GPU health checks off."""
    if source.queue is None or source.queue.gpu_health_checks is False:
        return False
    facts = table().facts(source.instance_type)
    return facts is not None and (facts.accelerator == "gpu" or source.instance_type.startswith("trn"))


def _has_nvme(instance_type: str) -> bool:
    facts = table().facts(instance_type)
    return facts is not None and facts.instance_storage_gb > 0


@lean_dataclass(frozen=True)
class LustreNames:
    """What the nodes mount a file system by: its id, DNS name and mount name, as FSx describes it."""

    file_system_id: str
    dns_name: str
    mount_name: str


def lustre_of(spec: ClusterSpec) -> LustreSpec | None:
    """The FSx for Lustre file system the nodes mount: the spec's first (HyperPod's lifecycle mounts one)."""
    return spec.storage.lustre[0] if spec.storage.lustre else None


def lifecycle_parameters(spec: ClusterSpec, names: LustreNames | None = None,
                         authorized_keys: tuple[str, ...] = ()) -> JsonObject:
    """What the lifecycle scripts read beside themselves: which group is which, what to mount and set up, the public
    keys ubuntu accepts on the controller and login nodes. The file system's names are known once the plan is
    prepared, or for a new one once it is made (empty before)."""
    sources = groups(spec)
    lustre = lustre_of(spec)
    accounting = spec.slurm.accounting
    nvme = [source.name for source in sources if _has_nvme(source.instance_type)]
    clusterkit: JsonValue = None
    if spec.clusterkit.install and lustre is not None:
        clusterkit = {"venv": clusterkit_venv(spec), "package": spec.clusterkit.package or f"clusterkit=={__version__}"}
    return {
        "controller_group": CONTROLLER_GROUP,
        "login_groups": [source.name for source in sources if source.node_type == "Login"],
        "lustre": ({"file_system_id": names.file_system_id if names else lustre.file_system_id or "",
                    "dns_name": names.dns_name if names else "", "mount_name": names.mount_name if names else "",
                    "mount_dir": lustre.mount_dir} if lustre is not None else None),
        "accounting": accounting is not None and accounting.create,
        "enroot_dir": f"{NVME_DIR}/enroot" if spec.pyxis.enabled else None,
        "enroot_root_volume_dir": ROOT_VOLUME_ENROOT_DIR if spec.pyxis.enabled else None,
        "nvme_groups": nvme,  # type: ignore[dict-item]
        "clusterkit": clusterkit,
        "authorized_keys": list(authorized_keys),  # type: ignore[dict-item]
    }


def parameters_text(parameters: JsonObject) -> str:
    return json.dumps(parameters, indent=2, sort_keys=True) + "\n"


def lifecycle_files(parameters: JsonObject) -> dict[str, bytes]:
    """File name -> bytes of the lifecycle set: the shipped scripts and this cluster's parameters."""
    files = {name: path.read_bytes() for name, path in node_scripts.lifecycle_scripts().items()}
    files[PARAMETERS_FILE] = parameters_text(parameters).encode()
    return files


def lifecycle_prefix(bucket: str, files: dict[str, bytes]) -> str:
    return f"s3://{bucket}/{node_scripts.LIFECYCLE_KEY_PREFIX}/sha256-{node_scripts.set_digest(files)}/"


def create_cluster_request(spec: ClusterSpec, execution_role: str | None, source_s3_uri: str,
                           subnets: list[str] | None = None, security_groups: list[str] | None = None) -> JsonObject:
    """The keyword arguments of `sagemaker.create_cluster` for the spec. Subnets default to the spec's (else a
    placeholder) and security groups to a placeholder, until the network is known."""
    spec_subnets = list(dict.fromkeys(subnet for queue in spec.queues for subnet in spec.queue_subnets(queue)))
    request: JsonObject = {
        "ClusterName": spec.name,
        "InstanceGroups": [_group(source, spec, execution_role or "", source_s3_uri)  # type: ignore[misc]
                           for source in groups(spec)],
        "VpcConfig": {"SecurityGroupIds": list(security_groups or [PLACEHOLDER_SECURITY_GROUP]),
                      "Subnets": list(subnets or spec_subnets or [PLACEHOLDER_SUBNET])},  # type: ignore[dict-item]
        "NodeRecovery": "Automatic",
    }
    if spec.tags:
        request["Tags"] = [{"Key": key, "Value": value} for key, value in spec.tags.items()]  # type: ignore[misc]
    return request


def _group(source: GroupSource, spec: ClusterSpec, execution_role: str, source_s3_uri: str) -> JsonObject:
    threads = 1 if source.compute is not None and source.compute.disable_hyperthreading else 2
    group: JsonObject = {
        "InstanceGroupName": source.name,
        "InstanceType": hyperpod_type(source.instance_type),
        "InstanceCount": source.count,
        "LifeCycleConfig": {"SourceS3Uri": source_s3_uri, "OnCreate": ON_CREATE},
        "ExecutionRole": execution_role,
        "ThreadsPerCore": threads,
    }
    volume = spec.head_node.root_volume_gb if source.node_type == "Controller" else (
        source.queue.root_volume_gb if source.queue is not None else None)
    if volume:  # HyperPod's extra EBS volume (mounted at /opt/sagemaker): room for images and logs
        group["InstanceStorageConfigs"] = [{"EbsVolumeConfig": {"VolumeSizeInGB": volume}}]
    if deep_health_checks(source):
        group["OnStartDeepHealthChecks"] = list(DEEP_HEALTH_CHECKS)  # type: ignore[arg-type]
    slurm: JsonObject = {"NodeType": source.node_type}
    if source.queue is not None:
        slurm["PartitionNames"] = [source.queue.name]
    group["SlurmConfig"] = slurm
    return group


def create_file_system_request(spec: ClusterSpec, subnet: str = PLACEHOLDER_SUBNET,
                               security_group: str = PLACEHOLDER_SECURITY_GROUP) -> JsonObject | None:
    """The keyword arguments of `fsx.create_file_system` for the spec's new FSx for Lustre (None: the spec mounts an
    existing one, or none), with its settings as the ParallelCluster provider renders them, defaults included. The
    subnet and security group are placeholders until the network is known."""
    fsx = lustre_of(spec)
    if fsx is None or not fsx.is_new:
        return None
    lustre: JsonObject = {"DeploymentType": fsx.effective_deployment_type}
    settings = (("PerUnitStorageThroughput", fsx.effective_throughput), ("DataCompressionType", fsx.data_compression),
                ("ImportPath", fsx.import_path), ("ExportPath", fsx.export_path),
                ("AutoImportPolicy", fsx.auto_import_policy), ("ImportedFileChunkSize", fsx.imported_file_chunk_size))
    lustre.update({key: value for key, value in settings if value is not None})
    tags = {"Name": f"{spec.name}-{fsx.name}", **spec.tags, CLUSTER_TAG: spec.name}
    return {
        "FileSystemType": "LUSTRE",
        "StorageCapacity": fsx.effective_capacity_gib,
        "StorageType": "SSD",
        "SubnetIds": [subnet],
        "SecurityGroupIds": [security_group],
        "LustreConfiguration": lustre,
        "Tags": [{"Key": key, "Value": value} for key, value in tags.items()],  # type: ignore[misc]
    }


@lean_dataclass(frozen=True)
class HyperPodDraft:
    """What HyperPod's rules judge: the spec, the execution role given, and the request built from them."""

    spec: ClusterSpec
    execution_role: str | None
    request: JsonObject
    bucket: str
    file_system_request: JsonObject | None = None  # CreateFileSystem's, for a new FSx for Lustre

    @property
    def groups(self) -> list[GroupSource]:
        return groups(self.spec)

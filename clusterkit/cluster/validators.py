"""Offline checks of a cluster spec: every rule ParallelCluster 3.16 would reject, before AWS is touched.

One small function per rule. Each yields Findings whose path is the field in the user's spec.
`validate(spec)` runs them all and returns every finding together; errors are values here,
the CLI decides the exit code.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from clusterkit import catalog
from clusterkit.cluster.spec import (
    DEFAULT_SSH_CIDR,
    ClusterSpec,
    ComputeSpec,
    CustomActionsSpec,
    LustreSpec,
    PlacementGroupSpec,
    QueueSpec,
    uses_reserved_capacity,
)
from clusterkit.findings import Finding, Level
from clusterkit.rules import RuleBook

CLUSTER_RULES: RuleBook[ClusterSpec] = RuleBook("cluster")
rule = CLUSTER_RULES.rule

# Limits and allowed values of ParallelCluster 3.16.
SUPPORTED_OS = ("alinux2023", "ubuntu2204", "ubuntu2404", "rhel8", "rhel9", "rocky8", "rocky9")
RESOURCE_NAME_RE = re.compile(r"^[a-z][a-z0-9-]*$")
RESOURCE_NAME_MAX = 25
CLUSTER_NAME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]*$")
CLUSTER_NAME_MAX = 60
CLUSTER_NAME_MAX_WITH_ACCOUNTING = 40
MAX_QUEUES = 50
MAX_COMPUTE_RESOURCES_PER_QUEUE = 50
MAX_COMPUTE_RESOURCES_PER_CLUSTER = 50
CAPACITY_TYPES = ("ONDEMAND", "SPOT", "CAPACITY_BLOCK")
CAPACITY_RESERVATION_RE = re.compile(r"^cr-[0-9a-f]{17}$")
INSTANCE_TYPE_RE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")
REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
SUBNET_RE = re.compile(r"^subnet-[0-9a-z]{8}$|^subnet-[0-9a-z]{17}$")
LUSTRE_DEPLOYMENT_TYPES = ("SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2")
LUSTRE_THROUGHPUT = {"PERSISTENT_1": (50, 100, 200), "PERSISTENT_2": (125, 250, 500, 1000)}
LUSTRE_AUTO_IMPORT_POLICIES = ("NEW", "NEW_CHANGED", "NEW_CHANGED_DELETED")
DRA_POLICY_EVENTS = ("NEW", "CHANGED", "DELETED")
MAX_DATA_REPOSITORY_ASSOCIATIONS = 8
FSX_LUSTRE_ID_RE = re.compile(r"^fs-[0-9a-z]{17}$")
EFS_ID_RE = re.compile(r"^fs-[0-9a-z]{8}$|^fs-[0-9a-z]{17}$")
FSX_VOLUME_ID_RE = re.compile(r"^fsvol-[0-9a-f]{17}$")
EBS_VOLUME_ID_RE = re.compile(r"^vol-[0-9a-z]{8}$|^vol-[0-9a-z]{17}$")
EBS_VOLUME_TYPES = ("standard", "io1", "io2", "gp2", "gp3", "st1", "sc1")
EFS_THROUGHPUT_MODES = ("provisioned", "bursting")
DELETION_POLICIES = ("Delete", "Retain")
MAX_NEW_FSX = MAX_NEW_EFS = 1
MAX_EXISTING_FSX = MAX_EXISTING_EFS = 20
MAX_EBS = 5
STORAGE_NAME_MAX = 30
# Storage names become tag values.
TAG_VALUE_RE = re.compile(r"^[\w+\-=.:@/]{0,256}$")
TAG_KEY_MAX = 128
MAX_TAGS = 40
RESERVED_MOUNT_DIRS = frozenset((
    "/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/media", "/mnt", "/opt", "/opt/parallelcluster",
    "/opt/parallelcluster/shared", "/opt/parallelcluster/shared_login_nodes", "/opt/slurm", "/opt/intel",
    "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
))
MOUNT_DIR_RE = re.compile(r"^/[A-Za-z0-9_./-]*$")
QUEUE_UPDATE_STRATEGIES = ("DRAIN", "COMPUTE_FLEET_STOP", "TERMINATE")
# slurm.conf keys ParallelCluster manages itself (lower case: Slurm keys are case-insensitive).
SLURM_DENIED_SETTINGS = frozenset((
    "epilog", "grestypes", "launchparameters", "prolog", "reconfigflags", "resumefailprogram", "resumeprogram",
    "resumetimeout", "slurmctldhost", "slurmctldlogfile", "slurmctldparameters", "slurmdlogfile", "slurmuser",
    "suspendexcnodes", "suspendprogram", "suspendtime", "taskplugin", "treewidth",
))
SLURM_DENIED_WITH_ACCOUNTING = frozenset((
    "accountingstoragetype", "accountingstoragehost", "accountingstorageport", "accountingstorageuser",
    "jobacctgathertype",
))
LOG_RETENTION_DAYS = (0, 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1827, 3653)
SECRET_ARN_RE = re.compile(r"^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:.+$")
SCRIPT_URL_RE = re.compile(r"^(s3|https)://\S+$")
WORLD_CIDRS = ("0.0.0.0/0", "::/0")


def validate(spec: ClusterSpec) -> list[Finding]:
    """Run every rule on the spec; errors first, then warnings and infos, each in rule order."""
    return CLUSTER_RULES.check(spec)


def _error(path: str, message: str, fix: str, value: object = None) -> Finding:
    return Finding(Level.ERROR, path, message, fix=fix, value=value)


def _warning(path: str, message: str, fix: str, value: object = None) -> Finding:
    return Finding(Level.WARNING, path, message, fix=fix, value=value)


def _compute_resources(spec: ClusterSpec) -> Iterator[tuple[str, QueueSpec, str, ComputeSpec]]:
    for q, queue in enumerate(spec.queues):
        for c, compute in enumerate(queue.compute):
            yield f"queues[{q}]", queue, f"queues[{q}].compute[{c}]", compute


def _suggest(value: str, choices: Iterable[str]) -> str:
    choices = list(choices)
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
    if close:
        return f"did you mean {close[0]!r}? (one of: {', '.join(choices)})"
    return f"use one of: {', '.join(choices)}"


# --- names and counts ---------------------------------------------------------------------------


@rule
def cluster_name(spec: ClusterSpec) -> Iterator[Finding]:
    limit = CLUSTER_NAME_MAX_WITH_ACCOUNTING if spec.slurm.accounting else CLUSTER_NAME_MAX
    if not CLUSTER_NAME_RE.match(spec.name):
        yield _error("name", "cluster name must start with a letter and hold only letters, digits and '-'",
                     "rename it, e.g. 'train-p4de'", spec.name)
    if len(spec.name) > limit:
        why = " with Slurm accounting" if spec.slurm.accounting else ""
        yield _error("name", f"cluster name is {len(spec.name)} characters; at most {limit} allowed{why}",
                     f"shorten it to {limit} characters", spec.name)


def _resource_name_findings(path: str, name: str, what: str) -> Iterator[Finding]:
    if not RESOURCE_NAME_RE.match(name):
        yield _error(path, f"{what} name must start with a lower-case letter and hold only a-z, 0-9 and '-'",
                     "use a name like 'gpu' or 'p4de-od'", name)
    if len(name) > RESOURCE_NAME_MAX:
        yield _error(path, f"{what} name is {len(name)} characters; at most {RESOURCE_NAME_MAX} allowed",
                     f"shorten it to {RESOURCE_NAME_MAX} characters", name)
    if name == "default":
        yield _error(path, f"'default' is reserved and cannot be a {what} name", "pick another name", name)


def _duplicates(names: list[str], path_of: Callable[[int], str], what: str) -> Iterator[Finding]:
    counts = Counter(names)
    for index, name in enumerate(names):
        if counts[name] > 1 and names.index(name) != index:
            yield _error(path_of(index), f"duplicate {what} name {name!r}", f"give each {what} its own name", name)


@rule
def queue_names(spec: ClusterSpec) -> Iterator[Finding]:
    for q, queue in enumerate(spec.queues):
        yield from _resource_name_findings(f"queues[{q}].name", queue.name, "queue")
    yield from _duplicates([queue.name for queue in spec.queues], lambda q: f"queues[{q}].name", "queue")


@rule
def compute_resource_names(spec: ClusterSpec) -> Iterator[Finding]:
    for q, queue in enumerate(spec.queues):
        for c, compute in enumerate(queue.compute):
            yield from _resource_name_findings(f"queues[{q}].compute[{c}].name", compute.name, "compute resource")
        yield from _duplicates([compute.name for compute in queue.compute],
                               lambda c, q=q: f"queues[{q}].compute[{c}].name", "compute resource")


@rule
def resource_counts(spec: ClusterSpec) -> Iterator[Finding]:
    if not spec.queues:
        yield _error("queues", "a cluster needs at least one queue", "add a queue with one compute resource")
    if len(spec.queues) > MAX_QUEUES:
        yield _error("queues", f"{len(spec.queues)} queues; at most {MAX_QUEUES} allowed",
                     "merge queues", len(spec.queues))
    for q, queue in enumerate(spec.queues):
        if not queue.compute:
            yield _error(f"queues[{q}].compute", "a queue needs at least one compute resource",
                         "add a compute resource with a name and an instance_type")
        if len(queue.compute) > MAX_COMPUTE_RESOURCES_PER_QUEUE:
            yield _error(f"queues[{q}].compute", f"{len(queue.compute)} compute resources; at most "
                         f"{MAX_COMPUTE_RESOURCES_PER_QUEUE} per queue", "split the queue", len(queue.compute))
    total = sum(len(queue.compute) for queue in spec.queues)
    if total > MAX_COMPUTE_RESOURCES_PER_CLUSTER:
        yield _error("queues", f"{total} compute resources in the cluster; at most "
                     f"{MAX_COMPUTE_RESOURCES_PER_CLUSTER} allowed", "remove compute resources", total)


@rule
def node_counts(spec: ClusterSpec) -> Iterator[Finding]:
    for _, _, path, compute in _compute_resources(spec):
        if compute.min_count is not None and compute.min_count < 0:
            yield _error(f"{path}.min_count", "min_count must be 0 or more", "set min_count: 0 for no static nodes",
                         compute.min_count)
        if compute.max_count is not None and compute.max_count < 1:
            yield _error(f"{path}.max_count", "max_count must be at least 1", "set max_count to the most nodes",
                         compute.max_count)
        if compute.effective_max_count < compute.effective_min_count:
            yield _error(f"{path}.max_count",
                         f"max_count {compute.effective_max_count} is below min_count {compute.effective_min_count}",
                         "raise max_count to at least min_count", compute.effective_max_count)


# --- instance types, EFA, placement, capacity --------------------------------------------------


def _instance_type_findings(path: str, name: str) -> Iterator[Finding]:
    if catalog.find_instance_type(name):
        return
    fix = _suggest(name, sorted(catalog.INSTANCE_TYPES))
    if not INSTANCE_TYPE_RE.match(name):
        yield _error(path, f"{name!r} is not an EC2 instance type", fix, name)
    else:
        # The catalog is not every EC2 type: an unknown but well-formed name may be valid.
        yield _warning(path, f"instance type {name!r} is not in clusterkit's catalog; EFA, accelerators and "
                       "cost cannot be checked", fix, name)


@rule
def instance_types(spec: ClusterSpec) -> Iterator[Finding]:
    yield from _instance_type_findings("head_node.instance_type", spec.head_node.instance_type)
    for _, _, path, compute in _compute_resources(spec):
        yield from _instance_type_findings(f"{path}.instance_type", compute.instance_type)


@rule
def efa_support(spec: ClusterSpec) -> Iterator[Finding]:
    for _, _, path, compute in _compute_resources(spec):
        instance = compute.instance
        if instance is None:
            continue
        if compute.efa and not instance.efa:
            yield _error(f"{path}.efa", f"{compute.instance_type} has no EFA network interface",
                         "set efa: false, or use an EFA-capable type (p4de, p5, trn1, g5.8xlarge and up)", True)
        elif compute.efa is False and instance.efa:
            yield _warning(f"{path}.efa", f"{compute.instance_type} supports EFA but it is turned off; multi-node "
                           "training then runs over plain TCP", "remove 'efa: false'", False)


def _effective_placement(queue: QueueSpec, compute: ComputeSpec, queue_path: str, path: str
                         ) -> tuple[PlacementGroupSpec | None, str]:
    if compute.placement_group is not None:
        return compute.placement_group, f"{path}.placement_group"
    return queue.placement_group, f"{queue_path}.placement_group"


@rule
def placement_group_settings(spec: ClusterSpec) -> Iterator[Finding]:
    groups = [(f"queues[{q}].placement_group", queue.placement_group) for q, queue in enumerate(spec.queues)]
    groups += [(f"{path}.placement_group", compute.placement_group) for _, _, path, compute in _compute_resources(spec)]
    for path, group in groups:
        if group is None:
            continue
        if group.id and group.name:
            yield _error(path, "placement group has both 'id' and 'name'", "keep only 'name'", group.id)
        if group.enabled is False and (group.id or group.name):
            yield _error(path, "placement group is disabled but names an existing group",
                         "remove 'name'/'id', or set enabled: true", group.name or group.id)


@rule
def efa_placement(spec: ClusterSpec) -> Iterator[Finding]:
    for queue_path, queue, path, compute in _compute_resources(spec):
        if not compute.efa_enabled:
            continue
        multi_az = len(spec.queue_subnets(queue)) > 1
        if multi_az:
            yield _error(f"{queue_path}.subnet_ids", "EFA needs all nodes in one Availability Zone; this queue "
                         "spans several subnets", "give the queue one subnet, or set efa: false",
                         spec.queue_subnets(queue))
            continue
        group, group_path = _effective_placement(queue, compute, queue_path, path)
        if group is None or group.enabled is None:
            continue
        if group.enabled is False and not uses_reserved_capacity(queue, compute):
            yield _warning(f"{group_path}.enabled", "EFA without a placement group: nodes may land far apart and "
                           "collective bandwidth drops", "remove 'enabled: false'", False)
        elif group.enabled and uses_reserved_capacity(queue, compute):
            yield _warning(f"{group_path}.enabled", "a placement group with a Capacity Block or capacity "
                           "reservation causes insufficient-capacity errors",
                           "remove the placement_group (clusterkit then disables it)", True)


@rule
def capacity(spec: ClusterSpec) -> Iterator[Finding]:
    for q, queue in enumerate(spec.queues):
        if queue.capacity_type not in CAPACITY_TYPES:
            yield _error(f"queues[{q}].capacity_type", f"unknown capacity type {queue.capacity_type!r}",
                         _suggest(queue.capacity_type, CAPACITY_TYPES), queue.capacity_type)
    for _, queue, path, compute in _compute_resources(spec):
        reservation = compute.capacity_reservation_id
        if reservation is not None and not CAPACITY_RESERVATION_RE.match(reservation):
            yield _error(f"{path}.capacity_reservation_id", "capacity reservation ids look like cr-<17 hex digits>",
                         "copy the id from the EC2 console (Capacity Reservations)", reservation)
        if queue.capacity_type != "CAPACITY_BLOCK":
            continue
        if reservation is None:
            yield _error(f"{path}.capacity_reservation_id", "a Capacity Block queue needs the reservation id "
                         "of the block", "set capacity_reservation_id: cr-...")
        low, high = compute.effective_min_count, compute.effective_max_count
        if low != high or high < 1:
            yield _error(f"{path}.min_count", f"with CAPACITY_BLOCK min_count and max_count must be equal and "
                         f"above 0 (got {low} and {high})", "set both to the number of instances in the block",
                         [low, high])


# --- shared storage ----------------------------------------------------------------------------


def _lustre_new_findings(path: str, fsx: LustreSpec) -> Iterator[Finding]:
    deployment = fsx.effective_deployment_type
    if deployment not in LUSTRE_DEPLOYMENT_TYPES:
        yield _error(f"{path}.deployment_type", f"unknown FSx for Lustre deployment type {deployment!r}",
                     _suggest(deployment, LUSTRE_DEPLOYMENT_TYPES), deployment)
        return
    capacity = fsx.effective_capacity_gib
    if deployment == "SCRATCH_1":
        ok, allowed = capacity in (1200, 2400) or (capacity > 0 and capacity % 3600 == 0), "1200, 2400 or n × 3600"
    else:
        ok, allowed = capacity == 1200 or (capacity > 0 and capacity % 2400 == 0), "1200 or n × 2400"
    if not ok:
        yield _error(f"{path}.storage_capacity_gib", f"{deployment} capacity must be {allowed} GiB",
                     f"use {allowed} GiB, e.g. 1200 or 4800", capacity)
    throughput = fsx.per_unit_storage_throughput
    if deployment in LUSTRE_THROUGHPUT:
        allowed_throughput = LUSTRE_THROUGHPUT[deployment]
        if throughput is not None and throughput not in allowed_throughput:
            yield _error(f"{path}.per_unit_storage_throughput", f"{deployment} takes "
                         f"{', '.join(map(str, allowed_throughput))} MB/s per TiB",
                         f"use one of {', '.join(map(str, allowed_throughput))}", throughput)
    elif throughput is not None:
        yield _error(f"{path}.per_unit_storage_throughput", f"{deployment} has no per-unit throughput setting",
                     "remove per_unit_storage_throughput, or use PERSISTENT_2", throughput)
    if fsx.data_compression is not None and fsx.data_compression != "LZ4":
        yield _error(f"{path}.data_compression", "FSx for Lustre compresses only with LZ4", "set data_compression: LZ4",
                     fsx.data_compression)
    if fsx.import_path is None:
        for key in ("export_path", "auto_import_policy", "imported_file_chunk_size"):
            if getattr(fsx, key) is not None:
                yield _error(f"{path}.{key}", f"{key} needs import_path", "set import_path: s3://BUCKET/PREFIX, or "
                             "use data_repository_associations", getattr(fsx, key))
    if fsx.auto_import_policy is not None and fsx.auto_import_policy not in LUSTRE_AUTO_IMPORT_POLICIES:
        yield _error(f"{path}.auto_import_policy", f"unknown auto import policy {fsx.auto_import_policy!r}",
                     _suggest(fsx.auto_import_policy, LUSTRE_AUTO_IMPORT_POLICIES), fsx.auto_import_policy)
    for key in ("import_path", "export_path"):
        value = getattr(fsx, key)
        if value is not None and not value.startswith("s3://"):
            yield _error(f"{path}.{key}", f"{key} must be an S3 URL", "write it as s3://BUCKET/PREFIX", value)
    yield from _dra_findings(path, fsx)


def _dra_findings(path: str, fsx: LustreSpec) -> Iterator[Finding]:
    associations = fsx.data_repository_associations
    if not associations:
        return
    if len(associations) > MAX_DATA_REPOSITORY_ASSOCIATIONS:
        yield _error(f"{path}.data_repository_associations", f"{len(associations)} data repository associations; "
                     f"at most {MAX_DATA_REPOSITORY_ASSOCIATIONS}", "merge S3 prefixes", len(associations))
    for key in ("import_path", "export_path"):
        if getattr(fsx, key) is not None:
            yield _error(f"{path}.{key}", f"{key} cannot be combined with data_repository_associations",
                         f"remove {key}; describe the S3 link as a data repository association", getattr(fsx, key))
    for d, association in enumerate(associations):
        dra_path = f"{path}.data_repository_associations[{d}]"
        if not association.data_repository_path.startswith("s3://"):
            yield _error(f"{dra_path}.data_repository_path", "must be an S3 URL", "write it as s3://BUCKET/PREFIX",
                         association.data_repository_path)
        if not association.file_system_path.startswith("/"):
            yield _error(f"{dra_path}.file_system_path", "must be a path inside the file system, starting with '/'",
                         "e.g. /data", association.file_system_path)
        for key in ("auto_import_policy", "auto_export_policy"):
            for event in getattr(association, key):
                if event not in DRA_POLICY_EVENTS:
                    yield _error(f"{dra_path}.{key}", f"unknown event {event!r}", _suggest(event, DRA_POLICY_EVENTS),
                                 event)
    yield from _duplicates([a.name for a in associations],
                           lambda d: f"{path}.data_repository_associations[{d}].name", "data repository association")


_LUSTRE_CREATION_FIELDS = ("deployment_type", "storage_capacity_gib", "per_unit_storage_throughput",
                           "data_compression", "import_path", "export_path", "auto_import_policy",
                           "imported_file_chunk_size", "deletion_policy")


@rule
def lustre_settings(spec: ClusterSpec) -> Iterator[Finding]:
    for i, fsx in enumerate(spec.storage.lustre):
        path = f"storage.lustre[{i}]"
        if fsx.is_new:
            yield from _lustre_new_findings(path, fsx)
            continue
        if not FSX_LUSTRE_ID_RE.match(fsx.file_system_id or ""):
            yield _error(f"{path}.file_system_id", "FSx file system ids look like fs-<17 characters>",
                         "copy the id from the FSx console", fsx.file_system_id)
        for key in _LUSTRE_CREATION_FIELDS:
            if getattr(fsx, key) is not None:
                yield _error(f"{path}.{key}", f"{key} only applies to a new file system, not to file_system_id",
                             f"remove {key}", getattr(fsx, key))
        if fsx.data_repository_associations:
            yield _error(f"{path}.data_repository_associations", "data repository associations only apply to a "
                         "new file system", "manage them on the existing file system",
                         len(fsx.data_repository_associations))


@rule
def efs_settings(spec: ClusterSpec) -> Iterator[Finding]:
    for i, efs in enumerate(spec.storage.efs):
        path = f"storage.efs[{i}]"
        if efs.file_system_id is not None:
            if not EFS_ID_RE.match(efs.file_system_id):
                yield _error(f"{path}.file_system_id", "EFS ids look like fs-<8 or 17 characters>",
                             "copy the id from the EFS console", efs.file_system_id)
            for key in ("throughput_mode", "deletion_policy"):
                if getattr(efs, key) is not None:
                    yield _error(f"{path}.{key}", f"{key} only applies to a new file system", f"remove {key}",
                                 getattr(efs, key))
        if efs.throughput_mode is not None and efs.throughput_mode not in EFS_THROUGHPUT_MODES:
            yield _error(f"{path}.throughput_mode", f"unknown EFS throughput mode {efs.throughput_mode!r}",
                         _suggest(efs.throughput_mode, EFS_THROUGHPUT_MODES), efs.throughput_mode)


@rule
def openzfs_and_ebs_settings(spec: ClusterSpec) -> Iterator[Finding]:
    for i, volume in enumerate(spec.storage.openzfs):
        if not FSX_VOLUME_ID_RE.match(volume.volume_id):
            yield _error(f"storage.openzfs[{i}].volume_id", "FSx volume ids look like fsvol-<17 hex digits>",
                         "copy the volume id from the FSx console", volume.volume_id)
    for i, ebs in enumerate(spec.storage.ebs):
        path = f"storage.ebs[{i}]"
        if ebs.volume_type not in EBS_VOLUME_TYPES:
            yield _error(f"{path}.volume_type", f"unknown EBS volume type {ebs.volume_type!r}",
                         _suggest(ebs.volume_type, EBS_VOLUME_TYPES), ebs.volume_type)
        if ebs.volume_id is not None:
            if not EBS_VOLUME_ID_RE.match(ebs.volume_id):
                yield _error(f"{path}.volume_id", "EBS volume ids look like vol-<17 characters>",
                             "copy the id from the EC2 console", ebs.volume_id)
            if ebs.size_gib is not None:
                yield _error(f"{path}.size_gib", "size_gib only applies to a new volume", "remove size_gib",
                             ebs.size_gib)
        elif ebs.size_gib is not None and ebs.size_gib < 1:
            yield _error(f"{path}.size_gib", "size_gib must be at least 1", "set the size in GiB", ebs.size_gib)


@rule
def deletion_policies(spec: ClusterSpec) -> Iterator[Finding]:
    entries = [(f"storage.lustre[{i}]", s.deletion_policy) for i, s in enumerate(spec.storage.lustre)]
    entries += [(f"storage.efs[{i}]", s.deletion_policy) for i, s in enumerate(spec.storage.efs)]
    for path, policy in entries:
        if policy is not None and policy not in DELETION_POLICIES:
            yield _error(f"{path}.deletion_policy", f"unknown deletion policy {policy!r}",
                         _suggest(policy, DELETION_POLICIES), policy)


@rule
def storage_counts(spec: ClusterSpec) -> Iterator[Finding]:
    storage = spec.storage
    new_fsx = sum(1 for fsx in storage.lustre if fsx.is_new)
    existing_fsx = len(storage.lustre) - new_fsx + len(storage.openzfs)
    new_efs = sum(1 for efs in storage.efs if efs.file_system_id is None)
    existing_efs = len(storage.efs) - new_efs
    limits = (
        ("storage.lustre", new_fsx, MAX_NEW_FSX, "new FSx file systems", "mount the others by file_system_id"),
        ("storage.lustre", existing_fsx, MAX_EXISTING_FSX, "existing FSx file systems and volumes", "mount fewer"),
        ("storage.efs", new_efs, MAX_NEW_EFS, "new EFS file systems", "mount the others by file_system_id"),
        ("storage.efs", existing_efs, MAX_EXISTING_EFS, "existing EFS file systems", "mount fewer"),
        ("storage.ebs", len(storage.ebs), MAX_EBS, "EBS volumes", "use fewer, larger volumes"),
    )
    for path, count, limit, what, fix in limits:
        if count > limit:
            yield _error(path, f"{count} {what}; at most {limit} allowed", fix, count)


def _storage_entries(spec: ClusterSpec) -> list[tuple[str, str, str]]:
    """(path, name, mount_dir) of every shared storage entry, in spec order."""
    storage = spec.storage
    groups = (("lustre", storage.lustre), ("efs", storage.efs), ("openzfs", storage.openzfs), ("ebs", storage.ebs))
    return [(f"storage.{kind}[{i}]", entry.name, entry.mount_dir) for kind, entries in groups
            for i, entry in enumerate(entries)]


@rule
def storage_names(spec: ClusterSpec) -> Iterator[Finding]:
    entries = _storage_entries(spec)
    for path, name, _ in entries:
        if len(name) > STORAGE_NAME_MAX:
            yield _error(f"{path}.name", f"storage name is {len(name)} characters; at most {STORAGE_NAME_MAX}",
                         f"shorten it to {STORAGE_NAME_MAX} characters", name)
        if name == "default":
            yield _error(f"{path}.name", "'default' is reserved and cannot be a storage name", "pick another name",
                         name)
        if not name or not TAG_VALUE_RE.match(name):
            yield _error(f"{path}.name", "storage names hold letters, digits and + - = . _ : @ / only",
                         "e.g. 'fsx' or 'home'", name)
    yield from _duplicates([name for _, name, _ in entries], lambda i: f"{entries[i][0]}.name", "storage")


def _normalized_mount_dir(mount_dir: str) -> str:
    return "/" + mount_dir.strip("/")


@rule
def mount_dirs(spec: ClusterSpec) -> Iterator[Finding]:
    seen: list[tuple[str, str]] = []
    for path, _, mount_dir in _storage_entries(spec):
        if not MOUNT_DIR_RE.match(mount_dir):
            yield _error(f"{path}.mount_dir", "mount_dir must be an absolute path of letters, digits, '_', '-', "
                         "'.' and '/'", "e.g. /fsx", mount_dir)
            continue
        normalized = _normalized_mount_dir(mount_dir)
        if normalized in RESERVED_MOUNT_DIRS:
            yield _error(f"{path}.mount_dir", f"{normalized} is a system directory", "mount at /fsx, /data or /home",
                         mount_dir)
            continue
        for other_path, other in seen:
            if normalized == other:
                yield _error(f"{path}.mount_dir", f"{normalized} is already the mount_dir of {other_path}",
                             "give each storage its own mount_dir", mount_dir)
            elif normalized.startswith(other + "/") or other.startswith(normalized + "/"):
                yield _error(f"{path}.mount_dir", f"{normalized} overlaps {other} ({other_path})",
                             "mount storage side by side, not inside each other", mount_dir)
        seen.append((path, normalized))
    if spec.pyxis.enabled and _normalized_mount_dir(spec.pyxis.enroot_dir) in {dir for _, dir in seen}:
        yield _warning("pyxis.enroot_dir", "enroot data on shared storage is slow and fills it",
                       "keep enroot_dir on local NVMe (/scratch/enroot)", spec.pyxis.enroot_dir)


# --- cluster-wide settings ---------------------------------------------------------------------


@rule
def operating_system(spec: ClusterSpec) -> Iterator[Finding]:
    if spec.os in SUPPORTED_OS:
        return
    if spec.os == "alinux2":
        yield _error("os", "alinux2 was dropped in ParallelCluster 3.16", "use alinux2023 or ubuntu2204", spec.os)
    else:
        yield _error("os", f"ParallelCluster 3.16 does not support os {spec.os!r}", _suggest(spec.os, SUPPORTED_OS),
                     spec.os)


@rule
def region(spec: ClusterSpec) -> Iterator[Finding]:
    if not REGION_RE.match(spec.region):
        yield _error("region", f"{spec.region!r} is not an AWS region name", "e.g. us-east-1", spec.region)


@rule
def subnets(spec: ClusterSpec) -> Iterator[Finding]:
    given = [("subnet_id", spec.subnet_id), ("head_node.subnet_id", spec.head_node.subnet_id)]
    given += [(f"queues[{q}].subnet_ids[{s}]", subnet) for q, queue in enumerate(spec.queues)
              for s, subnet in enumerate(queue.subnet_ids)]
    for path, subnet in given:
        if subnet is not None and not SUBNET_RE.match(subnet):
            yield _error(path, "subnet ids look like subnet-<8 or 17 characters>", "copy the id from the VPC console",
                         subnet)
    if spec.subnet_id is None and (spec.head_node.subnet_id is None or not all(q.subnet_ids for q in spec.queues)):
        yield _warning("subnet_id", "no subnet given: the config holds a placeholder subnet that must be replaced "
                       "before creating the cluster", "pass --subnet-id or set subnet_id in the spec")


@rule
def ssh_access(spec: ClusterSpec) -> Iterator[Finding]:
    cidr = spec.ssh.allowed_cidr
    if cidr is None:
        yield Finding(Level.INFO, "ssh.allowed_cidr", f"SSH to the head node is allowed from {DEFAULT_SSH_CIDR} only",
                      fix="set ssh.allowed_cidr to your network, or connect with SSM Session Manager",
                      value=DEFAULT_SSH_CIDR)
    elif cidr in WORLD_CIDRS:
        yield _warning("ssh.allowed_cidr", "SSH to the head node is open to the whole internet",
                       "restrict it to your network, e.g. 203.0.113.0/24", cidr)
    elif not cidr.startswith("pl-"):
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            yield _error("ssh.allowed_cidr", f"{cidr!r} is not a CIDR block or prefix list id",
                         "write it like 10.0.0.0/16", cidr)
    if not spec.ssh.key_name:
        yield _warning("ssh.key_name", "no SSH key pair: you can reach the head node only through SSM",
                       "pass --key-name or set ssh.key_name (an ed25519 key; RSA fails on ubuntu2204)")


@rule
def slurm_settings(spec: ClusterSpec) -> Iterator[Finding]:
    slurm = spec.slurm
    if slurm.scaledown_idletime is not None and slurm.scaledown_idletime < -1:
        yield _error("slurm.scaledown_idletime", "scaledown_idletime must be -1 (never) or more minutes",
                     "e.g. 10", slurm.scaledown_idletime)
    strategy = slurm.queue_update_strategy
    if strategy is not None and strategy not in QUEUE_UPDATE_STRATEGIES:
        yield _error("slurm.queue_update_strategy", f"unknown queue update strategy {strategy!r}",
                     _suggest(strategy, QUEUE_UPDATE_STRATEGIES), strategy)
    denied = SLURM_DENIED_SETTINGS | (SLURM_DENIED_WITH_ACCOUNTING if slurm.accounting else frozenset())
    for key in slurm.custom_settings:
        if key.lower() in denied:
            yield _error(f"slurm.custom_settings.{key}", f"ParallelCluster manages {key} itself and rejects it",
                         f"remove {key}", slurm.custom_settings[key])
        if key.lower() == "jobrequeue":
            yield _error(f"slurm.custom_settings.{key}", "JobRequeue is set by slurm.job_requeue",
                         "use slurm.job_requeue: true/false", slurm.custom_settings[key])
    if slurm.accounting and not SECRET_ARN_RE.match(slurm.accounting.password_secret_arn):
        yield _error("slurm.accounting.password_secret_arn", "the database password must be a Secrets Manager "
                     "secret ARN, never the password itself", "store it in Secrets Manager and give its ARN",
                     "<hidden>")


@rule
def slurm_accounting(spec: ClusterSpec) -> Iterator[Finding]:
    if spec.slurm.accounting is None:
        yield _warning("slurm.accounting", "no Slurm accounting database: sacct cannot tell how jobs ended, "
                       "so clusterkit's job tracking (requeues, watch) and its preflight will not work",
                       "set slurm.accounting (uri, user_name, password_secret_arn) to a MySQL-compatible "
                       "database such as Amazon RDS or Aurora")


def _script_findings(path: str, actions: CustomActionsSpec | None) -> Iterator[Finding]:
    if actions is None:
        return
    for event in ("on_node_start", "on_node_configured", "on_node_updated"):
        for s, script in enumerate(getattr(actions, event)):
            if not SCRIPT_URL_RE.match(script.script):
                yield _error(f"{path}.{event}[{s}].script", "custom action scripts must be s3:// or https:// URLs",
                             "upload the script to S3 and give its s3:// URL", script.script)


@rule
def custom_actions(spec: ClusterSpec) -> Iterator[Finding]:
    yield from _script_findings("head_node.custom_actions", spec.head_node.custom_actions)
    for q, queue in enumerate(spec.queues):
        yield from _script_findings(f"queues[{q}].custom_actions", queue.custom_actions)
    if spec.pyxis.enabled and not SCRIPT_URL_RE.match(spec.pyxis.script):
        yield _error("pyxis.script", "the pyxis setup script must be an s3:// or https:// URL",
                     "upload it to S3 and give its s3:// URL", spec.pyxis.script)


@rule
def monitoring(spec: ClusterSpec) -> Iterator[Finding]:
    days = spec.monitoring.log_retention_days
    if days not in LOG_RETENTION_DAYS:
        yield _error("monitoring.log_retention_days", f"CloudWatch keeps logs for set periods, not {days} days",
                     f"use one of {', '.join(map(str, LOG_RETENTION_DAYS))}", days)


@rule
def tags(spec: ClusterSpec) -> Iterator[Finding]:
    if len(spec.tags) > MAX_TAGS:
        yield _error("tags", f"{len(spec.tags)} tags; at most {MAX_TAGS}", "drop some tags", len(spec.tags))
    for key, value in spec.tags.items():
        if not key or len(key) > TAG_KEY_MAX or key.startswith("parallelcluster:") or key.startswith("aws:"):
            yield _error(f"tags.{key}", "tag keys are 1-128 characters and may not start with 'aws:' or "
                         "'parallelcluster:'", "rename the tag", key)
        if not TAG_VALUE_RE.match(value):
            yield _error(f"tags.{key}", "tag values hold letters, digits and + - = . _ : @ / only (no spaces)",
                         "replace spaces with '-'", value)


@rule
def volume_sizes(spec: ClusterSpec) -> Iterator[Finding]:
    # ParallelCluster's official AMIs have a 40 GiB root volume (35 in older releases): a warning, not an error.
    sizes = [("head_node.root_volume_gb", spec.head_node.root_volume_gb)]
    sizes += [(f"queues[{q}].root_volume_gb", queue.root_volume_gb) for q, queue in enumerate(spec.queues)]
    for path, size in sizes:
        if size is not None and size < 40:
            yield _warning(path, f"root volume of {size} GiB is likely smaller than the AMI's (40 GiB)",
                           "use at least 40 GiB", size)

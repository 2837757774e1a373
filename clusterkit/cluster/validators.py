"""Offline checks of a cluster spec: every rule ParallelCluster 3.16 would reject, before AWS is touched.

One small function per rule. Each yields Findings whose path is the field in the user's spec.
`validate(spec)` runs them all and returns every finding together; errors are values here,
the CLI decides the exit code. The rules are measured against ParallelCluster's own validation
(tests/aws/test_differential.py); facts about instance types and regions come from the dated
table in `clusterkit.offerings`.

Every pattern is matched in full (`fullmatch`): `re.match(r"^x$")` accepts "x\\n", which is how a
newline slips into a script. `single_line` refuses control characters in every text field (the rule every
spec kind shares, `spec_reader.control_characters`) and text past `MAX_TEXT_CHARS`.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from clusterkit import offerings
from clusterkit.cluster.node_scripts import NODE_MOUNT_POINTS, system_dir_problem
from clusterkit.cluster.render import PLACEHOLDER_ACCOUNT, clusterkit_venv, enroot_dir, installs_neuron
from clusterkit.cluster.spec import (
    DEFAULT_SCRIPTS_BUCKET,
    DEFAULT_SHARED_DIR,
    DEFAULT_SSH_CIDR,
    EPHEMERAL_MOUNT_DIR,
    NETWORK_CREATE,
    NETWORK_EXISTING,
    NETWORK_MODES,
    ROOT_VOLUME_ENROOT_DIR,
    ClusterSpec,
    ComputeSpec,
    CustomActionsSpec,
    IamSpec,
    LustreSpec,
    PlacementGroupSpec,
    QueueSpec,
    uses_reserved_capacity,
)
from clusterkit.findings import Finding, error, info, shorten, similar_names, warning
from clusterkit.rules import RuleBook
from clusterkit.spec_reader import control_character, text_values

CLUSTER_RULES: RuleBook[ClusterSpec] = RuleBook("cluster")
rule = CLUSTER_RULES.rule

# Limits and allowed values of ParallelCluster 3.16. The *_RE patterns stay text and `re` compiles (and caches)
# those a spec needs: compiling all of them at import cost every CLI start 3 ms.
SUPPORTED_OS = ("alinux2023", "ubuntu2204", "ubuntu2404", "rhel8", "rhel9", "rocky8", "rocky9")
OS_WITHOUT_OFFICIAL_AMI = ("rocky8", "rocky9")
# ParallelCluster 3.16's supported regions (its `supported-regions` resource file).
PARALLELCLUSTER_REGIONS = (
    "af-south-1", "ap-east-1", "ap-northeast-1", "ap-northeast-2", "ap-south-1", "ap-southeast-1", "ap-southeast-2",
    "ap-southeast-3", "ap-southeast-5", "ap-southeast-7", "ca-central-1", "cn-north-1", "cn-northwest-1",
    "eu-central-1", "eu-north-1", "eu-south-1", "eu-west-1", "eu-west-2", "eu-west-3", "il-central-1", "me-south-1",
    "sa-east-1", "us-east-1", "us-east-2", "us-iso-east-1", "us-iso-west-1", "us-isob-east-1", "us-gov-east-1",
    "us-gov-west-1", "us-west-1", "us-west-2",
)
NODE_ARCHITECTURES = ("x86_64", "arm64")
RESOURCE_NAME_RE = r"[a-z][a-z0-9-]*"
RESOURCE_NAME_MAX = 25
CLUSTER_NAME_RE = r"[a-zA-Z][a-zA-Z0-9-]*"
CLUSTER_NAME_MAX = 60
CLUSTER_NAME_MAX_WITH_ACCOUNTING = 40
MAX_QUEUES = 50
MAX_COMPUTE_RESOURCES_PER_QUEUE = 50
MAX_COMPUTE_RESOURCES_PER_CLUSTER = 50
MAX_LOGIN_POOLS = 10
CAPACITY_TYPES = ("ONDEMAND", "SPOT", "CAPACITY_BLOCK")
CAPACITY_RESERVATION_RE = r"cr-[0-9a-f]{17}"
RESOURCE_GROUP_ARN_RE = r"arn:aws[a-z-]*:resource-groups:[a-z0-9-]+:\d{12}:group/[A-Za-z0-9_.-]{1,300}"
INSTANCE_TYPE_RE = r"[a-z][a-z0-9-]*\.[a-z0-9-]+"
REGION_RE = r"[a-z]{2}(-[a-z]+)+-\d"
SUBNET_RE = r"subnet-[0-9a-z]{8}|subnet-[0-9a-z]{17}"
AMI_ID_RE = r"ami-[0-9a-z]{8}|ami-[0-9a-z]{17}"
AMI_NAME_RE = r"[A-Za-z0-9()\[\] ./'@_-]{3,128}"  # EC2's rule for image names
LUSTRE_DEPLOYMENT_TYPES = ("SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2")
LUSTRE_THROUGHPUT = {"PERSISTENT_1": (50, 100, 200), "PERSISTENT_2": (125, 250, 500, 1000)}
LUSTRE_AUTO_IMPORT_POLICIES = ("NEW", "NEW_CHANGED", "NEW_CHANGED_DELETED")
IMPORTED_FILE_CHUNK_MIB = (1, 512_000)
DRA_POLICY_EVENTS = ("NEW", "CHANGED", "DELETED")
MAX_DATA_REPOSITORY_ASSOCIATIONS = 8
FSX_LUSTRE_ID_RE = r"fs-[0-9a-z]{17}"
EFS_ID_RE = r"fs-[0-9a-z]{8}|fs-[0-9a-z]{17}"
FSX_VOLUME_ID_RE = r"fsvol-[0-9a-f]{17}"
EBS_VOLUME_ID_RE = r"vol-[0-9a-z]{8}|vol-[0-9a-z]{17}"
# Size bounds in GiB per EBS volume type.
EBS_SIZES = {"standard": (1, 1024), "io1": (4, 16_384), "io2": (4, 65_536), "gp2": (1, 16_384),
             "gp3": (1, 16_384), "st1": (500, 16_384), "sc1": (500, 16_384)}
EBS_DEFAULT_SIZE_GIB = 40  # ParallelCluster's, for a new shared volume without a size
ROOT_VOLUME_TYPE = "gp3"
AMI_ROOT_VOLUME_GIB = 45  # ParallelCluster 3.16's official AMIs
EFS_THROUGHPUT_MODES = ("provisioned", "bursting")
EFS_PROVISIONED_MIBPS = (1, 1024)
DELETION_POLICIES = ("Delete", "Retain")
EBS_DELETION_POLICIES = ("Delete", "Retain", "Snapshot")
MAX_NEW_FSX = MAX_NEW_EFS = 1
MAX_EXISTING_FSX = MAX_EXISTING_EFS = 20
MAX_EBS = 5
STORAGE_NAME_MAX = 30
# Storage names become tag values of ParallelCluster's own resources: its stricter rule.
STORAGE_NAME_RE = r"[\w+\-=.:@/]{1,256}"
TAG_KEY_MAX = 128
TAG_VALUE_MAX = 256
TAG_PUNCTUATION = frozenset(" _.:/=+-@")  # AWS tags: letters, digits, spaces and these
MAX_TAGS = 40
# ParallelCluster's path pattern: no empty, "." or ".." segments, no trailing "/", no "\" at a segment start.
MOUNT_DIR_RE = r"/?[^/.\\][^/\\]*(/[^/.\\][^/]*)*"
# A path clusterkit passes to a root shell script and to enroot's shell-expanded configuration.
SAFE_PATH_RE = r"(/[A-Za-z0-9_-][A-Za-z0-9._-]*)+"
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
SLURM_DENIED_NODE_SETTINGS = frozenset(("cpus", "gres", "nodeaddr", "nodehostname", "nodename", "state", "weight"))
SLURM_KEY_RE = r"[A-Za-z][A-Za-z0-9]*"
# A slurm.conf value: one word, or all of it in double quotes. Outside quotes a space ends the value and what
# follows is read as the line's next `Key=value`; `#` starts a comment even inside quotes (a separate check).
SLURM_VALUE_RE = r'[^\s"]*|"[^"]*"'
# A value that hides a second `Key=value` (slurm.conf lines hold several, separated by spaces).
SLURM_SECOND_SETTING_RE = r"\s[A-Za-z][A-Za-z0-9]*="
LOG_RETENTION_DAYS = (0, 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1827, 3653)
SECRET_ARN_RE = r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+"
DATABASE_URI_RE = r"(?P<host>[A-Za-z0-9.-]+)(:(?P<port>\d{1,5}))?"
DATABASE_USER_RE = r"[A-Za-z0-9_.@-]{1,32}"  # one word: it lands in slurmdbd.conf
SCRIPT_URL_RE = r"(s3|https)://[^\s]+"
SECURITY_GROUP_RE = r"sg-([0-9a-f]{8}|[0-9a-f]{17})"
# What the head node's pip installs as root, as clusterkit-venv.sh accepts it (it checks again): a project of the
# package index (name, extras, version specifiers) or an https:// URL. Never another scheme (http://, file://,
# git+...), a local path or archive (pip installs `x.whl` from the working directory), an option or two words.
_PIP_NAME = r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?"
_PIP_VERSION = r"(===|==|!=|~=|<=|>=|<|>)[A-Za-z0-9.*+!_-]+"
PIP_REQUIREMENT_RE = rf"{_PIP_NAME}(\[{_PIP_NAME}(,{_PIP_NAME})*\])?({_PIP_VERSION}(,{_PIP_VERSION})*)?"
PIP_URL_RE = r"https://[A-Za-z0-9.-]+(:[0-9]{1,5})?/[A-Za-z0-9._~%+=,!@:/-]*"
PIP_ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz")
POLICY_ARN_RE = r"arn:aws[a-z-]*:iam::(aws|\d{12}):policy/[\w+=,.@/-]{1,512}"
POLICY_NAME_RE = r"[\w+=,.@-]{1,128}"
BUCKET_RE = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
PREFIX_LIST_RE = r"pl-[a-zA-Z0-9]+"
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
IPV4_CIDR_RE = rf"({_OCTET}\.){{3}}{_OCTET}/(3[0-2]|[12][0-9]|[0-9])"  # the mask is required
WORLD_CIDR = "0.0.0.0/0"
MAX_TEXT_CHARS = 4096


def validate(spec: ClusterSpec) -> list[Finding]:
    """Run every rule on the spec; errors first, then warnings and infos, each in rule order."""
    return CLUSTER_RULES.check(spec)


def _compute_resources(spec: ClusterSpec) -> Iterator[tuple[str, QueueSpec, str, ComputeSpec]]:
    for q, queue in enumerate(spec.queues):
        for c, compute in enumerate(queue.compute):
            yield f"queues[{q}]", queue, f"queues[{q}].compute[{c}]", compute


def _suggest(value: str, choices: Iterable[str]) -> str:
    choices = list(choices)
    close = similar_names(value, choices, cutoff=0.5)
    if close:
        return f"did you mean {close[0]!r}? (one of: {', '.join(choices)})"
    return f"use one of: {', '.join(choices)}"


def _full(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern, value) is not None


# --- text: one line, bounded ---------------------------------------------------------------------


@rule
def single_line(spec: ClusterSpec) -> Iterator[Finding]:
    """Every text value lands in a config line, a script argument or a slurm.conf line: one line each."""
    for value in text_values(spec):
        control = control_character(value)
        if control is not None:
            yield control
        elif len(value.text) > MAX_TEXT_CHARS:
            yield error(value.path, f"is {len(value.text):,} characters; no field needs more than "
                        f"{MAX_TEXT_CHARS:,}", "shorten it", value.text)


# --- names and counts ---------------------------------------------------------------------------


@rule
def cluster_name(spec: ClusterSpec) -> Iterator[Finding]:
    limit = CLUSTER_NAME_MAX_WITH_ACCOUNTING if spec.slurm.accounting else CLUSTER_NAME_MAX
    if not _full(CLUSTER_NAME_RE, spec.name):
        yield error("name", "cluster name must start with a letter and hold only letters, digits and '-'",
                    "rename it, e.g. 'train-p4de'", spec.name)
    if len(spec.name) > limit:
        why = " with Slurm accounting" if spec.slurm.accounting else ""
        yield error("name", f"cluster name is {len(spec.name)} characters; at most {limit} allowed{why}",
                    f"shorten it to {limit} characters", spec.name)


def _resource_name_findings(path: str, name: str, what: str) -> Iterator[Finding]:
    if not _full(RESOURCE_NAME_RE, name):
        yield error(path, f"{what} name must start with a lower-case letter and hold only a-z, 0-9 and '-'",
                    "use a name like 'gpu' or 'p4de-od'", name)
    if len(name) > RESOURCE_NAME_MAX:
        yield error(path, f"{what} name is {len(name)} characters; at most {RESOURCE_NAME_MAX} allowed",
                    f"shorten it to {RESOURCE_NAME_MAX} characters", name)
    if name == "default":
        yield error(path, f"'default' is reserved and cannot be a {what} name", "pick another name", name)


def _duplicates(names: list[str], path_of: Callable[[int], str], what: str) -> Iterator[Finding]:
    counts = Counter(names)
    for index, name in enumerate(names):
        if counts[name] > 1 and names.index(name) != index:
            yield error(path_of(index), f"duplicate {what} name {name!r}", f"give each {what} its own name", name)


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
        yield error("queues", "a cluster needs at least one queue", "add a queue with one compute resource")
    if len(spec.queues) > MAX_QUEUES:
        yield error("queues", f"{len(spec.queues)} queues; at most {MAX_QUEUES} allowed",
                    "merge queues", len(spec.queues))
    for q, queue in enumerate(spec.queues):
        if not queue.compute:
            yield warning(f"queues[{q}].compute", f"queue {queue.name!r} has no compute resource: it never runs a job",
                          "add a compute resource with a name and an instance_type, or remove the queue")
        if len(queue.compute) > MAX_COMPUTE_RESOURCES_PER_QUEUE:
            yield error(f"queues[{q}].compute", f"{len(queue.compute)} compute resources; at most "
                        f"{MAX_COMPUTE_RESOURCES_PER_QUEUE} per queue", "split the queue", len(queue.compute))
    total = sum(len(queue.compute) for queue in spec.queues)
    if total > MAX_COMPUTE_RESOURCES_PER_CLUSTER:
        yield error("queues", f"{total} compute resources in the cluster; at most "
                    f"{MAX_COMPUTE_RESOURCES_PER_CLUSTER} allowed", "remove compute resources", total)


@rule
def node_counts(spec: ClusterSpec) -> Iterator[Finding]:
    for _, _, path, compute in _compute_resources(spec):
        if compute.min_count is not None and compute.min_count < 0:
            yield error(f"{path}.min_count", "min_count must be 0 or more", "set min_count: 0 for no static nodes",
                        compute.min_count)
        if compute.max_count is not None and compute.max_count < 1:
            yield error(f"{path}.max_count", "max_count must be at least 1", "set max_count to the most nodes",
                        compute.max_count)
        if compute.effective_max_count < compute.effective_min_count:
            yield error(f"{path}.max_count",
                        f"max_count {compute.effective_max_count} is below min_count {compute.effective_min_count}",
                        "raise max_count to at least min_count", compute.effective_max_count)


@rule
def login_nodes(spec: ClusterSpec) -> Iterator[Finding]:
    if len(spec.login_nodes) > MAX_LOGIN_POOLS:
        yield error("login_nodes", f"{len(spec.login_nodes)} login node pools; at most {MAX_LOGIN_POOLS}",
                    "merge pools", len(spec.login_nodes))
    for p, pool in enumerate(spec.login_nodes):
        yield from _resource_name_findings(f"login_nodes[{p}].name", pool.name, "login node pool")
        if pool.count < 0:
            yield error(f"login_nodes[{p}].count", "count must be 0 or more", "e.g. count: 1", pool.count)
    yield from _duplicates([pool.name for pool in spec.login_nodes], lambda p: f"login_nodes[{p}].name",
                           "login node pool")


# --- instance types: existence, regions, architectures, EFA ---------------------------------------


def _instance_types(spec: ClusterSpec) -> Iterator[tuple[str, str]]:
    """(path, instance type) of every node of the cluster."""
    yield "head_node.instance_type", spec.head_node.instance_type
    for p, pool in enumerate(spec.login_nodes):
        yield f"login_nodes[{p}].instance_type", pool.instance_type
    for _, _, path, compute in _compute_resources(spec):
        yield f"{path}.instance_type", compute.instance_type


@rule
def instance_types(spec: ClusterSpec) -> Iterator[Finding]:
    table = offerings.table()
    for path, name in _instance_types(spec):
        if table.facts(name) is not None:
            continue
        close = table.similar(name)
        fix = (f"did you mean {' or '.join(map(repr, close))}?" if close
               else "see `aws ec2 describe-instance-types` for the names of EC2 instance types")
        what = "is not an EC2 instance type" if not _full(INSTANCE_TYPE_RE, name) else "does not exist in EC2"
        yield error(path, f"{name!r} {what} (clusterkit's instance table of {table.generated})", fix, name)


@rule
def instance_regions(spec: ClusterSpec) -> Iterator[Finding]:
    table = offerings.table()
    if not table.covers(spec.region):
        if _full(REGION_RE, spec.region):
            yield warning("region", f"clusterkit's instance table ({table.generated}) has no data for "
                          f"{spec.region}: whether it offers these instance types is checked only at create",
                          "regenerate the table (scripts/regenerate-instance-offerings.py), or create the "
                          "cluster to have AWS check", spec.region)
        return
    for path, name in _instance_types(spec):
        if table.facts(name) is None or table.offered(name, spec.region):
            continue
        where = table.regions_offering(name)
        offered = f"it is offered in {', '.join(where)}" if where else "no region offers it"
        yield error(path, f"{name} is not offered in {spec.region} ({offered}; instance table of "
                    f"{table.generated})", "use one of those regions (--region), or another instance type", name)


@rule
def architectures(spec: ClusterSpec) -> Iterator[Finding]:
    """Compute nodes boot the head node's image, so they share its architecture (login pools get an image
    of their own architecture; a custom AMI's architecture is checked at create)."""
    table = offerings.table()
    head = table.facts(spec.head_node.instance_type)
    for path, name in _instance_types(spec):
        facts = table.facts(name)
        if facts is None:
            continue
        if facts.architecture not in NODE_ARCHITECTURES:
            yield error(path, f"{name} is a {facts.architecture} type; ParallelCluster runs x86_64 and arm64 nodes",
                        "choose an x86_64 or arm64 instance type", name)
        elif head is not None and facts.architecture != head.architecture and path.startswith("queues["):
            yield error(path, f"{name} is {facts.architecture} but the head node ({head.name}) is "
                        f"{head.architecture}: compute nodes boot the head node's {head.architecture} image",
                        f"choose a {head.architecture} instance type, or a head node of {facts.architecture}", name)


@rule
def efa_support(spec: ClusterSpec) -> Iterator[Finding]:
    for _, _, path, compute in _compute_resources(spec):
        facts = compute.facts
        if facts is None:
            continue
        if compute.efa and not facts.efa:
            yield error(f"{path}.efa", f"{compute.instance_type} has no EFA network interface",
                        "set efa: false, or use an EFA-capable type (p4de, p5, trn1, g5.8xlarge and up)", True)
        elif compute.efa is False and facts.efa:
            yield warning(f"{path}.efa", f"{compute.instance_type} supports EFA but it is turned off; multi-node "
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
            yield error(path, "placement group has both 'id' and 'name'", "keep only 'name'", group.id)
        if group.enabled is False and (group.id or group.name):
            yield error(path, "placement group is disabled but names an existing group",
                        "remove 'name'/'id', or set enabled: true", group.name or group.id)


@rule
def efa_placement(spec: ClusterSpec) -> Iterator[Finding]:
    for queue_path, queue, path, compute in _compute_resources(spec):
        if not compute.efa_enabled:
            continue
        if len(spec.queue_subnets(queue)) > 1:
            yield error(f"{queue_path}.subnet_ids", "EFA needs all nodes in one Availability Zone; this queue "
                        "spans several subnets", "give the queue one subnet, or set efa: false",
                        spec.queue_subnets(queue))
            continue
        group, group_path = _effective_placement(queue, compute, queue_path, path)
        if group is None or group.enabled is None:
            continue
        if group.enabled is False and not uses_reserved_capacity(queue, compute):
            yield warning(f"{group_path}.enabled", "EFA without a placement group: nodes may land far apart and "
                          "collective bandwidth drops", "remove 'enabled: false'", False)
        elif group.enabled and uses_reserved_capacity(queue, compute):
            yield warning(f"{group_path}.enabled", "a placement group with a Capacity Block or capacity "
                          "reservation causes insufficient-capacity errors",
                          "remove the placement_group (clusterkit then disables it)", True)


@rule
def capacity(spec: ClusterSpec) -> Iterator[Finding]:
    for q, queue in enumerate(spec.queues):
        if queue.capacity_type not in CAPACITY_TYPES:
            yield error(f"queues[{q}].capacity_type", f"unknown capacity type {queue.capacity_type!r}",
                        _suggest(queue.capacity_type, CAPACITY_TYPES), queue.capacity_type)
    for _, queue, path, compute in _compute_resources(spec):
        reservation = compute.capacity_reservation_id
        group = compute.capacity_reservation_resource_group_arn
        if reservation is not None and not _full(CAPACITY_RESERVATION_RE, reservation):
            yield error(f"{path}.capacity_reservation_id", "capacity reservation ids look like cr-<17 hex digits>",
                        "copy the id from the EC2 console (Capacity Reservations)", reservation)
        if group is not None and not _full(RESOURCE_GROUP_ARN_RE, group):
            yield error(f"{path}.capacity_reservation_resource_group_arn", "a resource group ARN looks like "
                        "arn:aws:resource-groups:REGION:ACCOUNT:group/NAME", "copy the group's ARN", group)
        if reservation is not None and group is not None:
            yield error(f"{path}.capacity_reservation_resource_group_arn", "give either a capacity reservation or "
                        "a resource group of reservations, not both", "remove one of them", group)
        if queue.capacity_type != "CAPACITY_BLOCK":
            continue
        if reservation is None:
            yield error(f"{path}.capacity_reservation_id", "a Capacity Block queue needs the reservation id "
                        "of the block", "set capacity_reservation_id: cr-...")
        low, high = compute.effective_min_count, compute.effective_max_count
        if low != high or high < 1:
            yield error(f"{path}.min_count", f"with CAPACITY_BLOCK min_count and max_count must be equal and "
                        f"above 0 (got {low} and {high})", "set both to the number of instances in the block",
                        [low, high])


# --- shared storage ----------------------------------------------------------------------------


def _chunk_size_findings(path: str, size: int | None) -> Iterator[Finding]:
    low, high = IMPORTED_FILE_CHUNK_MIB
    if size is not None and not low <= size <= high:
        yield error(path, f"imported_file_chunk_size is {low} to {high:,} MiB", "e.g. 1024", size)


def _lustre_new_findings(path: str, fsx: LustreSpec) -> Iterator[Finding]:
    deployment = fsx.effective_deployment_type
    if deployment not in LUSTRE_DEPLOYMENT_TYPES:
        yield error(f"{path}.deployment_type", f"unknown FSx for Lustre deployment type {deployment!r}",
                    _suggest(deployment, LUSTRE_DEPLOYMENT_TYPES), deployment)
        return
    capacity = fsx.effective_capacity_gib
    if deployment == "SCRATCH_1":
        ok, allowed = capacity in (1200, 2400) or (capacity > 0 and capacity % 3600 == 0), "1200, 2400 or n × 3600"
    else:
        ok, allowed = capacity == 1200 or (capacity > 0 and capacity % 2400 == 0), "1200 or n × 2400"
    if not ok:
        yield error(f"{path}.storage_capacity_gib", f"{deployment} capacity must be {allowed} GiB",
                    f"use {allowed} GiB, e.g. 1200 or 4800", capacity)
    throughput = fsx.per_unit_storage_throughput
    if deployment in LUSTRE_THROUGHPUT:
        allowed_throughput = LUSTRE_THROUGHPUT[deployment]
        if throughput is not None and throughput not in allowed_throughput:
            yield error(f"{path}.per_unit_storage_throughput", f"{deployment} takes "
                        f"{', '.join(map(str, allowed_throughput))} MB/s per TiB",
                        f"use one of {', '.join(map(str, allowed_throughput))}", throughput)
    elif throughput is not None:
        yield error(f"{path}.per_unit_storage_throughput", f"{deployment} has no per-unit throughput setting",
                    "remove per_unit_storage_throughput, or use PERSISTENT_2", throughput)
    if fsx.data_compression is not None and fsx.data_compression != "LZ4":
        yield error(f"{path}.data_compression", "FSx for Lustre compresses only with LZ4", "set data_compression: LZ4",
                    fsx.data_compression)
    if fsx.import_path is None:
        for key in ("export_path", "auto_import_policy", "imported_file_chunk_size"):
            if getattr(fsx, key) is not None:
                yield error(f"{path}.{key}", f"{key} needs import_path", "set import_path: s3://BUCKET/PREFIX, or "
                            "use data_repository_associations", getattr(fsx, key))
    yield from _chunk_size_findings(f"{path}.imported_file_chunk_size", fsx.imported_file_chunk_size)
    if fsx.auto_import_policy is not None and fsx.auto_import_policy not in LUSTRE_AUTO_IMPORT_POLICIES:
        yield error(f"{path}.auto_import_policy", f"unknown auto import policy {fsx.auto_import_policy!r}",
                    _suggest(fsx.auto_import_policy, LUSTRE_AUTO_IMPORT_POLICIES), fsx.auto_import_policy)
    for key in ("import_path", "export_path"):
        value = getattr(fsx, key)
        if value is not None and not value.startswith("s3://"):
            yield error(f"{path}.{key}", f"{key} must be an S3 URL", "write it as s3://BUCKET/PREFIX", value)
    yield from _dra_findings(path, fsx)


def _dra_findings(path: str, fsx: LustreSpec) -> Iterator[Finding]:
    associations = fsx.data_repository_associations
    if not associations:
        return
    if len(associations) > MAX_DATA_REPOSITORY_ASSOCIATIONS:
        yield error(f"{path}.data_repository_associations", f"{len(associations)} data repository associations; "
                    f"at most {MAX_DATA_REPOSITORY_ASSOCIATIONS}", "merge S3 prefixes", len(associations))
    for key in ("import_path", "export_path"):
        if getattr(fsx, key) is not None:
            yield error(f"{path}.{key}", f"{key} cannot be combined with data_repository_associations",
                        f"remove {key}; describe the S3 link as a data repository association", getattr(fsx, key))
    for d, association in enumerate(associations):
        dra_path = f"{path}.data_repository_associations[{d}]"
        if not association.data_repository_path.startswith("s3://"):
            yield error(f"{dra_path}.data_repository_path", "must be an S3 URL", "write it as s3://BUCKET/PREFIX",
                        association.data_repository_path)
        if not association.file_system_path.startswith("/"):
            yield warning(f"{dra_path}.file_system_path", "a path inside the file system starts with '/'",
                          f"write /{association.file_system_path}", association.file_system_path)
        yield from _chunk_size_findings(f"{dra_path}.imported_file_chunk_size", association.imported_file_chunk_size)
        for key in ("auto_import_policy", "auto_export_policy"):
            for event in getattr(association, key):
                if event not in DRA_POLICY_EVENTS:
                    yield error(f"{dra_path}.{key}", f"unknown event {event!r}", _suggest(event, DRA_POLICY_EVENTS),
                                event)
    names = Counter(a.name for a in associations)
    for d, association in enumerate(associations):
        if names[association.name] > 1:
            yield warning(f"{path}.data_repository_associations[{d}].name", f"two associations are named "
                          f"{association.name!r}: a cluster update cannot tell them apart", "give each its own name",
                          association.name)


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
        if not _full(FSX_LUSTRE_ID_RE, fsx.file_system_id or ""):
            yield error(f"{path}.file_system_id", "FSx file system ids look like fs-<17 characters>",
                        "copy the id from the FSx console", fsx.file_system_id)
        for key in _LUSTRE_CREATION_FIELDS:
            if getattr(fsx, key) is not None:
                yield error(f"{path}.{key}", f"{key} only applies to a new file system, not to file_system_id",
                            f"remove {key}", getattr(fsx, key))
        if fsx.data_repository_associations:
            yield error(f"{path}.data_repository_associations", "data repository associations only apply to a "
                        "new file system", "manage them on the existing file system",
                        len(fsx.data_repository_associations))


@rule
def efs_settings(spec: ClusterSpec) -> Iterator[Finding]:
    low, high = EFS_PROVISIONED_MIBPS
    for i, efs in enumerate(spec.storage.efs):
        path = f"storage.efs[{i}]"
        if not efs.is_new:
            if not _full(EFS_ID_RE, efs.file_system_id or ""):
                yield error(f"{path}.file_system_id", "EFS ids look like fs-<8 or 17 characters>",
                            "copy the id from the EFS console", efs.file_system_id)
            for key in ("throughput_mode", "provisioned_throughput", "deletion_policy"):
                if getattr(efs, key) is not None:
                    yield error(f"{path}.{key}", f"{key} only applies to a new file system", f"remove {key}",
                                getattr(efs, key))
            continue
        mode, throughput = efs.throughput_mode, efs.provisioned_throughput
        if mode is not None and mode not in EFS_THROUGHPUT_MODES:
            yield error(f"{path}.throughput_mode", f"unknown EFS throughput mode {mode!r}",
                        _suggest(mode, EFS_THROUGHPUT_MODES), mode)
        elif mode == "provisioned" and throughput is None:
            yield error(f"{path}.provisioned_throughput", "throughput_mode provisioned needs provisioned_throughput",
                        f"set provisioned_throughput in MiB/s ({low}-{high})")
        elif mode != "provisioned" and throughput is not None:
            yield error(f"{path}.provisioned_throughput", "provisioned_throughput needs throughput_mode: provisioned",
                        "set throughput_mode: provisioned, or remove provisioned_throughput", throughput)
        if throughput is not None and not low <= throughput <= high:
            yield error(f"{path}.provisioned_throughput", f"provisioned_throughput is {low} to {high} MiB/s",
                        "e.g. 128", throughput)


def _ebs_size_findings(path: str, volume_type: str, size: int, what: str) -> Iterator[Finding]:
    if volume_type not in EBS_SIZES:
        return
    low, high = EBS_SIZES[volume_type]
    if not low <= size <= high:
        yield error(path, f"{what} {volume_type} volume of {size} GiB; {volume_type} volumes are {low} to "
                    f"{high:,} GiB", f"give a size from {low} to {high:,} GiB", size)


@rule
def openzfs_and_ebs_settings(spec: ClusterSpec) -> Iterator[Finding]:
    for i, volume in enumerate(spec.storage.openzfs):
        if not _full(FSX_VOLUME_ID_RE, volume.volume_id):
            yield error(f"storage.openzfs[{i}].volume_id", "FSx volume ids look like fsvol-<17 hex digits>",
                        "copy the volume id from the FSx console", volume.volume_id)
    for i, ebs in enumerate(spec.storage.ebs):
        path = f"storage.ebs[{i}]"
        if ebs.volume_type not in EBS_SIZES:
            yield error(f"{path}.volume_type", f"unknown EBS volume type {ebs.volume_type!r}",
                        _suggest(ebs.volume_type, EBS_SIZES), ebs.volume_type)
        if not ebs.is_new:
            if not _full(EBS_VOLUME_ID_RE, ebs.volume_id or ""):
                yield error(f"{path}.volume_id", "EBS volume ids look like vol-<17 characters>",
                            "copy the id from the EC2 console", ebs.volume_id)
            for key in ("size_gib", "deletion_policy"):
                if getattr(ebs, key) is not None:
                    yield warning(f"{path}.{key}", f"{key} is ignored for an existing volume (volume_id)",
                                  f"remove {key}", getattr(ebs, key))
        elif ebs.size_gib is None:
            yield from _ebs_size_findings(f"{path}.size_gib", ebs.volume_type, EBS_DEFAULT_SIZE_GIB,
                                          "no size_gib gives a default")
        else:
            yield from _ebs_size_findings(f"{path}.size_gib", ebs.volume_type, ebs.size_gib, "a")


@rule
def deletion_policies(spec: ClusterSpec) -> Iterator[Finding]:
    entries = [(f"storage.lustre[{i}]", s.deletion_policy, DELETION_POLICIES)
               for i, s in enumerate(spec.storage.lustre)]
    entries += [(f"storage.efs[{i}]", s.deletion_policy, DELETION_POLICIES) for i, s in enumerate(spec.storage.efs)]
    entries += [(f"storage.ebs[{i}]", s.deletion_policy, EBS_DELETION_POLICIES)
                for i, s in enumerate(spec.storage.ebs)]
    for path, policy, allowed in entries:
        if policy is not None and policy not in allowed:
            yield error(f"{path}.deletion_policy", f"unknown deletion policy {policy!r}", _suggest(policy, allowed),
                        policy)


@rule
def storage_counts(spec: ClusterSpec) -> Iterator[Finding]:
    storage = spec.storage
    new_fsx = sum(1 for fsx in storage.lustre if fsx.is_new)
    existing_fsx = len(storage.lustre) - new_fsx + len(storage.openzfs)
    new_efs = sum(1 for efs in storage.efs if efs.is_new)
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
            yield error(path, f"{count} {what}; at most {limit} allowed", fix, count)


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
            yield error(f"{path}.name", f"storage name is {len(name)} characters; at most {STORAGE_NAME_MAX}",
                        f"shorten it to {STORAGE_NAME_MAX} characters", name)
        if name == "default":
            yield error(f"{path}.name", "'default' is reserved and cannot be a storage name", "pick another name",
                        name)
        if not _full(STORAGE_NAME_RE, name):
            yield error(f"{path}.name", "storage names hold letters, digits and + - = . _ : @ / only",
                        "e.g. 'fsx' or 'home'", name)
    yield from _duplicates([name for _, name, _ in entries], lambda i: f"{entries[i][0]}.name", "storage")


def _normalized_mount_dir(mount_dir: str) -> str:
    return "/" + mount_dir.strip("/")


@rule
def mount_dirs(spec: ClusterSpec) -> Iterator[Finding]:
    seen: list[tuple[str, str]] = []
    for path, _, mount_dir in _storage_entries(spec):
        field = f"{path}.mount_dir"
        if not _full(MOUNT_DIR_RE, mount_dir):
            yield error(field, "mount_dir must be a path without empty, '.' or '..' parts and without a "
                        "trailing '/'", "e.g. /fsx or /data/shared", mount_dir)
            continue
        if not mount_dir.startswith("/"):
            yield warning(field, f"a relative mount_dir is mounted at /{mount_dir}",
                          f"write the absolute path /{mount_dir}", mount_dir)
        if any(character.isspace() for character in mount_dir):
            yield warning(field, "a mount_dir with a space breaks every script and job path that does not quote it",
                          "use '-' or '_' instead of spaces", mount_dir)
        normalized = _normalized_mount_dir(mount_dir)
        problem = system_dir_problem(normalized)
        if problem:
            yield error(field, f"{problem}: storage mounted there hides what the nodes need",
                        "mount at /fsx, /data or /home", mount_dir)
            continue
        for other_path, other in seen:
            if normalized == other:
                yield error(field, f"{normalized} is already the mount_dir of {other_path}",
                            "give each storage its own mount_dir", mount_dir)
            elif normalized.startswith(other + "/") or other.startswith(normalized + "/"):
                yield error(field, f"{normalized} overlaps {other} ({other_path})",
                            "mount storage side by side, not inside each other", mount_dir)
        seen.append((path, normalized))


@rule
def managed_storage_subnets(spec: ClusterSpec) -> Iterator[Finding]:
    """ParallelCluster creates FSx for Lustre in one Availability Zone: not with queues in several."""
    new_lustre = [i for i, fsx in enumerate(spec.storage.lustre) if fsx.is_new]
    if not new_lustre:
        return
    for q, queue in enumerate(spec.queues):
        if len(spec.queue_subnets(queue)) > 1:
            yield error(f"queues[{q}].subnet_ids", "a queue in several subnets cannot reach the FSx for Lustre "
                        f"file system the cluster creates (storage.lustre[{new_lustre[0]}], one Availability Zone)",
                        "give the queue one subnet, or mount an existing file system by file_system_id",
                        spec.queue_subnets(queue))


# --- cluster-wide settings ---------------------------------------------------------------------


@rule
def operating_system(spec: ClusterSpec) -> Iterator[Finding]:
    if spec.os == "alinux2":
        yield error("os", "alinux2 was dropped in ParallelCluster 3.16", "use alinux2023 or ubuntu2204", spec.os)
    elif spec.os not in SUPPORTED_OS:
        yield error("os", f"ParallelCluster 3.16 does not support os {spec.os!r}", _suggest(spec.os, SUPPORTED_OS),
                    spec.os)
    elif spec.os in OS_WITHOUT_OFFICIAL_AMI and not spec.image.custom_ami:
        yield error("image.custom_ami", f"ParallelCluster publishes no {spec.os} image: {spec.os} needs a custom AMI",
                    "build one with `pcluster build-image` and set image.custom_ami, or use ubuntu2204", spec.os)


@rule
def image(spec: ClusterSpec) -> Iterator[Finding]:
    custom = spec.image.custom_ami
    if custom is None:
        return
    if custom.startswith("ami-"):
        if not _full(AMI_ID_RE, custom):
            yield error("image.custom_ami", "AMI ids look like ami-<17 characters>", "copy the id from the EC2 "
                        "console, or give the image's name", custom)
    elif not _full(AMI_NAME_RE, custom):
        yield error("image.custom_ami", "not an AMI id (ami-...) nor an AMI name (3-128 letters, digits, spaces "
                    "and ( ) [ ] . / ' @ _ -)", "give the image's id or exact name", custom)
    else:
        yield info("image.custom_ami", f"AMI {custom!r} is looked up by name at create; until then the config "
                   "holds a placeholder id", "give the ami- id to see it in the dry run", custom)


@rule
def region(spec: ClusterSpec) -> Iterator[Finding]:
    if not _full(REGION_RE, spec.region):
        yield error("region", f"{spec.region!r} is not an AWS region name", "e.g. us-east-1", spec.region)
    elif spec.region not in PARALLELCLUSTER_REGIONS:
        yield error("region", f"ParallelCluster 3.16 does not support {spec.region}",
                    _suggest(spec.region, PARALLELCLUSTER_REGIONS), spec.region)


@rule
def subnets(spec: ClusterSpec) -> Iterator[Finding]:
    given = [("subnet_id", spec.subnet_id), ("head_node.subnet_id", spec.head_node.subnet_id)]
    given += [(f"queues[{q}].subnet_ids[{s}]", subnet) for q, queue in enumerate(spec.queues)
              for s, subnet in enumerate(queue.subnet_ids)]
    given += [(f"login_nodes[{p}].subnet_id", pool.subnet_id) for p, pool in enumerate(spec.login_nodes)]
    for path, subnet in given:
        if subnet is not None and not _full(SUBNET_RE, subnet):
            yield error(path, "subnet ids look like subnet-<8 or 17 characters>", "copy the id from the VPC console",
                        subnet)
    partial = spec.subnet_id is None and (spec.head_node.subnet_id is None
                                          or not all(q.subnet_ids for q in spec.queues))
    named = any(subnet for _, subnet in given)
    if spec.network == NETWORK_CREATE and named:
        path, subnet = next((path, subnet) for path, subnet in given if subnet)
        yield error(path, "network: create makes the cluster's subnets; a subnet given as well is never used",
                    "leave the subnets out, or set network: existing", subnet)
    elif spec.network == NETWORK_EXISTING and partial:
        yield warning("subnet_id", "no subnet given: the config holds a placeholder subnet; at create a subnet of "
                      "the default VPC is chosen", "pass --subnet-id or set subnet_id in the spec")
    elif partial and not named:
        yield info("subnet_id", "no subnet given: at create, a private subnet of the account that fits, or else a "
                   "network of clusterkit's own (its prerequisites stack: VPC, public and private subnet, NAT "
                   "gateway, S3 endpoint); the config holds placeholders until then",
                   "pass --subnet-id, or set network: create or existing")
    elif partial:
        yield warning("subnet_id", "no subnet given: the config holds a placeholder subnet that must be replaced "
                      "before creating the cluster", "pass --subnet-id or set subnet_id in the spec")


@rule
def network(spec: ClusterSpec) -> Iterator[Finding]:
    if spec.network is not None and spec.network not in NETWORK_MODES:
        yield error("network", f"network is one of {', '.join(NETWORK_MODES)}", "create: a network of clusterkit's "
                    "own; existing: the spec's subnets or the default VPC; leave it out to decide at create",
                    spec.network)
    for g, group in enumerate(spec.head_node.additional_security_groups):
        if not _full(SECURITY_GROUP_RE, group):
            yield error(f"head_node.additional_security_groups[{g}]", "security group ids look like "
                        "sg-<8 or 17 characters>", "copy the id from the VPC console", group)


@rule
def clusterkit_on_nodes(spec: ClusterSpec) -> Iterator[Finding]:
    package = spec.clusterkit.package
    by_name = package is not None and _full(PIP_REQUIREMENT_RE, package) and not package.endswith(PIP_ARCHIVE_SUFFIXES)
    if package is not None and not by_name and not _full(PIP_URL_RE, package):
        yield error("clusterkit.package", f"{shorten(package)!r} is neither one requirement of the package index nor "
                    "an https:// URL (root installs it on the head node: no other scheme, local file, option or "
                    "second word)",
                    "e.g. clusterkit==0.1.0 or https://example.com/clusterkit-0.1.0-py3-none-any.whl", package)
    if spec.clusterkit.install:
        yield info("clusterkit.install", f"the head node installs clusterkit into {clusterkit_venv(spec)} (shared "
                   f"storage): supervised jobs run {clusterkit_venv(spec)}/bin/python unless supervise.python "
                   "names another",
                   "set clusterkit.install: false to leave clusterkit off the nodes")


@rule
def ssh_access(spec: ClusterSpec) -> Iterator[Finding]:
    cidr = spec.ssh.allowed_cidr
    if cidr is None:
        yield info("ssh.allowed_cidr", f"SSH to the head node is allowed from {DEFAULT_SSH_CIDR} only",
                   "set ssh.allowed_cidr to your network, or connect with SSM Session Manager", DEFAULT_SSH_CIDR)
    elif _full(PREFIX_LIST_RE, cidr):
        pass
    elif not _full(IPV4_CIDR_RE, cidr):
        yield error("ssh.allowed_cidr", f"{cidr!r} is not an IPv4 CIDR block with a mask, nor a prefix list id",
                    "write it like 203.0.113.0/24 (a single address as 203.0.113.7/32), or pl-...", cidr)
    elif cidr == WORLD_CIDR:
        yield warning("ssh.allowed_cidr", "SSH to the head node is open to the whole internet",
                      "restrict it to your network, e.g. 203.0.113.0/24", cidr)
    if not spec.ssh.key_name:
        yield warning("ssh.key_name", "no SSH key pair: you reach the head node through SSM Session Manager",
                      "pass --key-name or set ssh.key_name (an ed25519 key; RSA fails on ubuntu2204)")


def _slurm_settings_findings(path: str, settings: dict[str, str], denied: frozenset[str], level: str
                             ) -> Iterator[Finding]:
    for key, value in settings.items():
        field = f"{path}.{key}"
        if not _full(SLURM_KEY_RE, key):
            yield error(field, "a slurm.conf key holds only letters and digits", "e.g. RequeueExit", key)
        elif key.lower() in denied:
            yield error(field, f"ParallelCluster manages {key} itself and rejects it at {level} level",
                        f"remove {key}", value)
        if "#" in value:
            yield error(field, f"{shorten(value)!r} holds `#`, which starts a comment in slurm.conf even inside "
                        "quotes: the value would end there", "remove the `#`", value)
        elif not _full(SLURM_VALUE_RE, value):
            if re.search(SLURM_SECOND_SETTING_RE, value):
                yield error(field, "the value hides a second `Key=value` setting (slurm.conf reads every word of a "
                            "line)", "give each setting its own key", value)
            else:
                yield error(field, f"{shorten(value)!r}: a space outside double quotes ends a slurm.conf value (the "
                            'rest is read as another setting), and a `"` may only wrap the whole value',
                            'write one word, or wrap the whole value in double quotes ("a b")', value)


@rule
def slurm_settings(spec: ClusterSpec) -> Iterator[Finding]:
    slurm = spec.slurm
    if slurm.scaledown_idletime is not None and slurm.scaledown_idletime < -1:
        yield error("slurm.scaledown_idletime", "scaledown_idletime must be -1 (never) or more minutes",
                    "e.g. 10", slurm.scaledown_idletime)
    strategy = slurm.queue_update_strategy
    if strategy is not None and strategy not in QUEUE_UPDATE_STRATEGIES:
        yield error("slurm.queue_update_strategy", f"unknown queue update strategy {strategy!r}",
                    _suggest(strategy, QUEUE_UPDATE_STRATEGIES), strategy)
    denied = SLURM_DENIED_SETTINGS | (SLURM_DENIED_WITH_ACCOUNTING if slurm.accounting else frozenset())
    yield from _slurm_settings_findings("slurm.custom_settings", slurm.custom_settings, denied, "cluster")
    for key, value in slurm.custom_settings.items():
        if key.lower() == "jobrequeue":
            yield warning(f"slurm.custom_settings.{key}", f"{key}={value} here wins over slurm.job_requeue",
                          "use slurm.job_requeue: true/false instead", value)
    for _, _, path, compute in _compute_resources(spec):
        yield from _slurm_settings_findings(f"{path}.slurm_settings", compute.slurm_settings,
                                            SLURM_DENIED_NODE_SETTINGS, "compute resource")


@rule
def slurm_accounting(spec: ClusterSpec) -> Iterator[Finding]:
    accounting = spec.slurm.accounting
    if accounting is None:
        yield warning("slurm.accounting", "no Slurm accounting database: sacct cannot tell how jobs ended, "
                      "so clusterkit's job tracking (requeues, watch) and its preflight will not work",
                      "set slurm.accounting: create (a small RDS database of clusterkit's own), or uri, "
                      "user_name, password_secret_arn of a MySQL-compatible database such as Amazon RDS or Aurora")
        return
    given = [key for key in ("uri", "user_name", "password_secret_arn") if getattr(accounting, key) is not None]
    if accounting.create and len(given) < 3:  # all three: filled in from the prerequisites stack
        if given:
            yield error(f"slurm.accounting.{given[0]}", "accounting: create makes its own database; its address, "
                        "user and secret come from the prerequisites stack", "leave out uri, user_name and "
                        "password_secret_arn, or create: false to use that database", None)
        else:
            yield info("slurm.accounting", "the config holds placeholders for the database until clusterkit's "
                       "prerequisites stack makes it at create (RDS for MySQL, encrypted, reachable from the head "
                       "node only, its password in Secrets Manager)", "set accounting: none to go without one")
        return
    missing = [key for key in ("uri", "user_name", "password_secret_arn") if key not in given]
    if missing:
        yield error(f"slurm.accounting.{missing[0]}", f"an existing accounting database needs "
                    f"{', '.join(missing)}", "give uri, user_name and password_secret_arn, or write "
                    "accounting: create for a database of clusterkit's own")
        return
    uri = re.fullmatch(DATABASE_URI_RE, accounting.uri)
    if uri is None:
        fix = ("write host:port without a scheme" if "://" in accounting.uri
               else "write host:port, e.g. slurm-db.cluster-abc.us-east-1.rds.amazonaws.com:3306")
        yield error("slurm.accounting.uri", "the database address is host:port (no scheme, no path)", fix,
                    accounting.uri)
    elif uri["port"] is not None and not 0 < int(uri["port"]) < 65536:
        yield error("slurm.accounting.uri", f"port {uri['port']} is not a TCP port", "e.g. 3306", accounting.uri)
    if not _full(DATABASE_USER_RE, accounting.user_name):
        yield error("slurm.accounting.user_name", "the database user is one word of letters, digits and _ . @ - "
                    "(at most 32; it is written into slurmdbd.conf)", "e.g. slurm", accounting.user_name)
    if not _full(SECRET_ARN_RE, accounting.password_secret_arn):
        yield error("slurm.accounting.password_secret_arn", "the database password must be a Secrets Manager "
                    "secret ARN, never the password itself", "store it in Secrets Manager and give its ARN",
                    "<hidden>")


def _script_findings(path: str, actions: CustomActionsSpec | None) -> Iterator[Finding]:
    if actions is None:
        return
    for event in ("on_node_start", "on_node_configured", "on_node_updated"):
        for s, script in enumerate(getattr(actions, event)):
            if not _full(SCRIPT_URL_RE, script.script):
                yield error(f"{path}.{event}[{s}].script", "custom action scripts must be s3:// or https:// URLs",
                            "upload the script to S3 and give its s3:// URL", script.script)


@rule
def custom_actions(spec: ClusterSpec) -> Iterator[Finding]:
    yield from _script_findings("head_node.custom_actions", spec.head_node.custom_actions)
    for q, queue in enumerate(spec.queues):
        yield from _script_findings(f"queues[{q}].custom_actions", queue.custom_actions)
        if queue.custom_actions is not None and queue.custom_actions.on_node_updated:
            yield error(f"queues[{q}].custom_actions.on_node_updated", "on_node_updated runs on the head node only "
                        "(after a cluster update); compute nodes are replaced instead",
                        "move it to head_node.custom_actions, or use on_node_configured",
                        len(queue.custom_actions.on_node_updated))


@rule
def pyxis(spec: ClusterSpec) -> Iterator[Finding]:
    directory = spec.pyxis.enroot_dir
    if not spec.pyxis.enabled:
        return
    if not _full(SAFE_PATH_RE, directory) or "/../" in f"{directory}/" or "/./" in f"{directory}/":
        yield error("pyxis.enroot_dir", "enroot_dir must be an absolute path of letters, digits, '.', '_', '-' "
                    "and '/' (enroot reads it through a shell), without '.' or '..' parts",
                    f"e.g. {EPHEMERAL_MOUNT_DIR}/enroot", directory)
        return
    # The node script makes the directory writable by every user (mode 1777), as root on every node: it must be
    # enroot's own, never the system's or a mount point (nor hold one).
    shared = {_normalized_mount_dir(mount) for _, _, mount in _storage_entries(spec)}
    mounts = sorted(shared | set(NODE_MOUNT_POINTS))
    problem = system_dir_problem(directory) or next(
        (f"{directory} {'is' if directory == mount else 'holds'} the mount point {mount}" for mount in mounts
         if directory == mount or mount.startswith(directory + "/")), None)
    if problem:
        yield error("pyxis.enroot_dir", f"{problem}: the node script would make it writable by every user (mode "
                    "1777), as root on every node", "use a directory of enroot's own, e.g. "
                    f"{EPHEMERAL_MOUNT_DIR}/enroot (local NVMe) or {ROOT_VOLUME_ENROOT_DIR}", directory)
        return
    if any(directory.startswith(mount + "/") for mount in shared | {DEFAULT_SHARED_DIR}):
        yield warning("pyxis.enroot_dir", "enroot data on shared storage is slow and fills it",
                      f"keep enroot_dir on local NVMe ({EPHEMERAL_MOUNT_DIR}/enroot)", directory)
    for q, queue in enumerate(spec.queues):
        used = enroot_dir(spec, queue.instance_facts())
        if used != directory and queue.instance_facts():
            yield info(f"queues[{q}]", f"queue {queue.name!r} has no instance storage: enroot keeps its data in "
                       f"{used} on the root volume", "size root_volume_gb for the container images it runs", used)


def _iam_entries(spec: ClusterSpec) -> Iterator[tuple[str, IamSpec]]:
    yield "head_node.iam", spec.head_node.iam
    for q, queue in enumerate(spec.queues):
        yield f"queues[{q}].iam", queue.iam
    for p, pool in enumerate(spec.login_nodes):
        yield f"login_nodes[{p}].iam", pool.iam


@rule
def iam_policies(spec: ClusterSpec) -> Iterator[Finding]:
    for path, iam in _iam_entries(spec):
        for i, policy in enumerate(iam.effective_policies):
            if policy.startswith("arn:") and not _full(POLICY_ARN_RE, policy):
                yield error(f"{path}.additional_policies[{i}]", "not an IAM policy ARN",
                            "e.g. arn:aws:iam::123456789012:policy/read-datasets", policy)
            elif not policy.startswith("arn:") and not _full(POLICY_NAME_RE, policy):
                yield error(f"{path}.additional_policies[{i}]", "neither a policy ARN nor the name of an "
                            "AWS-managed policy", "e.g. AmazonSSMManagedInstanceCore", policy)


@rule
def scripts_bucket(spec: ClusterSpec) -> Iterator[Finding]:
    bucket = spec.scripts_bucket
    if bucket is not None and (not _full(BUCKET_RE, bucket) or ".." in bucket):
        yield error("scripts_bucket", "not an S3 bucket name (3-63 lower-case letters, digits, '.' and '-')",
                    "e.g. my-team-cluster-scripts", bucket)
    elif bucket is None and (spec.pyxis.enabled or any(installs_neuron(spec, queue) for queue in spec.queues)):
        default = DEFAULT_SCRIPTS_BUCKET.format(account="ACCOUNT", region=spec.region)
        yield info("scripts_bucket", f"clusterkit's node scripts are uploaded at create to {default} (made if "
                   f"missing); until then the config names account {PLACEHOLDER_ACCOUNT}",
                   "set scripts_bucket to use a bucket of your own")


@rule
def monitoring(spec: ClusterSpec) -> Iterator[Finding]:
    days = spec.monitoring.log_retention_days
    if days not in LOG_RETENTION_DAYS:
        yield error("monitoring.log_retention_days", f"CloudWatch keeps logs for set periods, not {days} days",
                    f"use one of {', '.join(map(str, LOG_RETENTION_DAYS))}", days)


def _tag_text_ok(text: str) -> bool:
    return all(character.isalnum() or character in TAG_PUNCTUATION for character in text)


@rule
def tags(spec: ClusterSpec) -> Iterator[Finding]:
    if len(spec.tags) > MAX_TAGS:
        yield error("tags", f"{len(spec.tags)} tags; at most {MAX_TAGS}", "drop some tags", len(spec.tags))
    for key, value in spec.tags.items():
        if not key or len(key) > TAG_KEY_MAX or key.startswith("parallelcluster:") or key.startswith("aws:"):
            yield error(f"tags.{key}", "tag keys are 1-128 characters and may not start with 'aws:' or "
                        "'parallelcluster:'", "rename the tag", key)
        elif not _tag_text_ok(key):
            yield error(f"tags.{key}", "tag keys hold letters, digits, spaces and _ . : / = + - @ only",
                        "rename the tag", key)
        if len(value) > TAG_VALUE_MAX or not _tag_text_ok(value):
            yield error(f"tags.{key}", f"tag values are at most {TAG_VALUE_MAX} letters, digits, spaces and "
                        "_ . : / = + - @", "drop the other characters", value)


@rule
def volume_sizes(spec: ClusterSpec) -> Iterator[Finding]:
    sizes = [("head_node.root_volume_gb", spec.head_node.root_volume_gb)]
    sizes += [(f"queues[{q}].root_volume_gb", queue.root_volume_gb) for q, queue in enumerate(spec.queues)]
    for path, size in sizes:
        if size is None:
            continue
        if size < AMI_ROOT_VOLUME_GIB and not spec.image.custom_ami:
            yield error(path, f"a root volume of {size} GiB is smaller than the image's ({AMI_ROOT_VOLUME_GIB} GiB "
                        "for ParallelCluster 3.16's AMIs)", f"use at least {AMI_ROOT_VOLUME_GIB} GiB", size)
        else:
            yield from _ebs_size_findings(path, ROOT_VOLUME_TYPE, size, "a root")


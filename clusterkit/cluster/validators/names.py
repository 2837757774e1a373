"""Names and counts: the cluster's, its queues', compute resources' and login node pools' (ParallelCluster's
patterns and limits), and node counts."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.spec import ClusterSpec
from clusterkit.cluster.validators.common import compute_resources, duplicates, matches
from clusterkit.findings import Finding, error, warning

RESOURCE_NAME_RE = r"[a-z][a-z0-9-]*"
RESOURCE_NAME_MAX = 25
CLUSTER_NAME_RE = r"[a-zA-Z][a-zA-Z0-9-]*"
CLUSTER_NAME_MAX = 60
CLUSTER_NAME_MAX_WITH_ACCOUNTING = 40
MAX_QUEUES = 50
MAX_COMPUTE_RESOURCES_PER_QUEUE = 50
MAX_COMPUTE_RESOURCES_PER_CLUSTER = 50
MAX_LOGIN_POOLS = 10


def cluster_name(spec: ClusterSpec) -> Iterator[Finding]:
    limit = CLUSTER_NAME_MAX_WITH_ACCOUNTING if spec.slurm.accounting else CLUSTER_NAME_MAX
    if not matches(CLUSTER_NAME_RE, spec.name):
        yield error("name", "cluster name must start with a letter and hold only letters, digits and '-'",
                    "rename it, e.g. 'train-p4de'", spec.name)
    if len(spec.name) > limit:
        why = " with Slurm accounting" if spec.slurm.accounting else ""
        yield error("name", f"cluster name is {len(spec.name)} characters; at most {limit} allowed{why}",
                    f"shorten it to {limit} characters", spec.name)


def _resource_name_findings(path: str, name: str, what: str) -> Iterator[Finding]:
    if not matches(RESOURCE_NAME_RE, name):
        yield error(path, f"{what} name must start with a lower-case letter and hold only a-z, 0-9 and '-'",
                    "use a name like 'gpu' or 'p4de-od'", name)
    if len(name) > RESOURCE_NAME_MAX:
        yield error(path, f"{what} name is {len(name)} characters; at most {RESOURCE_NAME_MAX} allowed",
                    f"shorten it to {RESOURCE_NAME_MAX} characters", name)
    if name == "default":
        yield error(path, f"'default' is reserved and cannot be a {what} name", "pick another name", name)


def queue_names(spec: ClusterSpec) -> Iterator[Finding]:
    for q, queue in enumerate(spec.queues):
        yield from _resource_name_findings(f"queues[{q}].name", queue.name, "queue")
    yield from duplicates([queue.name for queue in spec.queues], lambda q: f"queues[{q}].name", "queue")


def compute_resource_names(spec: ClusterSpec) -> Iterator[Finding]:
    for q, queue in enumerate(spec.queues):
        for c, compute in enumerate(queue.compute):
            yield from _resource_name_findings(f"queues[{q}].compute[{c}].name", compute.name, "compute resource")
        yield from duplicates([compute.name for compute in queue.compute],
                              lambda c, q=q: f"queues[{q}].compute[{c}].name", "compute resource")


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


def node_counts(spec: ClusterSpec) -> Iterator[Finding]:
    for _, _, path, compute in compute_resources(spec):
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


def login_nodes(spec: ClusterSpec) -> Iterator[Finding]:
    if len(spec.login_nodes) > MAX_LOGIN_POOLS:
        yield error("login_nodes", f"{len(spec.login_nodes)} login node pools; at most {MAX_LOGIN_POOLS}",
                    "merge pools", len(spec.login_nodes))
    for p, pool in enumerate(spec.login_nodes):
        yield from _resource_name_findings(f"login_nodes[{p}].name", pool.name, "login node pool")
        if pool.count < 0:
            yield error(f"login_nodes[{p}].count", "count must be 0 or more", "e.g. count: 1", pool.count)
    yield from duplicates([pool.name for pool in spec.login_nodes], lambda p: f"login_nodes[{p}].name",
                          "login node pool")

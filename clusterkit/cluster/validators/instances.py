"""Instance types: that each exists and is offered in the region, one architecture for the head node and the
queues, EFA support (clusterkit's dated instance table, `clusterkit.offerings`)."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit import offerings
from clusterkit.cluster.spec import ClusterSpec
from clusterkit.cluster.validators.common import REGION_RE, compute_resources, matches
from clusterkit.findings import Finding, error, warning

NODE_ARCHITECTURES = ("x86_64", "arm64")
INSTANCE_TYPE_RE = r"[a-z][a-z0-9-]*\.[a-z0-9-]+"
# UltraServer types, sold only in Capacity Blocks of several instances joined by their accelerators' own fabric:
# EC2's data lacks them or their accelerators, and clusterkit renders none of what they need. Refused for that
# reason (a test holds every p5/p6/trn type of botocore's EC2 model to the catalog or this list).
UNSUPPORTED_TYPES = {
    "p6e-gb200.36xlarge": (
        "exists in EC2 only inside UltraServer Capacity Blocks (arm64 Grace hosts with 4 B200 GPUs each, NVLink "
        "across the UltraServer through NVIDIA IMEX); ParallelCluster supports it from 3.14 with CAPACITY_BLOCK "
        "queues and IMEX set up on the image (its 3.14.0 changelog), which clusterkit does not render yet, and "
        "clusterkit's instance table does not carry it",
        "use p6-b200.48xlarge (8 B200 per x86_64 node: --preset p6-b200), or write the ParallelCluster config "
        "for a p6e-gb200 Capacity Block yourself"),
    "trn2u.48xlarge": (
        "exists in EC2 only inside Trn2 UltraServer Capacity Blocks (trn2 nodes joined by NeuronLink); EC2's "
        "instance data gives it no accelerators, so clusterkit would start one rank per node",
        "use trn2.48xlarge (16 Trainium2 per node: --preset trn2)"),
}


def _instance_types(spec: ClusterSpec) -> Iterator[tuple[str, str]]:
    """(path, instance type) of every node of the cluster."""
    yield "head_node.instance_type", spec.head_node.instance_type
    for p, pool in enumerate(spec.login_nodes):
        yield f"login_nodes[{p}].instance_type", pool.instance_type
    for _, _, path, compute in compute_resources(spec):
        yield f"{path}.instance_type", compute.instance_type


def instance_types(spec: ClusterSpec) -> Iterator[Finding]:
    table = offerings.table()
    for path, name in _instance_types(spec):
        if name in UNSUPPORTED_TYPES:
            why, fix = UNSUPPORTED_TYPES[name]
            yield error(path, f"{name} {why} (instance table of {table.generated})", fix, name)
            continue
        if table.facts(name) is not None:
            continue
        close = table.similar(name)
        fix = (f"did you mean {' or '.join(map(repr, close))}?" if close
               else "see `aws ec2 describe-instance-types` for the names of EC2 instance types")
        what = "is not an EC2 instance type" if not matches(INSTANCE_TYPE_RE, name) else "does not exist in EC2"
        yield error(path, f"{name!r} {what} (clusterkit's instance table of {table.generated})", fix, name)


def instance_regions(spec: ClusterSpec) -> Iterator[Finding]:
    table = offerings.table()
    if not table.covers(spec.region):
        if matches(REGION_RE, spec.region):
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


def efa_support(spec: ClusterSpec) -> Iterator[Finding]:
    for _, _, path, compute in compute_resources(spec):
        facts = compute.facts
        if facts is None:
            continue
        if compute.efa and not facts.efa:
            yield error(f"{path}.efa", f"{compute.instance_type} has no EFA network interface",
                        "set efa: false, or use an EFA-capable type (p4de, p5, trn1, g5.8xlarge and up)", True)
        elif compute.efa is False and facts.efa:
            yield warning(f"{path}.efa", f"{compute.instance_type} supports EFA but it is turned off; multi-node "
                          "training then runs over plain TCP", "remove 'efa: false'", False)

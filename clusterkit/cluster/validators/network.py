"""Where the cluster runs: the region (ParallelCluster 3.16's), subnets, the network mode and security
groups."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.spec import NETWORK_CREATE, NETWORK_EXISTING, NETWORK_MODES, ClusterSpec
from clusterkit.cluster.validators.common import REGION_RE, matches, suggest
from clusterkit.findings import Finding, error, info, warning

# ParallelCluster 3.16's supported regions (its `supported-regions` resource file).
PARALLELCLUSTER_REGIONS = (
    "af-south-1", "ap-east-1", "ap-northeast-1", "ap-northeast-2", "ap-south-1", "ap-southeast-1", "ap-southeast-2",
    "ap-southeast-3", "ap-southeast-5", "ap-southeast-7", "ca-central-1", "cn-north-1", "cn-northwest-1",
    "eu-central-1", "eu-north-1", "eu-south-1", "eu-west-1", "eu-west-2", "eu-west-3", "il-central-1", "me-south-1",
    "sa-east-1", "us-east-1", "us-east-2", "us-iso-east-1", "us-iso-west-1", "us-isob-east-1", "us-gov-east-1",
    "us-gov-west-1", "us-west-1", "us-west-2",
)
SUBNET_RE = r"subnet-[0-9a-z]{8}|subnet-[0-9a-z]{17}"
SECURITY_GROUP_RE = r"sg-([0-9a-f]{8}|[0-9a-f]{17})"


def region(spec: ClusterSpec) -> Iterator[Finding]:
    if not matches(REGION_RE, spec.region):
        yield error("region", f"{spec.region!r} is not an AWS region name", "e.g. us-east-1", spec.region)
    elif spec.region not in PARALLELCLUSTER_REGIONS:
        yield error("region", f"ParallelCluster 3.16 does not support {spec.region}",
                    suggest(spec.region, PARALLELCLUSTER_REGIONS), spec.region)


def subnets(spec: ClusterSpec) -> Iterator[Finding]:
    given = [("subnet_id", spec.subnet_id), ("head_node.subnet_id", spec.head_node.subnet_id)]
    given += [(f"queues[{q}].subnet_ids[{s}]", subnet) for q, queue in enumerate(spec.queues)
              for s, subnet in enumerate(queue.subnet_ids)]
    given += [(f"login_nodes[{p}].subnet_id", pool.subnet_id) for p, pool in enumerate(spec.login_nodes)]
    for path, subnet in given:
        if subnet is not None and not matches(SUBNET_RE, subnet):
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


def network(spec: ClusterSpec) -> Iterator[Finding]:
    if spec.network is not None and spec.network not in NETWORK_MODES:
        yield error("network", f"network is one of {', '.join(NETWORK_MODES)}", "create: a network of clusterkit's "
                    "own; existing: the spec's subnets or the default VPC; leave it out to decide at create",
                    spec.network)
    for g, group in enumerate(spec.head_node.additional_security_groups):
        if not matches(SECURITY_GROUP_RE, group):
            yield error(f"head_node.additional_security_groups[{g}]", "security group ids look like "
                        "sg-<8 or 17 characters>", "copy the id from the VPC console", group)

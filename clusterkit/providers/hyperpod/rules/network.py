"""HyperPod's network: the subnets and security groups of VpcConfig."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.render import PLACEHOLDER_SUBNET
from clusterkit.findings import Finding, info, warning
from clusterkit.providers.hyperpod.request import PLACEHOLDER_SECURITY_GROUP, HyperPodDraft


def vpc(draft: HyperPodDraft) -> Iterator[Finding]:
    config = draft.request.get("VpcConfig") or {}
    if PLACEHOLDER_SUBNET in config.get("Subnets", []):  # type: ignore[union-attr,operator]
        yield info("subnet_id", f"no subnet given: the request shows {PLACEHOLDER_SUBNET}, where create puts the "
                   "private subnet of clusterkit's prerequisites network (a VPC, a NAT gateway, a private subnet in a "
                   "zone that offers every instance type: a stack made earlier in the region, else a new one)",
                   "or give --subnet-id: a private subnet with a NAT route (EFA nodes get no public IP)")
    if PLACEHOLDER_SECURITY_GROUP in config.get("SecurityGroupIds", []):  # type: ignore[union-attr,operator]
        yield info("create_cluster_request.VpcConfig.SecurityGroupIds",
                   f"the request shows {PLACEHOLDER_SECURITY_GROUP}: apply puts there the security group it makes for "
                   "the nodes in their subnets' VPC (all traffic within itself, as EFA needs)")


def accounting(draft: HyperPodDraft) -> Iterator[Finding]:
    database = draft.spec.slurm.accounting
    if database is not None and not database.create:
        yield warning("slurm.accounting", "on HyperPod, clusterkit's lifecycle script keeps Slurm accounting in a "
                      "database on the controller; an existing database is not used",
                      "write `accounting: create`")

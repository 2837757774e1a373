"""Offline checks of a cluster spec: every rule ParallelCluster 3.16 would reject, before AWS is touched.

One module per topic (text, names, instances, placement, capacity, storage, mounts, image, network, access,
slurm, custom actions, pyxis, docker, clusterkit on the nodes, monitoring, tags), one small function per rule, the
helpers several topics share in `common`. Each rule yields Findings whose path is the field in the user's spec.
`validate(spec)` runs them all and returns every finding together; errors are values here, the CLI decides the
exit code. The rules are measured against ParallelCluster's own validation (tests/aws/test_differential.py);
facts about instance types and regions come from the dated table in `clusterkit.offerings`.

`RULES` is the rule book's order, kept here rather than in the order modules happen to be imported: within each
level findings come out in it (goldens and users read them so). A rule it does not list never runs
(tests/cluster/test_rule_book.py checks that every public function of every topic is listed).
"""

from __future__ import annotations

from clusterkit.cluster.spec import ClusterSpec
from clusterkit.cluster.validators import (
    access,
    capacity,
    clusterkit_on_nodes,
    custom_actions,
    docker,
    image,
    instances,
    monitoring,
    mounts,
    names,
    network,
    placement,
    pyxis,
    slurm,
    storage,
    tags,
    text,
)
from clusterkit.cluster.validators.network import PARALLELCLUSTER_REGIONS
from clusterkit.findings import Finding
from clusterkit.rules import Rule, RuleBook

RULES: tuple[Rule, ...] = (
    text.single_line,
    names.cluster_name, names.queue_names, names.compute_resource_names, names.resource_counts, names.node_counts,
    names.login_nodes,
    instances.instance_types, instances.instance_regions, instances.architectures, instances.efa_support,
    placement.placement_group_settings, placement.efa_placement,
    capacity.capacity,
    storage.lustre_settings, storage.efs_settings, storage.openzfs_and_ebs_settings, storage.deletion_policies,
    storage.storage_counts, storage.storage_names,
    mounts.mount_dirs,
    storage.managed_storage_subnets,
    image.operating_system, image.image,
    network.region, network.subnets, network.network,
    clusterkit_on_nodes.clusterkit_on_nodes,
    access.ssh_access,
    slurm.slurm_settings, slurm.gpu_health_check_room, slurm.slurm_accounting,
    custom_actions.custom_actions,
    pyxis.pyxis,
    docker.docker,
    access.iam_policies,
    custom_actions.scripts_bucket,
    monitoring.monitoring,
    tags.tags,
    storage.volume_sizes,
)


def _book(rules: tuple[Rule, ...]) -> RuleBook[ClusterSpec]:
    book: RuleBook[ClusterSpec] = RuleBook("cluster")
    for function in rules:
        book.rule(function)
    return book


CLUSTER_RULES = _book(RULES)


def validate(spec: ClusterSpec) -> list[Finding]:
    """Run every rule on the spec; errors first, then warnings and infos, each in rule order."""
    return CLUSTER_RULES.check(spec)


__all__ = ["CLUSTER_RULES", "PARALLELCLUSTER_REGIONS", "RULES", "validate"]

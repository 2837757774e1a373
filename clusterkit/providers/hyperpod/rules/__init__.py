"""HyperPod's rules: one small function per rule, one module per topic, run on a `HyperPodDraft` (the spec, the
execution role and the requests built from them). The cluster rules that hold on any provider (single-line text,
queue and compute resource names, FSx for Lustre settings and deletion policies, tags, mount directories) run too,
under their own ids.

`RULES` is the order findings come out in, within each level.
"""

from __future__ import annotations

from clusterkit.cluster.validators import mounts, names, storage as spec_storage, tags, text
from clusterkit.findings import Finding, Level
from clusterkit.providers.hyperpod.request import HyperPodDraft
from clusterkit.providers.hyperpod.rules import access, instances, lifecycle, model, network, nodes, pyxis, storage
from clusterkit.rules import Rule, RuleBook

SPEC_RULES: tuple[Rule, ...] = (text.single_line, names.queue_names, names.compute_resource_names, names.node_counts,
                                spec_storage.lustre_settings, spec_storage.deletion_policies, mounts.mount_dirs,
                                tags.tags)
RULES: tuple[Rule, ...] = (
    access.execution_role,
    instances.hyperpod_instance_types, instances.group_names, instances.capacity_types, instances.always_on_nodes,
    nodes.threads_per_core,
    lifecycle.lifecycle_bucket,
    storage.lustre, storage.other_storage,
    pyxis.enroot_dir,
    network.vpc, network.accounting,
    model.create_cluster_model, model.create_file_system_model,
)


def _book(prefix: str, rules: tuple[Rule, ...]) -> RuleBook:
    book: RuleBook = RuleBook(prefix)
    for function in rules:
        book.rule(function)
    return book


SPEC_BOOK = _book("cluster", SPEC_RULES)
HYPERPOD_RULES = _book("hyperpod", RULES)


def check(draft: HyperPodDraft) -> list[Finding]:
    """Every finding, errors first, then warnings and infos."""
    levels = list(Level)
    return sorted(HYPERPOD_RULES.check(draft) + SPEC_BOOK.check(draft.spec), key=lambda f: levels.index(f.level))

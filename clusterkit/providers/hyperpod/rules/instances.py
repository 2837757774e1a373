"""HyperPod's instance types: a list of its own (ml.-prefixed), botocore's ClusterInstanceType enum."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from clusterkit.findings import Finding, error, info, similar_names
from clusterkit.providers.hyperpod.model import enum_of
from clusterkit.providers.hyperpod.request import INSTANCE_TYPE_PREFIX, HyperPodDraft, hyperpod_type


def hyperpod_instance_types(draft: HyperPodDraft) -> Iterator[Finding]:
    offered = enum_of("CreateCluster", "InstanceGroups", "InstanceType")
    names = [name[len(INSTANCE_TYPE_PREFIX):] for name in offered]
    for source in draft.groups:
        if hyperpod_type(source.instance_type) not in offered:
            family = source.instance_type.split(".")[0]
            same = [name for name in names if name.split(".")[0] == family]
            fix = (f"HyperPod's {family} types: {', '.join(same)}" if same
                   else f"HyperPod has no {family} type" + (f"; did you mean {close[0]}?" if (
                       close := similar_names(source.instance_type, names, cutoff=0.5)) else ""))
            yield error(f"{source.path}.instance_type",
                        f"HyperPod offers no {hyperpod_type(source.instance_type)}: it runs only its own list of "
                        "ml. instance types (botocore's ClusterInstanceType)", fix, source.instance_type)


def group_names(draft: HyperPodDraft) -> Iterator[Finding]:
    counts = Counter(source.name for source in draft.groups)
    for source in draft.groups:
        if counts[source.name] > 1:
            yield error(source.path, f"two instance groups would be named {source.name!r}",
                        "rename the login pool, queue or compute resource", source.name)


def always_on_nodes(draft: HyperPodDraft) -> Iterator[Finding]:
    """HyperPod has no dynamic nodes: a group's nodes all run (and cost) from create on."""
    for source in draft.groups:
        compute = source.compute
        if compute is not None and compute.effective_min_count < compute.effective_max_count:
            yield info(f"{source.path}.max_count",
                       f"HyperPod runs every node all the time: instance group {source.name} gets {source.count} "
                       f"nodes (max_count; min_count {compute.effective_min_count} has no meaning there)",
                       "lower max_count to pay for fewer nodes; resize later with update-cluster", source.count)


def capacity_types(draft: HyperPodDraft) -> Iterator[Finding]:
    for q, queue in enumerate(draft.spec.queues):
        if queue.capacity_type != "ONDEMAND":
            yield error(f"queues[{q}].capacity_type",
                        f"HyperPod has no {queue.capacity_type} capacity type: its nodes are on-demand or "
                        "come from a training plan", "use ONDEMAND", queue.capacity_type)
        for c, compute in enumerate(queue.compute):
            if compute.reserved:
                yield error(f"queues[{q}].compute[{c}]", "HyperPod takes no EC2 capacity reservation",
                            "drop the reservation (HyperPod's reserved capacity is a SageMaker training plan)")

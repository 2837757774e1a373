"""Placement groups: their settings, and where EFA needs (or must not have) one."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.spec import ClusterSpec, ComputeSpec, PlacementGroupSpec, QueueSpec, uses_reserved_capacity
from clusterkit.cluster.validators.common import compute_resources
from clusterkit.findings import Finding, error, warning

def _effective_placement(queue: QueueSpec, compute: ComputeSpec, queue_path: str, path: str
                         ) -> tuple[PlacementGroupSpec | None, str]:
    if compute.placement_group is not None:
        return compute.placement_group, f"{path}.placement_group"
    return queue.placement_group, f"{queue_path}.placement_group"


def placement_group_settings(spec: ClusterSpec) -> Iterator[Finding]:
    groups = [(f"queues[{q}].placement_group", queue.placement_group) for q, queue in enumerate(spec.queues)]
    groups += [(f"{path}.placement_group", compute.placement_group) for _, _, path, compute in compute_resources(spec)]
    for path, group in groups:
        if group is None:
            continue
        if group.id and group.name:
            yield error(path, "placement group has both 'id' and 'name'", "keep only 'name'", group.id)
        if group.enabled is False and (group.id or group.name):
            yield error(path, "placement group is disabled but names an existing group",
                        "remove 'name'/'id', or set enabled: true", group.name or group.id)


def efa_placement(spec: ClusterSpec) -> Iterator[Finding]:
    for queue_path, queue, path, compute in compute_resources(spec):
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

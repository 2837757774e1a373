"""Capacity: capacity types, capacity reservations, their resource groups and Capacity Blocks."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.spec import ClusterSpec
from clusterkit.cluster.validators.common import compute_resources, matches, suggest
from clusterkit.findings import Finding, error

CAPACITY_TYPES = ("ONDEMAND", "SPOT", "CAPACITY_BLOCK")
CAPACITY_RESERVATION_RE = r"cr-[0-9a-f]{17}"
RESOURCE_GROUP_ARN_RE = r"arn:aws[a-z-]*:resource-groups:[a-z0-9-]+:\d{12}:group/[A-Za-z0-9_.-]{1,300}"


def capacity(spec: ClusterSpec) -> Iterator[Finding]:
    for q, queue in enumerate(spec.queues):
        if queue.capacity_type not in CAPACITY_TYPES:
            yield error(f"queues[{q}].capacity_type", f"unknown capacity type {queue.capacity_type!r}",
                        suggest(queue.capacity_type, CAPACITY_TYPES), queue.capacity_type)
    for _, queue, path, compute in compute_resources(spec):
        reservation = compute.capacity_reservation_id
        group = compute.capacity_reservation_resource_group_arn
        if reservation is not None and not matches(CAPACITY_RESERVATION_RE, reservation):
            yield error(f"{path}.capacity_reservation_id", "capacity reservation ids look like cr-<17 hex digits>",
                        "copy the id from the EC2 console (Capacity Reservations)", reservation)
        if group is not None and not matches(RESOURCE_GROUP_ARN_RE, group):
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

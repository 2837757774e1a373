"""What a cluster spec adds up to: nodes, accelerators, EFA bandwidth, FSx size, an hourly cost estimate
(nodes and clusterkit's prerequisites stack: NAT gateway, accounting database), and what survives a
`delete-cluster`."""

from __future__ import annotations

from dataclasses import asdict, field

from clusterkit import catalog
from clusterkit.cluster.prerequisites import planned
from clusterkit.cluster.render import render_config
from clusterkit.cluster.spec import ClusterSpec
from clusterkit.cluster.storage import storage_fates
from clusterkit.lean_dataclass import lean_dataclass

# Baseline FSx for Lustre throughput of SCRATCH deployments, MB/s per TiB (PERSISTENT_* set it explicitly).
SCRATCH_THROUGHPUT_PER_TIB = 200


@lean_dataclass(frozen=True)
class ClusterSummary:
    """What a cluster adds up to: nodes, accelerators, EFA bandwidth, storage, cost per hour."""

    static_nodes: int  # always running (MinCount)
    max_nodes: int
    accelerators: dict[str, int]  # model -> count at max_nodes, e.g. {"A100 80 GB": 32}
    efa_gbps_per_node: dict[str, int]  # instance type -> EFA bandwidth of one node
    efa_aggregate_gbps: int  # over all EFA nodes at max_nodes
    fsx_capacity_gib: int  # new FSx for Lustre file systems
    fsx_throughput_mbps: int
    cost_per_hour_static: float  # head node + static nodes + prerequisites, USD
    cost_per_hour_max: float  # head node + every node at max_nodes + prerequisites, USD
    unpriced_types: list[str] = field(default_factory=list)  # left out of the cost
    kept_on_delete: list[str] = field(default_factory=list)  # shared storage a delete-cluster leaves
    deleted_on_delete: list[str] = field(default_factory=list)  # shared storage it removes, files and all
    # clusterkit's prerequisites stack, by item (NAT gateway, accounting database): included in the costs above
    prerequisites_cost_per_hour: dict[str, float] = field(default_factory=dict)
    price_table_date: str = catalog.PRICE_TABLE_DATE
    price_region: str = catalog.PRICE_TABLE_REGION

    def to_dict(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        """Short human-readable lines for the CLI."""
        accelerators = ", ".join(f"{count}× {model}" for model, count in self.accelerators.items()) or "none"
        lines = [
            f"nodes: {self.static_nodes} static, up to {self.max_nodes}",
            f"accelerators (at most): {accelerators}",
            f"EFA bandwidth (at most): {self.efa_aggregate_gbps} Gbps aggregate",
            f"FSx for Lustre: {self.fsx_capacity_gib} GiB, {self.fsx_throughput_mbps} MB/s",
            f"estimated on-demand cost: ${self.cost_per_hour_static:,.2f}/h static, "
            f"${self.cost_per_hour_max:,.2f}/h at most "
            f"({self.price_region} list prices of {self.price_table_date}; storage not included)",
        ]
        if self.prerequisites_cost_per_hour:
            items = ", ".join(f"{item} ${cost:,.3f}/h" for item, cost in self.prerequisites_cost_per_hour.items())
            lines.append(f"prerequisites stack (included above): {items}")
        if self.unpriced_types:
            lines.append(f"no price known for: {', '.join(self.unpriced_types)} (left out of the cost)")
        for kept in self.kept_on_delete:
            lines.append(f"delete-cluster keeps: {kept}")
        for deleted in self.deleted_on_delete:
            lines.append(f"delete-cluster deletes: {deleted}")
        return lines


def summarize(spec: ClusterSpec) -> ClusterSummary:
    static_nodes = max_nodes = efa_gbps = 0
    accelerators: dict[str, int] = {}
    efa_per_node: dict[str, int] = {}
    unpriced: set[str] = set()
    head = catalog.find_instance_type(spec.head_node.instance_type)
    head_price = _price(head, spec.head_node.instance_type, unpriced)
    cost_static = cost_max = head_price
    for queue in spec.queues:
        for compute in queue.compute:
            low, high = compute.effective_min_count, compute.effective_max_count
            static_nodes += low
            max_nodes += high
            instance = compute.instance
            price = _price(instance, compute.instance_type, unpriced)
            cost_static += price * low
            cost_max += price * high
            if instance is None:
                continue
            if instance.accelerator_count:
                model = f"{instance.accelerator_model} {instance.accelerator_memory_gib} GB"
                accelerators[model] = accelerators.get(model, 0) + instance.accelerator_count * high
            if compute.efa_enabled and instance.efa:
                efa_per_node[instance.name] = instance.network_gbps
                efa_gbps += instance.network_gbps * high
    prerequisites = planned(spec).cost_per_hour()  # made unless the account has what they hold
    cost_static += sum(prerequisites.values())
    cost_max += sum(prerequisites.values())
    capacity, throughput = _fsx(spec)
    fates = storage_fates(render_config(spec))
    return ClusterSummary(
        static_nodes=static_nodes, max_nodes=max_nodes, accelerators=accelerators,
        efa_gbps_per_node=efa_per_node, efa_aggregate_gbps=efa_gbps,
        fsx_capacity_gib=capacity, fsx_throughput_mbps=throughput,
        cost_per_hour_static=round(cost_static, 2), cost_per_hour_max=round(cost_max, 2),
        unpriced_types=sorted(unpriced),
        kept_on_delete=[str(fate) for fate in fates if fate.kept],
        deleted_on_delete=[str(fate) for fate in fates if not fate.kept],
        prerequisites_cost_per_hour=prerequisites,
    )


def _price(instance: catalog.InstanceType | None, name: str, unpriced: set[str]) -> float:
    if instance is None or instance.price_per_hour is None:
        unpriced.add(name)
        return 0.0
    return instance.price_per_hour


def _fsx(spec: ClusterSpec) -> tuple[int, int]:
    capacity = throughput = 0
    for fsx in spec.storage.lustre:
        if not fsx.is_new:
            continue
        size = fsx.effective_capacity_gib
        per_tib = fsx.effective_throughput or SCRATCH_THROUGHPUT_PER_TIB
        capacity += size
        throughput += size * per_tib // 1024
    return capacity, throughput

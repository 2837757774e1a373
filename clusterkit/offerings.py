"""Every EC2 instance type's facts, one `InstanceType` per name: EC2's dated table shipped with clusterkit, and the
curated facts of the types people train on.

`scripts/regenerate-instance-offerings.py` writes the table (`data/instance-offerings.tsv`) from EC2's
DescribeInstanceTypes and DescribeInstanceTypeOfferings: architectures, EFA, network cards, instance storage,
accelerators and the regions that offer each type. Offline checks (`clusterkit validate`, a dry run) read
it: an instance type that does not exist, one a region does not offer, EFA on a type without it, a head
node and queues of different architectures. AWS changes its offerings; the table says when it was made,
and a real create still asks AWS (`providers/aws/resolve.py`). What EC2's table lacks (vCPUs and memory,
accelerator memory, NeuronCores, network speed, NVSwitch, device RDMA, prices) is curated below (`CURATED`)
for the types people train on; `table().facts(name)` joins the two, so every part of clusterkit reads one
value per type (`catalog.py` looks the curated ones up by name or preset).
Prices are on-demand Linux list prices in PRICE_TABLE_REGION, USD per hour, as of PRICE_TABLE_DATE; they
are estimates for planning, not a bill.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from clusterkit.findings import similar_names
from clusterkit.lean_dataclass import lean_dataclass

TABLE_FILE = Path(__file__).resolve().parent / "data" / "instance-offerings.tsv"
_HEADER_KEYS = ("generated", "source", "regions")
NO_ACCELERATOR = "none"  # InstanceType.accelerator of a type without one
_NO_ACCELERATOR_COLUMN = "-"  # how the table writes it
PRICE_TABLE_DATE = "2025-06-05"
PRICE_TABLE_REGION = "us-east-1"


@lean_dataclass(frozen=True)
class InstanceType:
    """An EC2 instance type: what EC2 says of it (every type), and for the curated types (`catalog.py`'s) the
    figures jobs, checks and costs need beside it (None or 0 for the others)."""

    name: str
    architectures: tuple[str, ...]  # x86_64, arm64 (i386 and the mac types also appear)
    efa_interfaces: int  # maximum EFA network cards; 0: no EFA
    network_cards: int
    instance_storage_gb: int  # local instance-store disks (NVMe or HDD); 0: none
    accelerator: str  # "gpu", "neuron" or "none"
    accelerator_count: int  # GPUs, or Trainium/Inferentia chips
    accelerator_model: str
    regions: frozenset[str]
    # Curated: what EC2's table does not carry.
    vcpus: int | None = None
    memory_gib: int | None = None
    accelerator_memory_gib: int = 0  # per accelerator
    neuron_cores: int = 0  # physical NeuronCores per instance
    # The logical NeuronCore sizes the Neuron runtime takes (NEURON_LOGICAL_NC_CONFIG: physical cores per
    # logical one), its default first. Trainium2 groups two by default (AWS Neuron, "Logical NeuronCore
    # configuration": a trn2.48xlarge presents 64 NeuronCores); earlier chips have only 1.
    logical_nc_configs: tuple[int, ...] = (1,)
    network_gbps: int = 0
    nvswitch: bool = False  # needs the NVIDIA fabric manager
    device_rdma: bool = False  # EFA reads and writes accelerator memory directly (GPUDirect/Neuron RDMA)
    price_per_hour: float | None = None

    @property
    def efa(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def architecture(self) -> str:
        """The architecture a cluster node of this type runs (x86_64 for types that also run i386)."""
        return "x86_64" if "x86_64" in self.architectures else self.architectures[0]

    @property
    def processes_per_node(self) -> int:
        """Training processes per node: one per GPU or NeuronCore (logical, at the default size), else one."""
        return self.processes()

    def processes(self, logical_nc_config: int | None = None) -> int:
        """Training processes per node with NeuronCores of `logical_nc_config` physical ones (None: the
        default size): one per GPU or NeuronCore the runtime exposes, else one."""
        if self.accelerator == "neuron":
            return self.neuron_cores // (logical_nc_config or self.logical_nc_configs[0])
        return self.accelerator_count or 1


@lean_dataclass(frozen=True)
class Curated:
    """The curated figures of one type (see InstanceType), as this file states them."""

    vcpus: int
    memory_gib: int
    accelerator_memory_gib: int = 0
    neuron_cores: int = 0
    logical_nc_configs: tuple[int, ...] = (1,)
    network_gbps: int = 0
    nvswitch: bool = False
    device_rdma: bool = False
    price_per_hour: float | None = None

    def onto(self, facts: InstanceType) -> InstanceType:
        """EC2's facts of the type with these figures."""
        return dataclasses.replace(facts, **{field.name: getattr(self, field.name)
                                             for field in dataclasses.fields(Curated)})


# Figures follow the EC2 instance-type data (DescribeInstanceTypes, as moto 5.2 also carries it); prices as above.
CURATED: dict[str, Curated] = {
    "p4d.24xlarge": Curated(96, 1152, 40, network_gbps=400, nvswitch=True, device_rdma=True, price_per_hour=21.96),
    "p4de.24xlarge": Curated(96, 1152, 80, network_gbps=400, nvswitch=True, device_rdma=True, price_per_hour=27.45),
    "p5.48xlarge": Curated(192, 2048, 80, network_gbps=3200, nvswitch=True, device_rdma=True, price_per_hour=55.04),
    # One H100 and one EFA interface, no NVSwitch; EC2's data does not say GPUDirect RDMA, so it is not assumed.
    "p5.4xlarge": Curated(16, 256, 80, network_gbps=100),
    "p5e.48xlarge": Curated(192, 2048, 141, network_gbps=3200, nvswitch=True, device_rdma=True),
    "p5en.48xlarge": Curated(192, 2048, 141, network_gbps=3200, nvswitch=True, device_rdma=True,
                              price_per_hour=63.30),
    "p6-b200.48xlarge": Curated(192, 2048, 179, network_gbps=3200, nvswitch=True, device_rdma=True),
    "p6-b300.48xlarge": Curated(192, 4096, 268, network_gbps=6400, nvswitch=True, device_rdma=True),
    "trn1.2xlarge": Curated(8, 32, 32, neuron_cores=2, network_gbps=12, price_per_hour=1.34),
    "trn1.32xlarge": Curated(128, 512, 32, neuron_cores=32, network_gbps=800, device_rdma=True,
                              price_per_hour=21.50),
    "trn1n.32xlarge": Curated(128, 512, 32, neuron_cores=32, network_gbps=1600, device_rdma=True,
                               price_per_hour=24.78),
    "trn2.3xlarge": Curated(12, 128, 96, neuron_cores=8, logical_nc_configs=(2, 1), network_gbps=200),
    "trn2.48xlarge": Curated(192, 2048, 96, neuron_cores=128, logical_nc_configs=(2, 1), network_gbps=3200,
                              device_rdma=True),
    "g5.xlarge": Curated(4, 16, 24, network_gbps=10, price_per_hour=1.006),
    "g5.8xlarge": Curated(32, 128, 24, network_gbps=25, price_per_hour=2.448),
    "g5.12xlarge": Curated(48, 192, 24, network_gbps=40, price_per_hour=5.672),
    "g5.48xlarge": Curated(192, 768, 24, network_gbps=100, price_per_hour=16.288),
    "inf2.48xlarge": Curated(192, 768, 32, neuron_cores=24, network_gbps=100, price_per_hour=12.98),
    "c5.large": Curated(2, 4, network_gbps=10, price_per_hour=0.085),
    "c5.2xlarge": Curated(8, 16, network_gbps=10, price_per_hour=0.34),
    "c5.4xlarge": Curated(16, 32, network_gbps=10, price_per_hour=0.68),
    "c5.9xlarge": Curated(36, 72, network_gbps=10, price_per_hour=1.53),
    "c5n.18xlarge": Curated(72, 192, network_gbps=100, price_per_hour=3.888),
    "m5.2xlarge": Curated(8, 32, network_gbps=10, price_per_hour=0.384),
    "m5.8xlarge": Curated(32, 128, network_gbps=10, price_per_hour=1.536),
}


class OfferingsTable:
    """The table's header, and its rows read when first asked for (a dry run needs a handful of them)."""

    def __init__(self, generated: str, source: str, regions: tuple[str, ...], rows: dict[str, list[str]]) -> None:
        self.generated = generated  # the day the table was made (YYYY-MM-DD)
        self.source = source
        self.regions = regions  # the regions the table covers; others are unknown to it
        self._rows = rows  # instance type -> its columns, as written
        self._facts: dict[str, InstanceType] = {}

    @property
    def names(self) -> list[str]:
        return list(self._rows)

    @property
    def types(self) -> dict[str, InstanceType]:
        """Every row, read (for tools that walk the whole table)."""
        return {name: self.facts(name) for name in self._rows}  # type: ignore[misc]

    def facts(self, instance_type: str) -> InstanceType | None:
        """The type's facts: EC2's, with the curated figures of a curated type; None for a name EC2 has not."""
        if instance_type not in self._facts:
            row = self._rows.get(instance_type)
            if row is None:
                return None
            self._facts[instance_type] = _facts(row, self.regions)
        return self._facts[instance_type]

    def covers(self, region: str) -> bool:
        return region in self.regions

    def offered(self, instance_type: str, region: str) -> bool:
        facts = self.facts(instance_type)
        return facts is not None and region in facts.regions

    def regions_offering(self, instance_type: str) -> list[str]:
        facts = self.facts(instance_type)
        return sorted(facts.regions) if facts else []

    def similar(self, instance_type: str, count: int = 3) -> list[str]:
        """The closest existing type names, for a "did you mean"."""
        return similar_names(instance_type, self.names, count)


def format_table(generated: str, source: str, regions: list[str], types: list[InstanceType]) -> str:
    """The table file's text: a header of `# key: value` lines, then one tab-separated line per type."""
    index = {region: i for i, region in enumerate(regions)}
    lines = [
        "# EC2 instance types, their hardware facts and the regions that offer them (clusterkit's offline checks).",
        "# Regenerate with: python scripts/regenerate-instance-offerings.py (asks AWS with your credentials).",
        f"# generated: {generated}",
        f"# source: {source}",
        f"# regions: {' '.join(regions)}",
        "# columns: type, architectures, EFA interfaces, network cards, instance storage GB, "
        "accelerator (kind:count:model or -), offering regions (indices into the regions above)",
    ]
    for facts in sorted(types, key=lambda f: f.name):
        accelerator = (f"{facts.accelerator}:{facts.accelerator_count}:{facts.accelerator_model}"
                       if facts.accelerator != NO_ACCELERATOR else _NO_ACCELERATOR_COLUMN)
        offered = " ".join(str(index[r]) for r in sorted(facts.regions, key=index.__getitem__))
        lines.append("\t".join((facts.name, ",".join(facts.architectures), str(facts.efa_interfaces),
                                str(facts.network_cards), str(facts.instance_storage_gb), accelerator, offered)))
    return "\n".join(lines) + "\n"


def parse_table(text: str) -> OfferingsTable:
    header: dict[str, str] = {}
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            key, _, value = line[1:].strip().partition(": ")
            if key in _HEADER_KEYS:
                header[key] = value
        elif line:
            columns = line.split("\t")
            rows[columns[0]] = columns
    return OfferingsTable(header["generated"], header["source"], tuple(header["regions"].split()), rows)


def _facts(row: list[str], regions: tuple[str, ...]) -> InstanceType:
    name, architectures, efa, cards, storage, accelerator, offered = row
    kind, count, model = (accelerator.split(":", 2) if accelerator != _NO_ACCELERATOR_COLUMN
                          else (NO_ACCELERATOR, "0", ""))
    facts = InstanceType(
        name=name, architectures=tuple(architectures.split(",")), efa_interfaces=int(efa), network_cards=int(cards),
        instance_storage_gb=int(storage), accelerator=kind, accelerator_count=int(count), accelerator_model=model,
        regions=frozenset(regions[int(i)] for i in offered.split()))
    curated = CURATED.get(name)
    return curated.onto(facts) if curated is not None else facts


@functools.lru_cache(maxsize=1)
def table() -> OfferingsTable:
    """The shipped table (read once per process)."""
    return parse_table(TABLE_FILE.read_text(encoding="utf-8"))

"""Every EC2 instance type, its hardware facts and the regions that offer it: a dated table shipped with clusterkit.

`scripts/regenerate-instance-offerings.py` writes the table (`data/instance-offerings.tsv`) from EC2's
DescribeInstanceTypes and DescribeInstanceTypeOfferings. Offline checks (`clusterkit validate`, a dry
run) read it: an instance type that does not exist, one a region does not offer, EFA on a type without
it, a head node and queues of different architectures. AWS changes its offerings; the table says when
it was made, and a real create still asks AWS (`providers/aws/resolve.py`).

The curated facts people train with (accelerator models, NeuronCores, prices) stay in `catalog.py`.
"""

from __future__ import annotations

import functools
from pathlib import Path

from clusterkit.findings import similar_names
from clusterkit.lean_dataclass import lean_dataclass

TABLE_FILE = Path(__file__).resolve().parent / "data" / "instance-offerings.tsv"
_HEADER_KEYS = ("generated", "source", "regions")
NO_ACCELERATOR = "-"


@lean_dataclass(frozen=True)
class InstanceFacts:
    """What EC2 says of an instance type: architectures, EFA, network cards, disks, accelerators."""

    name: str
    architectures: tuple[str, ...]  # x86_64, arm64 (i386 and the mac types also appear)
    efa_interfaces: int  # 0: no EFA
    network_cards: int
    instance_storage_gb: int  # local instance-store disks (NVMe or HDD); 0: none
    accelerator: str  # "gpu", "neuron" or "" (none)
    accelerator_count: int
    accelerator_model: str
    regions: frozenset[str]

    @property
    def efa(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def architecture(self) -> str:
        """The architecture a cluster node of this type runs (x86_64 for types that also run i386)."""
        return "x86_64" if "x86_64" in self.architectures else self.architectures[0]


class OfferingsTable:
    """The table's header, and its rows read when first asked for (a dry run needs a handful of them)."""

    def __init__(self, generated: str, source: str, regions: tuple[str, ...], rows: dict[str, list[str]]) -> None:
        self.generated = generated  # the day the table was made (YYYY-MM-DD)
        self.source = source
        self.regions = regions  # the regions the table covers; others are unknown to it
        self._rows = rows  # instance type -> its columns, as written
        self._facts: dict[str, InstanceFacts] = {}

    @property
    def names(self) -> list[str]:
        return list(self._rows)

    @property
    def types(self) -> dict[str, InstanceFacts]:
        """Every row, read (for tools that walk the whole table)."""
        return {name: self.facts(name) for name in self._rows}  # type: ignore[misc]

    def facts(self, instance_type: str) -> InstanceFacts | None:
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


def format_table(generated: str, source: str, regions: list[str], types: list[InstanceFacts]) -> str:
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
                       if facts.accelerator else NO_ACCELERATOR)
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


def _facts(row: list[str], regions: tuple[str, ...]) -> InstanceFacts:
    name, architectures, efa, cards, storage, accelerator, offered = row
    kind, count, model = accelerator.split(":", 2) if accelerator != NO_ACCELERATOR else ("", "0", "")
    return InstanceFacts(
        name=name, architectures=tuple(architectures.split(",")), efa_interfaces=int(efa), network_cards=int(cards),
        instance_storage_gb=int(storage), accelerator=kind, accelerator_count=int(count), accelerator_model=model,
        regions=frozenset(regions[int(i)] for i in offered.split()))


@functools.lru_cache(maxsize=1)
def table() -> OfferingsTable:
    """The shipped table (read once per process)."""
    return parse_table(TABLE_FILE.read_text(encoding="utf-8"))

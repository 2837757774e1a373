"""The instance types clusterkit knows by name: the curated ones, and the short names of the presets.

One `InstanceType` per name, from `offerings.py` (EC2's dated table joined with the curated figures): a job
spec, doctor, recipes, nccl-test and the cluster summary look a type up here, the cluster rules and the AWS
resolution read the whole table there (`offerings.table()`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from clusterkit.errors import NotFound
from clusterkit.offerings import CURATED, PRICE_TABLE_DATE, PRICE_TABLE_REGION, InstanceType, table

__all__ = ["INSTANCE_TYPES", "PRESET_INSTANCE_TYPES", "PRICE_TABLE_DATE", "PRICE_TABLE_REGION", "InstanceType",
           "find_instance_type", "instance_type", "resolve_instance_type"]


class _CuratedTypes(Mapping[str, InstanceType]):
    """The curated types by name; their facts are read from the table when first asked for."""

    def __getitem__(self, name: str) -> InstanceType:
        facts = table().facts(name) if name in CURATED else None
        if facts is None:
            raise KeyError(name)
        return facts

    def __iter__(self) -> Iterator[str]:
        return iter(CURATED)

    def __len__(self) -> int:
        return len(CURATED)


INSTANCE_TYPES: Mapping[str, InstanceType] = _CuratedTypes()

# Short names for the instance types people train on: a cluster preset builds its nodes of this type,
# and a job spec, doctor, recipes and nccl-test mean the same machine by the same word.
PRESET_INSTANCE_TYPES: dict[str, str] = {
    "p4d": "p4d.24xlarge",
    "p4de": "p4de.24xlarge",
    "p5": "p5.48xlarge",
    "p5e": "p5e.48xlarge",
    "p5en": "p5en.48xlarge",
    "p6-b200": "p6-b200.48xlarge",
    "trn1": "trn1.32xlarge",
    "trn1n": "trn1n.32xlarge",
    "trn2": "trn2.48xlarge",
    "g5": "g5.12xlarge",
}


def resolve_instance_type(name_or_preset: str) -> InstanceType | None:
    """A curated instance type by its EC2 name or preset short name (`p5`), or None when unknown."""
    return INSTANCE_TYPES.get(PRESET_INSTANCE_TYPES.get(name_or_preset, name_or_preset))


def instance_type(name: str) -> InstanceType:
    """Look up a curated instance type; unknown names get an error that lists what is known."""
    try:
        return INSTANCE_TYPES[name]
    except KeyError:
        known = ", ".join(sorted(INSTANCE_TYPES))
        raise NotFound(f"unknown instance type {name!r}", fix=f"use one of: {known}") from None


def find_instance_type(name: str) -> InstanceType | None:
    return INSTANCE_TYPES.get(name)

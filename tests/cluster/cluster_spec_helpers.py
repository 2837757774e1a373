"""Shared helpers for the cluster tests: a small valid spec and a way to change one field by its path."""

from __future__ import annotations

import copy
import dataclasses
import re
import types
import typing
from collections.abc import Iterator
from typing import Any

from clusterkit.cluster.plan import plan_spec
from clusterkit.cluster.spec import ClusterSpec

SUBNET = "subnet-0123456789abcdef0"
RESERVATION = "cr-0123456789abcdef0"


def base_data() -> dict[str, Any]:
    """A small, valid spec: one EFA GPU queue, one CPU queue, a new FSx for Lustre."""
    return {
        "name": "test-cluster",
        "subnet_id": SUBNET,
        "ssh": {"key_name": "me", "allowed_cidr": "10.1.0.0/16"},
        "queues": [
            {"name": "gpu", "compute": [{"name": "p4de", "instance_type": "p4de.24xlarge", "max_count": 2}]},
            {"name": "cpu", "compute": [{"name": "c5", "instance_type": "c5.4xlarge"}]},
        ],
        "storage": {"lustre": [{"name": "fsx", "mount_dir": "/fsx"}]},
    }


_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def set_field(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `data` with the field at `path` (e.g. `queues[0].compute[0].name`) set to `value`."""
    data = copy.deepcopy(data)
    steps = [int(index) if index else key for key, index in _STEP.findall(path)]
    target: Any = data
    for step, following in zip(steps, steps[1:]):
        if isinstance(step, str) and step not in target:
            target[step] = [] if isinstance(following, int) else {}
        target = target[step]
    last = steps[-1]
    if isinstance(last, int) and last == len(target):
        target.append(value)  # one past the end appends, so tests can add list entries
    else:
        target[last] = value
    return data


def with_fields(data: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    for path, value in changes.items():
        data = set_field(data, path, value)
    return data


def findings_of(data: Any) -> list:
    return list(plan_spec(data).findings)


def spec_fields() -> list[str]:
    """Every field path of the cluster spec, list items as `[]` (`queues[].compute[].name`): what tests
    that must touch every field compare against. Maps (tags, settings) are one field each."""

    def walk(cls: type, prefix: str) -> Iterator[str]:
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            hint, path = hints[field.name], f"{prefix}{field.name}"
            inner = next((arg for arg in typing.get_args(hint) if arg is not type(None)), hint) \
                if typing.get_origin(hint) in (typing.Union, types.UnionType) else hint
            if typing.get_origin(inner) is list:
                inner, path = typing.get_args(inner)[0], f"{path}[]"
            if dataclasses.is_dataclass(inner):
                yield from walk(inner, f"{path}.")
            else:
                yield path

    return list(walk(ClusterSpec, ""))

"""An AWS request (SageMaker's CreateCluster, FSx's CreateFileSystem, ...) checked offline against botocore's
service model.

botocore's own `ParamValidator` checks what the client checks before sending: required members, unknown members,
types and minimums. The service checks the rest (maximums, enums, patterns) only when the call is made; this walks
the input shape for those too, so a dry run finds what SageMaker would refuse. The same check guards every
request the tests' fakes receive.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from clusterkit.lean_dataclass import lean_dataclass

if TYPE_CHECKING:
    from botocore.model import ServiceModel, Shape

SERVICE = "sagemaker"  # the default service: HyperPod's calls are SageMaker's
# Unicode property classes of AWS's patterns, which Python's re lacks: a value's letters, separators and numbers
# are written as one representative of their class, and the pattern names that representative.
_PROPERTIES = {r"\p{L}": ("a", "L"), r"\p{Z}": (" ", "Z"), r"\p{N}": ("0", "N")}


@lean_dataclass(frozen=True)
class ModelProblem:
    path: str  # the member, as botocore names it: InstanceGroups[0].ThreadsPerCore
    message: str


@functools.lru_cache(maxsize=None)
def service_model(service: str = SERVICE) -> ServiceModel:
    import botocore.session  # lazy: only a HyperPod plan loads botocore's model

    return botocore.session.get_session().get_service_model(service)


def enum_of(operation: str, *path: str) -> tuple[str, ...]:
    """The enum of a member of an operation's input, e.g. ("InstanceGroups", "InstanceType")."""
    shape = service_model().operation_model(operation).input_shape
    for name in path:
        shape = shape.member if shape.type_name == "list" else shape
        shape = shape.members[name]
    return tuple(shape.enum)


def problems(operation: str, params: Mapping[str, object], service: str = SERVICE) -> list[ModelProblem]:
    """Every way `params` breaks the model of `operation`'s input; empty when the service's model accepts them."""
    from botocore.validate import ParamValidator

    shape = service_model(service).operation_model(operation).input_shape
    report = ParamValidator().validate(dict(params), shape)
    found = [ModelProblem(_where(name, kind, extra), _message(kind, extra))
             for kind, name, extra in report._errors]
    return found + list(_service_rules(shape, params, ""))


def _where(name: str, kind: str, extra: dict) -> str:
    where = name.lstrip(".")
    member = extra.get("required_name") or extra.get("unknown_param")
    return f"{where}.{member}".lstrip(".") if member else where


def _message(kind: str, extra: dict) -> str:
    if kind == "missing required field":
        return "is required"
    if kind == "unknown field":
        return "is not a member botocore knows"
    if kind == "invalid type":
        wanted = " or ".join(valid.split("'")[1] for valid in extra["valid_types"])  # "<class 'int'>" -> int
        return f"is {type(extra['param']).__name__}, not {wanted}"
    if kind == "invalid range" or kind == "invalid length":
        return f"is below the minimum {extra.get('min_allowed')}"
    return kind


def _service_rules(shape: Shape, value: object, where: str) -> Iterator[ModelProblem]:
    """Maximums, enums and patterns (ParamValidator leaves them to the service)."""
    metadata = shape.metadata
    if shape.type_name == "structure" and isinstance(value, Mapping):
        for name, member in shape.members.items():
            if name in value:
                yield from _service_rules(member, value[name], f"{where}.{name}".lstrip("."))
    elif shape.type_name == "list" and isinstance(value, list):
        if "max" in metadata and len(value) > metadata["max"]:
            yield ModelProblem(where, f"has {len(value)} items; at most {metadata['max']}")
        for index, item in enumerate(value):
            yield from _service_rules(shape.member, item, f"{where}[{index}]")
    elif shape.type_name == "string" and isinstance(value, str):
        if "max" in metadata and len(value) > metadata["max"]:
            yield ModelProblem(where, f"is {len(value)} characters long; at most {metadata['max']}")
        if shape.enum and value not in shape.enum:
            yield ModelProblem(where, f"{value!r} is not one of botocore's {shape.name} values")
        elif "pattern" in metadata and not _matches(metadata["pattern"], value):
            yield ModelProblem(where, f"{value!r} does not match the pattern {metadata['pattern']}")
    elif shape.type_name in ("integer", "long") and isinstance(value, int) and not isinstance(value, bool):
        if "max" in metadata and value > metadata["max"]:
            yield ModelProblem(where, f"{value} is above the maximum {metadata['max']}")


def _matches(pattern: str, value: str) -> bool:
    """The service's full match of a Java-style pattern."""
    if r"\p{" in pattern:
        for token, (stand_in, _) in _PROPERTIES.items():
            pattern = pattern.replace(token, stand_in)
        value = "".join(_stand_in(character) for character in value)
    try:
        return re.fullmatch(pattern, value) is not None
    except re.error:
        return True  # a pattern Python cannot read: left to the service


def _stand_in(character: str) -> str:
    category = unicodedata.category(character)[0]
    return next((stand_in for stand_in, kind in _PROPERTIES.values() if kind == category), character)

"""Load a cluster spec from YAML or plain data, keeping the path of every field for findings.

The loader is driven by the spec dataclasses' type hints, so the spec has one definition. It never
raises on bad input: every problem (unknown key, wrong type, missing key) becomes a Finding that
names the field, and all of them are reported together.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from collections.abc import Mapping
from pathlib import Path

from clusterkit.cluster.spec import ClusterSpec
from clusterkit.errors import ClusterkitError
from clusterkit.files import read_text
from clusterkit.findings import Finding, Level

_TYPE_NAMES = {str: "a string", int: "a whole number", bool: "true or false", float: "a number"}


def join_path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


@functools.lru_cache(maxsize=None)
def _field_types(cls: type) -> dict[str, object]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


@functools.lru_cache(maxsize=None)
def _required_fields(cls: type) -> tuple[str, ...]:
    return tuple(
        f.name for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )


class _Invalid(Exception):
    """A value could not be converted; the finding is already recorded."""


def _error(findings: list[Finding], path: str, message: str, value: object = None, fix: str = "") -> _Invalid:
    findings.append(Finding(Level.ERROR, path or "<spec>", message, fix=fix, value=_printable(value)))
    return _Invalid()


def _printable(value: object) -> object:
    """Keep finding values JSON-friendly and short, whatever the input was."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _describe(value: object) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    return f"{type(value).__name__} {_printable(value)!r}"


def _convert(value: object, hint: object, path: str, findings: list[Finding]) -> object:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if value is None:
            return None
        return _convert(value, options[0], path, findings)
    if dataclasses.is_dataclass(hint):
        return _load_dataclass(value, hint, path, findings)
    if origin is list:
        (item_hint,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise _error(findings, path, f"expected a list, got {_describe(value)}", value)
        items, failed = [], False
        for index, item in enumerate(value):
            try:
                items.append(_convert(item, item_hint, join_path(path, index), findings))
            except _Invalid:
                failed = True
        if failed:
            raise _Invalid()
        return items
    if origin is dict:
        return _load_string_map(value, path, findings)
    return _convert_scalar(value, hint, path, findings)


def _convert_scalar(value: object, hint: object, path: str, findings: list[Finding]) -> object:
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is str:
        if isinstance(value, str):
            return value
    expected = _TYPE_NAMES.get(hint, str(hint))  # type: ignore[call-overload]
    raise _error(findings, path, f"expected {expected}, got {_describe(value)}", value)


def _load_string_map(value: object, path: str, findings: list[Finding]) -> dict[str, str]:
    """Tags and Slurm settings: string keys, scalar values (numbers are written as text)."""
    if not isinstance(value, Mapping):
        raise _error(findings, path, f"expected a mapping, got {_describe(value)}", value)
    result, failed = {}, False
    for key, item in value.items():
        if not isinstance(key, str):
            _error(findings, path, f"keys must be strings, got {_describe(key)}", key)
            failed = True
        elif isinstance(item, bool):
            result[key] = "true" if item else "false"
        elif isinstance(item, (str, int, float)):
            result[key] = str(item)
        else:
            _error(findings, join_path(path, key), f"expected a text or number value, got {_describe(item)}", item)
            failed = True
    if failed:
        raise _Invalid()
    return result


def _load_dataclass(value: object, cls: type, path: str, findings: list[Finding]) -> object:
    if not isinstance(value, Mapping):
        raise _error(findings, path, f"expected a mapping, got {_describe(value)}", value)
    field_types = _field_types(cls)
    kwargs, failed = {}, False
    for key, item in value.items():
        if not isinstance(key, str):
            _error(findings, path, f"keys must be strings, got {_describe(key)}", key)
            failed = True
            continue
        if key not in field_types:
            _error(findings, join_path(path, key), f"unknown key {key!r}", fix=_did_you_mean(key, field_types))
            failed = True
            continue
        try:
            kwargs[key] = _convert(item, field_types[key], join_path(path, key), findings)
        except _Invalid:
            failed = True
    for name in _required_fields(cls):
        if name not in value:
            _error(findings, join_path(path, name), f"missing required key {name!r}")
            failed = True
        elif value[name] is None:
            _error(findings, join_path(path, name), f"{name!r} must have a value")
            failed = True
    if failed:
        raise _Invalid()
    return cls(**kwargs)


def _did_you_mean(key: str, known: Mapping[str, object]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return "known keys: " + ", ".join(known)


def load_spec_data(data: object) -> tuple[ClusterSpec | None, list[Finding]]:
    """Build a ClusterSpec from parsed YAML (dicts, lists, scalars). No spec when any finding is an error."""
    findings: list[Finding] = []
    try:
        spec = _load_dataclass(data, ClusterSpec, "", findings)
    except _Invalid:
        return None, findings
    return spec, findings  # type: ignore[return-value]


def parse_yaml(text: str, source: str = "<spec>") -> object:
    """Parse YAML text safely; a syntax error is a ClusterkitError naming the line."""
    import yaml  # lazy: keep CLI start fast

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ClusterkitError(f"{source}:{where}: not valid YAML: {problem}",
                              fix="fix the YAML syntax (indentation, colons, quotes)") from None


def load_spec_text(text: str, source: str = "<spec>") -> tuple[ClusterSpec | None, list[Finding]]:
    return load_spec_data(parse_yaml(text, source))


def read_spec_file(path: str | Path) -> object:
    """Parse a YAML spec file into raw data; unreadable or malformed files are a ClusterkitError."""
    return parse_yaml(read_text(path, "cluster spec (YAML)"), str(path))


def load_spec_file(path: str | Path) -> tuple[ClusterSpec | None, list[Finding]]:
    return load_spec_data(read_spec_file(path))

"""Every control character in every text field of both spec kinds is refused, naming the field.

The fields come from the spec dataclasses' own type hints (a field added later is covered without a change
here): every text field, every list item, and the keys and values of every map (`slurm.custom_settings`,
`env`, ...). Each gets each C0 control (NUL, tab and line breaks among them), DEL, each C1 control
(U+0080-U+009F) and U+2028/U+2029, loaded and checked as a spec file is. The fields whose text reaches a
program quoted, byte for byte (command and compile arguments, env values), may hold tabs and line breaks,
and only those.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterkit.cluster import load_spec_data, validate
from clusterkit.cluster.spec import ClusterSpec
from clusterkit.findings import Finding, Level
from clusterkit.jobs.spec import JobSpec
from clusterkit.jobs.validators import check_job_data
from clusterkit.spec_reader import MULTILINE_CONTROLS

CONTROLS = [chr(code) for code in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029)]
MAP_KEY = "Key1"


@dataclasses.dataclass(frozen=True)
class Slot:
    """One place text goes: the YAML keys to it (ints index lists), whether it is a map's key, and whether
    its field may hold line breaks."""

    keys: tuple[str | int, ...]
    map_key: bool
    multiline: bool

    @property
    def path(self) -> str:
        """The field as findings name it (a map's key by the map's path)."""
        path = ""
        for key in self.keys:
            path = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key
        return path


def _unwrap(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return hint


def _fields(cls: type) -> Iterator[tuple[str, Any, dataclasses.Field]]:
    hints = typing.get_type_hints(cls)
    for spec_field in dataclasses.fields(cls):
        yield spec_field.metadata.get("key", spec_field.name), _unwrap(hints[spec_field.name]), spec_field


def slots(hint: Any, keys: tuple[str | int, ...] = (), multiline: bool = False) -> Iterator[Slot]:
    """Every place of text under `hint`, from the type hints."""
    hint = _unwrap(hint)
    if hint is str:
        yield Slot(keys, False, multiline)
    elif dataclasses.is_dataclass(hint):
        for key, field_hint, spec_field in _fields(hint):
            yield from slots(field_hint, (*keys, key), spec_field.metadata.get("multiline", False))
    elif typing.get_origin(hint) in (list, tuple):
        yield from slots(typing.get_args(hint)[0], (*keys, 0), multiline)
    elif typing.get_origin(hint) is dict:
        yield Slot(keys, True, False)
        yield from slots(typing.get_args(hint)[1], (*keys, MAP_KEY), multiline)


def placeholder(hint: Any) -> Any:
    """A value of the hint's type: the required fields of a dataclass filled, so the spec loads."""
    hint = _unwrap(hint)
    if dataclasses.is_dataclass(hint):
        return {key: placeholder(field_hint) for key, field_hint, spec_field in _fields(hint)
                if spec_field.default is dataclasses.MISSING and spec_field.default_factory is dataclasses.MISSING}
    origin = typing.get_origin(hint)
    return {str: "x", int: 1, float: 1.0, bool: False}.get(hint) if origin is None else origin()


def data_with(hint: Any, keys: tuple[str | int, ...], leaf: Any) -> Any:
    """The smallest data of `hint` that loads, with `leaf` at `keys`."""
    hint = _unwrap(hint)
    if not keys:
        return leaf
    head, rest = keys[0], keys[1:]
    if dataclasses.is_dataclass(hint):
        data = placeholder(hint)
        field_hint = next(field_hint for key, field_hint, _ in _fields(hint) if key == head)
        data[head] = data_with(field_hint, rest, leaf)
        return data
    if typing.get_origin(hint) is dict:
        return {head: data_with(typing.get_args(hint)[1], rest, leaf)}
    return [data_with(typing.get_args(hint)[0], rest, leaf)]


def cluster_findings(data: Any) -> list[Finding]:
    spec, findings = load_spec_data(data)
    return findings if spec is None else findings + validate(spec)


KINDS = {"cluster": (ClusterSpec, cluster_findings), "job": (JobSpec, check_job_data)}
SLOTS = [(kind, slot) for kind, (cls, _) in KINDS.items() for slot in slots(cls)]


def refusal(kind: str, slot: Slot, char: str) -> Finding | None:
    """The error naming the slot's field when `char` is in its text; None when the spec is accepted there."""
    cls, check = KINDS[kind]
    text = f"a{char}b"
    data = data_with(cls, slot.keys, {text: "v"} if slot.map_key else text)
    return next((f for f in check(data) if f.level is Level.ERROR and f.path == slot.path
                 and ("control character" in f.message or "NUL" in f.message or f.rule == f"{kind}.value")), None)


def test_every_kind_of_text_place_is_walked() -> None:
    paths = {f"{kind}:{slot.path}{' key' if slot.map_key else ''}" for kind, slot in SLOTS}
    for expected in ("cluster:slurm.custom_settings key", f"cluster:slurm.custom_settings.{MAP_KEY}",
                     "cluster:queues[0].compute[0].instance_type", "cluster:queues[0].subnet_ids[0]",
                     "cluster:head_node.custom_actions.on_node_start[0].args[0]", "job:env key",
                     f"job:env.{MAP_KEY}", "job:launcher.type", "job:container.mounts[0].source", "job:sbatch[0]",
                     "job:command.args[0]", "job:supervise.python"):
        assert expected in paths
    assert len(SLOTS) > 100


@pytest.mark.parametrize(("kind", "slot"), SLOTS, ids=[f"{kind}:{slot.path}{'(key)' * slot.map_key}"
                                                       for kind, slot in SLOTS])
def test_every_control_character_is_refused_naming_the_field(kind: str, slot: Slot) -> None:
    for char in CONTROLS:
        finding = refusal(kind, slot, char)
        if slot.multiline and char in MULTILINE_CONTROLS:
            assert finding is None, (char, finding)  # multi-line text reaches the program byte for byte
            continue
        assert finding is not None, f"U+{ord(char):04X} in {slot.path} is not refused"
        assert f"U+{ord(char):04X}" in finding.message or finding.rule == f"{kind}.value", finding
        assert "\n" not in str(finding) and "\x9b" not in str(finding), finding


def clusterkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("spec", "field"), [
    ("name: c\nsubnet_id: subnet-0123456789abcdef0\nssh: {key_name: me}\nqueues:\n"
     "  - {name: gpu, compute: [{name: p4de, instance_type: p4de.24xlarge}]}\n"
     'slurm: {custom_settings: {MaxJobCount: "10\\x9b"}}\n', "slurm.custom_settings.MaxJobCount"),
    ('name: j\ncommand: [train.py, "--lr=\\x9b1"]\n', "command.args[0]"),
    ('name: j\ncommand: [train.py]\nenv: {MY_VAR: "a\\x9bb"}\n', "env.MY_VAR"),
    ('name: j\ncommand: [train.py]\nenv: {"MY\\x9bVAR": "v"}\n', "env"),
], ids=["cluster-setting", "job-argument", "job-env-value", "job-env-key"])
def test_a_c1_control_is_refused_by_validate(tmp_path: Path, spec: str, field: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(spec)
    result = clusterkit("validate", str(path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith(f"error: {field}: "))
    assert "control character U+009B" in line and "\x9b" not in result.stdout
    report = json.loads(clusterkit("validate", str(path), "-o", "json").stdout)
    assert report["valid"] is False

"""From a preset or spec file plus overrides to a checked plan: the pure part of `create-cluster --dry-run`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from clusterkit.cluster.loader import load_spec_data, read_spec_file
from clusterkit.cluster.presets import preset
from clusterkit.cluster.render import render, render_config
from clusterkit.cluster.spec import ClusterSpec
from clusterkit.cluster.summary import ClusterSummary, summarize
from clusterkit.cluster.validators import validate
from clusterkit.errors import ClusterkitError
from clusterkit.findings import Finding, has_errors


@dataclass(frozen=True)
class SpecOverrides:
    """Values given on the command line; they win over the preset or file."""

    name: str | None = None
    region: str | None = None
    subnet_id: str | None = None
    key_name: str | None = None


@dataclass
class Plan:
    """A checked spec and what it renders to; `config_text` is None when any finding is an error."""

    findings: list[Finding]
    spec: ClusterSpec | None = None
    config: dict | None = None
    config_text: str | None = None
    summary: ClusterSummary | None = None

    @property
    def ok(self) -> bool:
        return self.config_text is not None


def spec_data(preset_name: str | None = None, spec_file: str | Path | None = None) -> object:
    """The raw spec data (as parsed YAML) of a preset or a spec file: exactly one of the two."""
    if (preset_name is None) == (spec_file is None):
        raise ClusterkitError("give either a preset or a spec file", fix="use --preset NAME or --file SPEC.yaml")
    if preset_name is not None:
        return dataclasses.asdict(preset(preset_name))
    return read_spec_file(spec_file)  # type: ignore[arg-type]


def apply_overrides(data: object, overrides: SpecOverrides) -> object:
    """Put command-line values into the raw data, so findings still name spec fields (`ssh.key_name`)."""
    if not isinstance(data, dict):
        return data  # the loader reports that the spec is not a mapping
    data = dict(data)
    for key in ("name", "region", "subnet_id"):
        value = getattr(overrides, key)
        if value is not None:
            data[key] = value
    if overrides.key_name is not None:
        ssh = data.get("ssh")
        if ssh is None or isinstance(ssh, dict):
            data["ssh"] = {**(ssh or {}), "key_name": overrides.key_name}
    return data


def plan(data: object) -> Plan:
    """Load, validate and (when there is no error) render and summarize raw spec data."""
    spec, findings = load_spec_data(data)
    if spec is None:
        return Plan(findings=findings)
    findings = findings + validate(spec)
    if has_errors(findings):
        return Plan(findings=findings, spec=spec)
    return Plan(findings=findings, spec=spec, config=render_config(spec), config_text=render(spec),
                summary=summarize(spec))



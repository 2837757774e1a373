"""A ParallelCluster spec checked offline, as a value: `plan_spec` (spec → findings, config, text, summary,
the node scripts apply uploads) and where the raw spec comes from (`spec_data`: a preset or a spec file, with
command-line values that win). Pure: nothing is asked of AWS. The `aws` provider builds its plan on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from clusterkit import spec_reader
from clusterkit.cluster import node_scripts
from clusterkit.cluster.loader import load_spec_data, read_spec_file
from clusterkit.cluster.presets import preset
from clusterkit.cluster.render import config_text, render_config
from clusterkit.cluster.spec import ClusterSpec
from clusterkit.cluster.summary import ClusterSummary, summarize
from clusterkit.cluster.validators import validate
from clusterkit.errors import ClusterkitError
from clusterkit.findings import Finding, has_errors
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.registry import JsonObject


@lean_dataclass(frozen=True)
class SpecCheck:
    """A spec's findings and, when none is an error, its ParallelCluster config, the config's text, its summary
    and the node scripts its config runs (URL -> local file, what apply uploads first)."""

    name: str
    findings: tuple[Finding, ...] = ()
    spec: ClusterSpec | None = None
    config: JsonObject | None = None
    config_text: str | None = None
    summary: ClusterSummary | None = None
    uploads: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.config_text is not None


def spec_data(preset_name: str | None, spec_file: str | None, overrides: Mapping[str, str]) -> Any:
    """The raw spec (a parsed tree or plain data) of a preset or a spec file, with `overrides` (spec field path ->
    value) written over it."""
    if (preset_name is None) == (spec_file is None):
        raise ClusterkitError("give either a preset or a spec file", fix="use --preset NAME or --file SPEC.yaml")
    data: Any = (dataclasses.asdict(preset(preset_name)) if preset_name is not None
                 else read_spec_file(spec_file))  # type: ignore[arg-type]
    for path, value in overrides.items():
        data = spec_reader.with_text(data, path, value)
    return data


def plan_spec(data: Any) -> SpecCheck:
    """Load, validate and (when there is no error) render and summarize raw spec data. Pure."""
    spec, findings = load_spec_data(data)
    if spec is None:
        raw = spec_reader.plain_data(data)
        name = str(raw.get("name") or "") if isinstance(raw, dict) else ""
        return SpecCheck(name=name, findings=tuple(findings))
    findings = findings + validate(spec)
    if has_errors(findings):
        return SpecCheck(name=spec.name, findings=tuple(findings), spec=spec)
    config = render_config(spec)
    return SpecCheck(name=spec.name, findings=tuple(findings), spec=spec, config=config,
                     config_text=config_text(spec.name, config), summary=summarize(spec),
                     uploads=script_uploads(config))


def script_uploads(config: JsonObject) -> dict[str, str]:
    """URL -> local file of every clusterkit node script the config runs (what apply uploads first)."""
    return {url: str(script.path) for url, script in node_scripts.uploads(config).items()}


def check_spec_file(path: str | Path) -> SpecCheck:
    """`clusterkit validate SPEC.yaml`: every finding of a spec file."""
    return plan_spec(read_spec_file(path))

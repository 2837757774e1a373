"""Cluster specs and presets → validated AWS ParallelCluster 3.16 configurations, offline.

    spec, findings = load_spec_file("cluster.yaml")      # or preset("p4de"), or ClusterSpec(...)
    findings += validate(spec)                           # every rule, all findings together
    text = render(spec)                                  # deterministic ParallelCluster YAML
    checked = plan(apply_overrides(spec_data("p4de"), SpecOverrides(name="demo")))  # all of it in one step
    print(summarize(spec).lines())

Submodules import yaml lazily, so importing this package stays cheap.
"""

from __future__ import annotations

from clusterkit.cluster.loader import load_spec_data, load_spec_file, load_spec_text
from clusterkit.cluster.plan import Plan, SpecOverrides, apply_overrides, plan, spec_data
from clusterkit.cluster.presets import PRESETS, preset, preset_names
from clusterkit.cluster.render import render, render_config
from clusterkit.cluster.spec import ClusterSpec
from clusterkit.cluster.summary import ClusterSummary, summarize
from clusterkit.cluster.validators import validate

__all__ = [
    "PRESETS",
    "ClusterSpec",
    "ClusterSummary",
    "Plan",
    "SpecOverrides",
    "apply_overrides",
    "load_spec_data",
    "load_spec_file",
    "load_spec_text",
    "plan",
    "preset",
    "preset_names",
    "render",
    "render_config",
    "spec_data",
    "summarize",
    "validate",
]

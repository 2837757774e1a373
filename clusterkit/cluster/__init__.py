"""Cluster specs and presets → validated AWS ParallelCluster 3.16 configurations, offline.

    spec, findings = load_spec_file("cluster.yaml")      # or preset("p4de"), or ClusterSpec(...)
    findings += validate(spec)                           # every rule, all findings together
    text = render(spec)                                  # deterministic ParallelCluster YAML
    checked = plan_spec(spec_data("p4de", None, {"name": "demo"}))   # all of it, as a value
    print(summarize(spec).lines())

Submodules import yaml lazily, so importing this package stays cheap.
"""

from __future__ import annotations

from clusterkit.cluster.loader import load_spec_data, load_spec_file, load_spec_text
from clusterkit.cluster.plan import SpecCheck, check_spec_file, plan_spec, spec_data
from clusterkit.cluster.presets import PRESETS, preset, preset_names
from clusterkit.cluster.render import config_text, render, render_config
from clusterkit.cluster.spec import ClusterSpec
from clusterkit.cluster.summary import ClusterSummary, summarize
from clusterkit.cluster.validators import CLUSTER_RULES, validate

__all__ = [
    "CLUSTER_RULES",
    "PRESETS",
    "ClusterSpec",
    "ClusterSummary",
    "SpecCheck",
    "check_spec_file",
    "config_text",
    "load_spec_data",
    "load_spec_file",
    "load_spec_text",
    "plan_spec",
    "preset",
    "preset_names",
    "render",
    "render_config",
    "spec_data",
    "summarize",
    "validate",
]

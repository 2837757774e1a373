"""The one way clusterkit writes YAML (cluster configs, CloudFormation templates)."""

from __future__ import annotations

from typing import Any


def yaml_text(data: Any) -> str:
    """Plain data as block-style YAML: keys in the order given, long lines kept, and a value used twice
    written twice, never as an anchor and alias (which CloudFormation refuses)."""
    import yaml  # lazy: keep CLI start fast

    base = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    dumper = type("NoAliasDumper", (base,), {"ignore_aliases": lambda self, data: True})
    return yaml.dump(data, Dumper=dumper, sort_keys=False, default_flow_style=False, width=1000)

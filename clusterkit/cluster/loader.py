"""Read a cluster spec (YAML or plain data) through clusterkit's one spec reader.

Nothing here raises on a bad value: every problem (unknown key, wrong type, missing key) is a
Finding that names the field, and all of them are reported together. Unreadable files and YAML
that is not valid (or abusive: alias bombs, deep nesting, huge files) raise SpecError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clusterkit import spec_reader
from clusterkit.cluster.spec import ClusterSpec
from clusterkit.findings import Finding

WHAT = "cluster spec (YAML)"


def load_spec_data(data: Any) -> tuple[ClusterSpec | None, list[Finding]]:
    """Build a ClusterSpec from a parsed tree or plain data. No spec when any finding is an error."""
    return spec_reader.load(ClusterSpec, data, rule_prefix="cluster")


def load_spec_text(text: str, source: str = "<spec>") -> tuple[ClusterSpec | None, list[Finding]]:
    return load_spec_data(spec_reader.parse_text(text, source))


def read_spec_file(path: str | Path) -> spec_reader.Node | None:
    """Parse a spec file into a tree; unreadable or malformed files raise SpecError."""
    return spec_reader.read_file(path, WHAT)


def load_spec_file(path: str | Path) -> tuple[ClusterSpec | None, list[Finding]]:
    return load_spec_data(read_spec_file(path))

"""Plans as values: what `create-cluster` would do, computed without effects.

`ClusterRequest` is what a person asks for (the CLI's flags, a notebook's arguments). A provider's
`plan(request)` turns it into a `ClusterPlan`: the checked spec, its findings, the rendered config
and the exact files and actions an apply would write and take. A dry run prints the plan; apply uses
exactly what it holds. `plan_spec` is the pure part for AWS specs (spec → findings, config, text).
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from pathlib import Path
from typing import Any

from clusterkit import spec_reader
from clusterkit.cluster import node_scripts
from clusterkit.cluster.loader import load_spec_data, read_spec_file
from clusterkit.cluster.presets import preset
from clusterkit.cluster.render import config_text, render_config
from clusterkit.cluster.summary import ClusterSummary, summarize
from clusterkit.cluster.validators import validate
from clusterkit.errors import ClusterkitError
from clusterkit.findings import Finding, has_errors
from clusterkit.lean_dataclass import lean_dataclass

AWS = "aws"


@lean_dataclass(frozen=True)
class ClusterRequest:
    """A cluster someone asks for. Fields a provider does not use are refused by it, with a fix."""

    name: str
    provider: str | None = None  # None: aws for a preset or spec file, else local
    # AWS: where the spec comes from, and command-line values that win over it.
    preset: str | None = None
    spec_file: str | None = None
    region: str | None = None
    subnet_id: str | None = None
    head_subnet_id: str | None = None
    key_name: str | None = None
    custom_ami: str | None = None
    identity_file: str | None = None  # the SSH key for the head node, when not ~/.ssh/KEY_NAME(.pem)
    # local: the cluster's shape.
    nodes: int = 4
    cpus_per_node: int = 2
    gpus_per_node: int = 0
    memory_mb_per_node: int = 4000
    ssh: bool = False  # an sshd for the head node, to reach the cluster as a remote one

    @property
    def provider_name(self) -> str:
        if self.provider:
            return self.provider
        return "aws" if self.preset or self.spec_file else "local"

    @property
    def overrides(self) -> dict[str, str]:
        """Spec fields given on the command line, by their path in the spec."""
        values = {"name": self.name, "region": self.region, "subnet_id": self.subnet_id,
                  "head_node.subnet_id": self.head_subnet_id, "ssh.key_name": self.key_name,
                  "image.custom_ami": self.custom_ami}
        return {path: value for path, value in values.items() if value is not None}


@lean_dataclass(frozen=True)
class ClusterPlan:
    """Everything `apply` needs and nothing it will compute again. `ok` when no finding is an error."""

    provider: str
    name: str
    findings: tuple[Finding, ...] = ()
    spec: Any = None  # ClusterSpec (aws), the local cluster's shape (local)
    config: dict[str, Any] | None = None  # aws: the ParallelCluster configuration
    config_text: str | None = None  # aws: that configuration as the YAML file clusterkit writes
    summary: ClusterSummary | None = None
    files: dict[str, str] = field(default_factory=dict)  # path -> text, what apply writes
    uploads: dict[str, str] = field(default_factory=dict)  # s3:// URL -> clusterkit node script apply uploads
    actions: tuple[str, ...] = ()  # what apply does, step by step (commands, API calls)
    details: dict[str, Any] = field(default_factory=dict)  # provider facts: ports, chosen subnet, caller...

    @property
    def ok(self) -> bool:
        return not has_errors(self.findings) and self.spec is not None and (self.provider != AWS or
                                                                              self.config_text is not None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider, "name": self.name, "ok": self.ok,
            "findings": [finding.to_dict() for finding in self.findings],
            "config": self.config, "config_text": self.config_text,
            "summary": self.summary.to_dict() if self.summary else None,
            "files": dict(self.files), "uploads": dict(self.uploads), "actions": list(self.actions),
            "details": dict(self.details),
        }

    def replace(self, **changes: Any) -> ClusterPlan:
        return dataclasses.replace(self, **changes)


def spec_data(request: ClusterRequest) -> Any:
    """The raw spec (a parsed tree or plain data) of the request's preset or spec file, with its overrides."""
    if (request.preset is None) == (request.spec_file is None):
        raise ClusterkitError("give either a preset or a spec file", fix="use --preset NAME or --file SPEC.yaml")
    data: Any = (dataclasses.asdict(preset(request.preset)) if request.preset is not None
                 else read_spec_file(request.spec_file))  # type: ignore[arg-type]
    for path, value in request.overrides.items():
        data = spec_reader.with_text(data, path, value)
    return data


def plan_spec(data: Any) -> ClusterPlan:
    """Load, validate and (when there is no error) render and summarize raw spec data. Pure.

    The plan of an AWS cluster before anything is asked of AWS; the provider adds what apply does."""
    spec, findings = load_spec_data(data)
    if spec is None:
        raw = spec_reader.plain_data(data)
        name = str(raw.get("name") or "") if isinstance(raw, dict) else ""
        return ClusterPlan(provider=AWS, name=name, findings=tuple(findings))
    findings = findings + validate(spec)
    if has_errors(findings):
        return ClusterPlan(provider=AWS, name=spec.name, findings=tuple(findings), spec=spec)
    config = render_config(spec)
    return ClusterPlan(provider=AWS, name=spec.name, findings=tuple(findings), spec=spec, config=config,
                       config_text=config_text(spec.name, config), summary=summarize(spec),
                       uploads=script_uploads(config))


def script_uploads(config: dict[str, Any]) -> dict[str, str]:
    """URL -> local file of every clusterkit node script the config runs (what apply uploads first)."""
    return {url: str(script.path) for url, script in node_scripts.uploads(config).items()}


def check_spec_file(path: str | Path) -> ClusterPlan:
    """`clusterkit validate SPEC.yaml`: every finding of a spec file."""
    return plan_spec(read_spec_file(path))

"""Plans as values, for every provider: what `create-cluster` would do, computed without effects.

`ClusterRequest` is what a person asks for (the CLI's flags, a notebook's arguments). A provider's
`plan(request)` turns it into a `ClusterPlan[D]`: its findings, the exact files and actions an apply
would write and take, and `details: D`, the provider's own typed facts (`AwsPlanDetails`,
`LocalPlanDetails`). A dry run prints the plan; apply uses exactly what it holds.

Each provider declares the request fields (and create-cluster flags) it takes once, in `options`;
`refuse_foreign_options` derives every refusal of another provider's option from those declarations.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterable
from dataclasses import field
from typing import Generic, Protocol, TypeVar

from clusterkit.errors import ClusterkitError
from clusterkit.findings import Finding, has_errors
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.registry import JsonObject

NEUTRAL = ("name", "provider")  # request fields every provider takes


@lean_dataclass(frozen=True)
class Option:
    """One option a provider takes: a `ClusterRequest` field (or a create-cluster argument) and its flag."""

    field: str
    flag: str


@lean_dataclass(frozen=True)
class ClusterRequest:
    """A cluster someone asks for. A field another provider declares is refused, with a fix."""

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
    # HyperPod (also takes preset, spec_file, region and subnet_id): the role its instance groups run as.
    execution_role: str | None = None
    # local: the cluster's shape.
    nodes: int = 4
    cpus_per_node: int = 2
    gpus_per_node: int = 0
    memory_mb_per_node: int = 4000
    ssh: bool = False  # an sshd for the head node, to reach the cluster as a remote one
    timings: str = "test"  # Slurm's timers and node replacement: "test" (seconds) or "parallelcluster"
    replace_nodes: bool | None = None  # replace failed nodes as clustermgtd does (None: as the timings say)
    boot_delay: float | None = None  # seconds a replacement node takes to boot (None: as the timings say)
    replacement: str | None = None  # whose replacement: "clustermgtd" (the default) or "hyperpod" (turns it on)
    slurm: str | None = None  # which Slurm: "host" (its packages) or a root install-slurm.sh built ("24.11");
    # None: $CLUSTERKIT_LOCAL_SLURM, else host

    @property
    def provider_name(self) -> str:
        if self.provider:
            return self.provider
        return "aws" if self.preset or self.spec_file else "local"

    def given(self) -> tuple[str, ...]:
        """The provider-specific fields set to something other than their default."""
        return tuple(item.name for item in dataclasses.fields(self)
                     if item.name not in NEUTRAL and getattr(self, item.name) != item.default)


class Declares(Protocol):
    name: str
    options: tuple[Option, ...]


def refuse_foreign_options(provider: Declares, given: Iterable[str]) -> None:
    """Refuse the first option in `given` that another provider declares and `provider` does not take.

    The other providers are imported only then: a request that fits its provider loads nothing more."""
    taken = {option.field for option in provider.options}
    foreign = [name for name in given if name not in taken and name not in NEUTRAL]
    for name in foreign:
        for other in _other_providers(provider.name):
            option = next((option for option in other.options if option.field == name), None)
            if option is not None:
                raise ClusterkitError(f"{option.flag} is an option of provider {other.name}, not {provider.name}",
                                      fix=f"drop it, or use --provider {other.name}")


def _other_providers(name: str) -> list[Declares]:
    from clusterkit.providers import PROVIDERS

    found = []
    for other, where in PROVIDERS.items():
        if other != name:
            module, _, cls = where.partition(":")
            found.append(getattr(importlib.import_module(module), cls))
    return found


class PlanDetails(Protocol):
    """What a provider's plan holds beyond the neutral plan, and what a dry run shows of it."""

    @property
    def complete(self) -> bool:
        """Everything apply needs is there (an AWS plan without a config is not)."""
        ...

    @property
    def document(self) -> str | None:
        """The cluster's configuration file, which a dry run prints and --output-config writes; None: none."""
        ...

    @property
    def prerequisites_template(self) -> str | None:
        """The template of a stack apply may create first (--output-prerequisites); None: none."""
        ...

    @property
    def where(self) -> str:
        """Where the cluster would be, in words ("in us-east-1")."""
        ...

    def notes(self) -> tuple[str, ...]:
        """What preparing chose, said before apply."""
        ...

    def summary_lines(self) -> tuple[str, ...]: ...

    def plan_fields(self) -> JsonObject:
        """The plan's JSON keys this provider fills: `config`, `config_text`, `summary`, `uploads`, `details`."""
        ...


D = TypeVar("D", bound=PlanDetails)


@lean_dataclass(frozen=True)
class ClusterPlan(Generic[D]):
    """Everything `apply` needs and nothing it will compute again. `ok` when no finding is an error."""

    provider: str
    name: str
    details: D
    findings: tuple[Finding, ...] = ()
    files: dict[str, str] = field(default_factory=dict)  # path -> text, what apply writes
    actions: tuple[str, ...] = ()  # what apply does, step by step (commands, API calls)

    @property
    def ok(self) -> bool:
        return not has_errors(self.findings) and self.details.complete

    def replace(self, **changes: object) -> ClusterPlan[D]:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def to_dict(self) -> JsonObject:
        plan: JsonObject = {"provider": self.provider, "name": self.name, "ok": self.ok,
                            "findings": [finding.to_dict() for finding in self.findings],
                            "config": None, "config_text": None, "summary": None, "files": dict(self.files),
                            "uploads": {}, "actions": list(self.actions), "details": {}}
        plan.update(self.details.plan_fields())  # the keys keep their places
        return plan

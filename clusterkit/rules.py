"""Validation rules: one small function per rule, each with an id, all run together.

    CLUSTER_RULES = RuleBook("cluster")

    @CLUSTER_RULES.rule
    def efa_support(spec): yield error(path, message, fix, value)   # carries rule "cluster.efa-support"

`book.check(spec)` runs every rule and returns all findings, errors first, each group in rule order. Findings
are built with `findings.error`, `warning` and `info`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from clusterkit.findings import Finding, Level

S = TypeVar("S")
Rule = Callable[..., Iterable[Finding]]

_LEVEL_ORDER = {Level.ERROR: 0, Level.WARNING: 1, Level.INFO: 2}


class RuleBook(Generic[S]):
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.rules: list[tuple[str, Rule]] = []

    def rule(self, function: Rule) -> Rule:
        rule_id = f"{self.prefix}.{function.__name__.strip('_').replace('_', '-')}"
        if any(existing == rule_id for existing, _ in self.rules):
            raise ValueError(f"two rules named {rule_id}")
        self.rules.append((rule_id, function))
        return function

    @property
    def ids(self) -> list[str]:
        return [rule_id for rule_id, _ in self.rules]

    def check(self, spec: S, *context: Any) -> list[Finding]:
        findings = [dataclasses.replace(finding, rule=finding.rule or rule_id)
                    for rule_id, function in self.rules for finding in function(spec, *context)]
        return sorted(findings, key=lambda finding: _LEVEL_ORDER[finding.level])

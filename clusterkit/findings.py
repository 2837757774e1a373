"""Validation findings: errors are values until the edge (the CLI decides the exit code)."""

from __future__ import annotations

import enum
from collections.abc import Iterable

from clusterkit.lean_dataclass import lean_dataclass

SHOWN_VALUE_CHARS = 80


class Level(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


def shorten(value: object, limit: int = SHOWN_VALUE_CHARS) -> object:
    """A value fit to show: scalars as they are (long text cut, with its length), anything else as a short repr."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit - 20]}... ({len(text):,} characters)"


def similar_names(name: str, choices: Iterable[str], count: int = 1, cutoff: float = 0.6) -> list[str]:
    """The closest of `choices` to a mistyped `name`, for a fix's "did you mean"."""
    import difflib  # lazy: only a mistake needs it, and it costs a millisecond at every CLI start

    return difflib.get_close_matches(name, list(choices), n=count, cutoff=cutoff)


@lean_dataclass(frozen=True)
class Finding:
    """One rule's verdict on one field: `path` is the field in the user's spec (e.g. `queues[0].name`),
    `rule` the id of the rule that made it (e.g. `cluster.efa-support`)."""

    level: Level
    path: str
    message: str
    fix: str = ""
    value: object = None
    rule: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", shorten(self.value))

    def to_dict(self) -> dict:
        return {
            "level": self.level.value,
            "path": self.path,
            "message": self.message,
            "fix": self.fix,
            "value": self.value,
            "rule": self.rule,
        }

    def __str__(self) -> str:
        text = f"{self.level.value}: {self.path}: {self.message}"
        return f"{text} (fix: {self.fix})" if self.fix else text


def has_errors(findings: list[Finding] | tuple[Finding, ...]) -> bool:
    return any(f.level is Level.ERROR for f in findings)


def errors(findings: list[Finding] | tuple[Finding, ...]) -> list[Finding]:
    return [f for f in findings if f.level is Level.ERROR]

"""Validation findings: errors are values until the edge (the CLI decides the exit code)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Level(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    """One rule's verdict on one field: `path` is the field in the user's spec (e.g. `queues[0].name`)."""

    level: Level
    path: str
    message: str
    fix: str = ""
    value: object = None

    def to_dict(self) -> dict:
        return {
            "level": self.level.value,
            "path": self.path,
            "message": self.message,
            "fix": self.fix,
            "value": self.value,
        }

    def __str__(self) -> str:
        text = f"{self.level.value}: {self.path}: {self.message}"
        return f"{text} (fix: {self.fix})" if self.fix else text


def has_errors(findings: list[Finding]) -> bool:
    return any(f.level is Level.ERROR for f in findings)

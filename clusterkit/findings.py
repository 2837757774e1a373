"""Validation findings: errors are values until the edge (the CLI decides the exit code)."""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable

from clusterkit.lean_dataclass import lean_dataclass

SHOWN_VALUE_CHARS = 80
# Control characters (C0, DEL, C1) and the Unicode line and paragraph separators: the one set no one-line
# value of a spec may hold (a line break ends a config, slurm.conf or #SBATCH line, Slurm's and Python's line
# readers split on more than "\n", and a C1 control such as U+009B is a terminal's escape). The spec reader's
# single-line rule refuses them (`spec_reader.control_characters`); a finding shows them escaped.
CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


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


def escape_controls(text: str) -> str:
    """`text` with each control character written as its escape (`\\u009b`), so that it shows on one line."""
    return CONTROL_RE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def similar_names(name: str, choices: Iterable[str], count: int = 1, cutoff: float = 0.6) -> list[str]:
    """The closest of `choices` to a mistyped `name`, for a fix's "did you mean"."""
    import difflib  # lazy: only a mistake needs it, and it costs a millisecond at every CLI start

    return difflib.get_close_matches(name, list(choices), n=count, cutoff=cutoff)


@lean_dataclass(frozen=True)
class Finding:
    """One rule's verdict on one field: `path` is the field in the user's spec (e.g. `queues[0].name`),
    `rule` the id of the rule that made it (e.g. `cluster.efa-support`). A finding is one line whatever the
    spec holds: control characters in its path, message and fix are shown escaped."""

    level: Level
    path: str
    message: str
    fix: str = ""
    value: object = None
    rule: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", shorten(self.value))
        for name in ("path", "message", "fix"):
            object.__setattr__(self, name, escape_controls(getattr(self, name)))

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


def error(path: str, message: str, fix: str = "", value: object = None, rule: str = "") -> Finding:
    """An error on the field at `path`: what is wrong, how to fix it, the value as given. `rule` is left empty
    in a RuleBook rule, which names its own findings."""
    return Finding(Level.ERROR, path, message, fix, value, rule)


def warning(path: str, message: str, fix: str = "", value: object = None, rule: str = "") -> Finding:
    """A warning on the field at `path` (see `error`)."""
    return Finding(Level.WARNING, path, message, fix, value, rule)


def info(path: str, message: str, fix: str = "", value: object = None, rule: str = "") -> Finding:
    """A note on the field at `path` (see `error`)."""
    return Finding(Level.INFO, path, message, fix, value, rule)


def has_errors(findings: list[Finding] | tuple[Finding, ...]) -> bool:
    return any(f.level is Level.ERROR for f in findings)


def errors(findings: list[Finding] | tuple[Finding, ...]) -> list[Finding]:
    return [f for f in findings if f.level is Level.ERROR]

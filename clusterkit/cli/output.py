"""Printing results: a table (or lines) for people, JSON for scripts."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from clusterkit.findings import Finding


def print_json(data: Any) -> None:
    import json  # only --output json needs it: not imported at start-up

    json.dump(data, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h).upper() for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    print(format_table(headers, rows))


def progress(message: str) -> None:
    """Progress for people goes to stderr so that stdout stays clean for --output json."""
    print(message, file=sys.stderr, flush=True)


def print_findings(findings: Iterable[Finding], stream: TextIO) -> None:
    for finding in findings:
        print(finding, file=stream)

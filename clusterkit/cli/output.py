"""Printing results: a table (or lines) for people, JSON for scripts."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from clusterkit.files import STDOUT, cannot_write

if TYPE_CHECKING:
    from clusterkit.findings import Finding


def print_json(data: Any) -> None:
    import json  # only --output json needs it: not imported at start-up

    write_stdout(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h).upper() for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    print(format_table(headers, rows))


def progress(message: str) -> None:
    """Progress for people goes to stderr so that stdout stays clean for --output json."""
    print(message, file=sys.stderr, flush=True)


JSON_ON_STDOUT = "stdout carries the --output json document"  # why an output file may not be `-` then


def write_stdout(text: str | bytes) -> None:
    """A file's text (or bytes: a picture) on stdout (its flag was `-`, or the verb prints it by default). A stdout
    that cannot take it (a full disk, /dev/full) is one line naming stdout, instead of a traceback at exit."""
    try:
        if isinstance(text, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(text)
            sys.stdout.buffer.flush()
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
    except BrokenPipeError:
        raise  # `| head`: the CLI's edge treats it as the reader's choice
    except OSError as error:
        # What is still buffered would fail again in the interpreter's last flush: let it go nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise cannot_write(STDOUT, error) from None


def print_findings(findings: Iterable[Finding], stream: TextIO) -> None:
    for finding in findings:
        print(finding, file=stream)

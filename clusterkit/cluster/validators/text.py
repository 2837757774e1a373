"""One line, bounded: `single_line` refuses control characters in every text field (the rule every spec kind
shares, `spec_reader.control_characters`) and text past `MAX_TEXT_CHARS`."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.spec import ClusterSpec
from clusterkit.findings import Finding, error
from clusterkit.spec_reader import control_character, text_values

MAX_TEXT_CHARS = 4096


def single_line(spec: ClusterSpec) -> Iterator[Finding]:
    """Every text value lands in a config line, a script argument or a slurm.conf line: one line each."""
    for value in text_values(spec):
        control = control_character(value)
        if control is not None:
            yield control
        elif len(value.text) > MAX_TEXT_CHARS:
            yield error(value.path, f"is {len(value.text):,} characters; no field needs more than "
                        f"{MAX_TEXT_CHARS:,}", "shorten it", value.text)

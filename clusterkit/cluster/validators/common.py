"""What several topics' rules share: where the compute resources and storage entries are, full-match patterns,
suggestions for a mistyped choice, duplicate names.

The *_RE patterns of every topic stay text and `re` compiles (and caches) those a spec needs: compiling all of
them at import cost every CLI start 3 ms. Every pattern is matched in full (`matches`): `re.match(r"^x$")`
accepts "x\\n", which is how a newline slips into a script.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from clusterkit.cluster.spec import ClusterSpec, ComputeSpec, QueueSpec
from clusterkit.findings import Finding, error, similar_names

REGION_RE = r"[a-z]{2}(-[a-z]+)+-\d"


def compute_resources(spec: ClusterSpec) -> Iterator[tuple[str, QueueSpec, str, ComputeSpec]]:
    for q, queue in enumerate(spec.queues):
        for c, compute in enumerate(queue.compute):
            yield f"queues[{q}]", queue, f"queues[{q}].compute[{c}]", compute


def suggest(value: str, choices: Iterable[str]) -> str:
    choices = list(choices)
    close = similar_names(value, choices, cutoff=0.5)
    if close:
        return f"did you mean {close[0]!r}? (one of: {', '.join(choices)})"
    return f"use one of: {', '.join(choices)}"


def matches(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern, value) is not None


def duplicates(names: list[str], path_of: Callable[[int], str], what: str) -> Iterator[Finding]:
    counts = Counter(names)
    for index, name in enumerate(names):
        if counts[name] > 1 and names.index(name) != index:
            yield error(path_of(index), f"duplicate {what} name {name!r}", f"give each {what} its own name", name)


def storage_entries(spec: ClusterSpec) -> list[tuple[str, str, str]]:
    """(path, name, mount_dir) of every shared storage entry, in spec order."""
    storage = spec.storage
    groups = (("lustre", storage.lustre), ("efs", storage.efs), ("openzfs", storage.openzfs), ("ebs", storage.ebs))
    return [(f"storage.{kind}[{i}]", entry.name, entry.mount_dir) for kind, entries in groups
            for i, entry in enumerate(entries)]


def normalized_mount_dir(mount_dir: str) -> str:
    return "/" + mount_dir.strip("/")

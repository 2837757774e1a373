"""Cluster records under $CLUSTERKIT_HOME (default ~/.clusterkit): the one way to find a cluster.

A record is `clusters/NAME/cluster.json`: which provider made the cluster and what later commands
need to talk to it (for a local cluster, its slurm.conf and the pids it started).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clusterkit.errors import ClusterkitError, NotFound
from clusterkit.files import write_atomically

RECORD_FILE = "cluster.json"
CLUSTER_NAME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]{0,59}$")


def clusterkit_home() -> Path:
    return Path(os.environ.get("CLUSTERKIT_HOME") or Path.home() / ".clusterkit")


def clusters_dir() -> Path:
    return clusterkit_home() / "clusters"


def cluster_dir(name: str) -> Path:
    check_cluster_name(name)
    return clusters_dir() / name


def check_cluster_name(name: str) -> None:
    if not CLUSTER_NAME_RE.match(name or ""):
        raise ClusterkitError(
            f"invalid cluster name {name!r}",
            fix="start with a letter, then letters, digits or '-', at most 60 characters",
        )


@dataclass
class ClusterRecord:
    name: str
    provider: str  # "local" or "aws"
    created: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def directory(self) -> Path:
        return cluster_dir(self.name)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def save(record: ClusterRecord) -> Path:
    """Write the record atomically (a reader never sees half a file)."""
    directory = cluster_dir(record.name)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / RECORD_FILE
    write_atomically(path, json.dumps(record.to_dict(), indent=2) + "\n")
    return path


def load(name: str) -> ClusterRecord:
    path = cluster_dir(name) / RECORD_FILE
    try:
        data = json.loads(path.read_text())
        return ClusterRecord(**data)
    except FileNotFoundError:
        raise NotFound(
            f"no cluster named {name!r} under {clusters_dir()}",
            fix="see `clusterkit list-clusters`, or create it with `clusterkit create-cluster`",
        ) from None
    except (ValueError, TypeError) as error:
        raise ClusterkitError(f"the record of cluster {name!r} ({path}) is damaged: {error}",
                              fix="fix or remove that file") from None


def exists(name: str) -> bool:
    return (cluster_dir(name) / RECORD_FILE).is_file()


def all_records() -> list[ClusterRecord]:
    root = clusters_dir()
    if not root.is_dir():
        return []
    return [load(p.parent.name) for p in sorted(root.glob(f"*/{RECORD_FILE}"))]


def remove(name: str) -> None:
    (cluster_dir(name) / RECORD_FILE).unlink(missing_ok=True)

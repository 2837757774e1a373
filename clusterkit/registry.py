"""Cluster records under $CLUSTERKIT_HOME (default ~/.clusterkit): the one way to find a cluster.

A record is `clusters/NAME/cluster.json`: which provider made the cluster and what later commands
need to talk to it (for a local cluster, its shape and the pids it started). The registry is the JSON
boundary: it reads a record's `details` as JSON, and writes a provider's typed state (`SavedState`)
through its `to_json()`; each provider reads its state back with its state type's `from_json`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import field
from pathlib import Path
from typing import Generic, Protocol, TypeVar, Union

from clusterkit.errors import AlreadyExists, ClusterkitError, NotFound
from clusterkit.files import write_atomically
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.pids import start_time

RECORD_FILE = "cluster.json"
CLAIM_FILE = ".claim"  # "PID START_TIME TOKEN" of the create that owns a directory without a record yet
CLUSTER_NAME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]{0,59}$")

# A JSON document as Python holds it: what is written to a record, a plan's --output json, a config.
JsonValue = Union[str, int, float, bool, None, list["JsonValue"], dict[str, "JsonValue"]]
JsonObject = dict[str, JsonValue]


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


class SavedState(Protocol):
    """A provider's typed state of one cluster, as its record keeps it."""

    def to_json(self) -> JsonObject: ...


S = TypeVar("S", bound="SavedState | JsonObject")


@lean_dataclass
class ClusterRecord(Generic[S]):
    """One registered cluster: `details` is its provider's typed state, or that state's JSON as read."""

    name: str
    provider: str  # "local", "aws" or "ssh"
    created: str
    details: S = field(default_factory=dict)  # type: ignore[assignment]

    @property
    def directory(self) -> Path:
        return cluster_dir(self.name)

    def to_dict(self) -> JsonObject:
        details = self.details if isinstance(self.details, dict) else self.details.to_json()
        return {"name": self.name, "provider": self.provider, "created": self.created, "details": details}


def save(record: ClusterRecord[SavedState] | ClusterRecord[JsonObject]) -> Path:
    """Write the record atomically (a reader never sees half a file)."""
    import json  # lazy, here and in load: a dry run reads and writes no record

    directory = cluster_dir(record.name)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / RECORD_FILE
    write_atomically(path, json.dumps(record.to_dict(), indent=2) + "\n")
    return path


def load(name: str) -> ClusterRecord[JsonObject]:
    """The record as saved; `providers.open_cluster` reads its details into the provider's state type."""
    import json

    path = cluster_dir(name) / RECORD_FILE
    try:
        data = json.loads(path.read_text())
        record: ClusterRecord[JsonObject] = ClusterRecord(**data)
        if not isinstance(record.details, dict):
            raise ValueError("its details are not a JSON object")
        return record
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


def all_records() -> list[ClusterRecord[JsonObject]]:
    root = clusters_dir()
    if not root.is_dir():
        return []
    return [load(p.parent.name) for p in sorted(root.glob(f"*/{RECORD_FILE}"))]


def remove(name: str) -> None:
    (cluster_dir(name) / RECORD_FILE).unlink(missing_ok=True)


@contextlib.contextmanager
def claim(name: str) -> Iterator[Path]:
    """Claim `name` for a create: yields the cluster's new directory, which only this process made.

    The directory is built under a temporary name with a claim file inside, then renamed into place:
    one rename wins, so two creates of one name never share a directory. If the block raises, the
    directory is removed, but only while it is still ours. A directory left by a create that died
    (its claim names a process that no longer runs) is set aside and the name taken over.
    """
    directory = cluster_dir(name)
    directory.parent.mkdir(parents=True, exist_ok=True)
    token = os.urandom(8).hex()  # as secrets.token_hex, without loading `secrets` on every command
    staged = directory.parent / f".{name}.{token}.staging"
    staged.mkdir()
    (staged / CLAIM_FILE).write_text(f"{os.getpid()} {start_time(os.getpid())} {token}\n")
    try:
        _take(staged, directory, name)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    try:
        yield directory
    except BaseException:
        if _claim_token(directory) == token:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    (directory / CLAIM_FILE).unlink(missing_ok=True)


def _take(staged: Path, directory: Path, name: str) -> None:
    for _ in range(3):
        try:
            os.rename(staged, directory)
            return
        except OSError:  # ENOTEMPTY/EEXIST: the name is someone's (or a dead create's)
            pass
        if (directory / RECORD_FILE).exists():
            raise AlreadyExists(f"a cluster named {name!r} already exists",
                                fix=f"use it, or delete it first with `clusterkit delete-cluster {name}`")
        owner = _claim_owner(directory)
        if owner is not None:
            raise AlreadyExists(f"cluster {name!r} is being created right now (by process {owner})",
                                fix="wait for that create to finish, or choose another name")
        aside = directory.with_name(f".{name}.{os.urandom(4).hex()}.abandoned")
        with contextlib.suppress(OSError):  # another create may set it aside first
            os.rename(directory, aside)
            shutil.rmtree(aside, ignore_errors=True)
    raise AlreadyExists(f"cluster {name!r} is being created right now", fix="wait, or choose another name")


def _claim_token(directory: Path) -> str | None:
    try:
        return (directory / CLAIM_FILE).read_text().split()[2]
    except (OSError, IndexError):
        return None


def _claim_owner(directory: Path) -> int | None:
    """The pid of the live create that claims `directory`; None when the claim is stale (or gone)."""
    try:
        pid_text, start, _ = (directory / CLAIM_FILE).read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    return pid if start_time(pid) == start else None

"""What deleting a cluster does to its shared storage, read from its ParallelCluster configuration.

Storage the cluster only mounted (a FileSystemId or VolumeId) is never touched. Storage ParallelCluster
created follows its DeletionPolicy: Retain keeps it (clusterkit's default), Snapshot keeps a snapshot of
an EBS volume, Delete removes it and every file on it. The dry-run summary and `delete-cluster` both
say it with these words.
"""

from __future__ import annotations

from typing import Any

from clusterkit.lean_dataclass import lean_dataclass

EXISTING_KEYS = ("FileSystemId", "VolumeId", "FileCacheId")


@lean_dataclass(frozen=True)
class StorageFate:
    """What deleting the cluster does to one shared file system, and why."""

    description: str  # "FsxLustre 'fsx' on /fsx"
    kept: bool
    reason: str  # "DeletionPolicy Retain", "fs-0123...: not made by this cluster"

    def __str__(self) -> str:
        return f"{self.description} ({self.reason})"


def storage_fates(config: dict[str, Any]) -> list[StorageFate]:
    """Each shared storage entry of a config, kept or deleted when the cluster is deleted, and why."""
    fates = []
    for entry in config.get("SharedStorage", []) or []:
        settings = next((value for key, value in entry.items() if key.endswith("Settings")), {}) or {}
        description = f"{entry.get('StorageType')} {entry.get('Name')!r} on {entry.get('MountDir')}"
        existing = next((settings[key] for key in EXISTING_KEYS if key in settings), None)
        policy = settings.get("DeletionPolicy", "Delete")  # ParallelCluster's own default
        if existing:
            fates.append(StorageFate(description, True, f"{existing}: not made by this cluster"))
        elif policy == "Delete":
            fates.append(StorageFate(description, False, "DeletionPolicy Delete: every file on it is lost"))
        else:
            fates.append(StorageFate(description, True, f"DeletionPolicy {policy}"))
    return fates

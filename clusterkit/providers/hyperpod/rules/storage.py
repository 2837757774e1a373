"""Shared storage on HyperPod: the lifecycle scripts mount one FSx for Lustre file system, an existing one or one
create makes; HyperPod itself makes none."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.render import PLAIN_PATH_RE
from clusterkit.findings import Finding, error, warning
from clusterkit.providers.hyperpod.request import HyperPodDraft


def lustre(draft: HyperPodDraft) -> Iterator[Finding]:
    storage = draft.spec.storage
    for index, fsx in enumerate(storage.lustre):
        if index > 0:
            yield warning(f"storage.lustre[{index}]", f"clusterkit's HyperPod lifecycle script mounts one FSx for "
                          f"Lustre file system (storage.lustre[0]): this one on {fsx.mount_dir} is not "
                          f"{'made or ' if fsx.is_new else ''}mounted", "mount it from your own lifecycle step")
        elif not PLAIN_PATH_RE.fullmatch(fsx.mount_dir) or {".", ".."} & set(fsx.mount_dir.split("/")):
            yield error(f"storage.lustre[{index}].mount_dir", "clusterkit's HyperPod lifecycle script mounts the file "
                        "system only at a plain absolute path (letters, digits, . _ - and /; no . or .. segments)",
                        "e.g. /fsx", fsx.mount_dir)
        if index == 0 and fsx.is_new and fsx.data_repository_associations:
            yield error(f"storage.lustre[{index}].data_repository_associations", "the HyperPod provider does not "
                        "create data repository associations yet", "link the S3 prefixes once the file system "
                        "exists (aws fsx create-data-repository-association), or use import_path",
                        len(fsx.data_repository_associations))
    if not storage.lustre and draft.spec.clusterkit.install:
        yield warning("clusterkit.install", "without a shared FSx for Lustre, clusterkit is not installed on the "
                      "nodes (its virtualenv lives on shared storage)", "add storage.lustre (a new file system, or "
                      "an existing one by file_system_id)")


def other_storage(draft: HyperPodDraft) -> Iterator[Finding]:
    storage = draft.spec.storage
    for kind, entries in (("efs", storage.efs), ("openzfs", storage.openzfs), ("ebs", storage.ebs)):
        for index, _ in enumerate(entries):
            yield warning(f"storage.{kind}[{index}]", "clusterkit's HyperPod lifecycle scripts mount FSx for "
                          "Lustre only: this file system is not mounted", "mount it from your own lifecycle step")

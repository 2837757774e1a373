"""Shared storage on HyperPod: the lifecycle scripts mount an existing FSx for Lustre; HyperPod makes none."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.findings import Finding, warning
from clusterkit.providers.hyperpod.request import HyperPodDraft


def lustre(draft: HyperPodDraft) -> Iterator[Finding]:
    storage = draft.spec.storage
    for index, fsx in enumerate(storage.lustre):
        if fsx.is_new:
            yield warning(f"storage.lustre[{index}]",
                          f"HyperPod creates no file system: this new FSx for Lustre on {fsx.mount_dir} is not made "
                          "and not mounted", "create it (or reuse one) and give its file_system_id; the lifecycle "
                          "script mounts it on every node")
    if not any(not fsx.is_new for fsx in storage.lustre) and draft.spec.clusterkit.install:
        yield warning("clusterkit.install", "without a shared FSx for Lustre, clusterkit is not installed on the "
                      "nodes (its virtualenv lives on shared storage)", "give storage.lustre[0].file_system_id")


def other_storage(draft: HyperPodDraft) -> Iterator[Finding]:
    storage = draft.spec.storage
    for kind, entries in (("efs", storage.efs), ("openzfs", storage.openzfs), ("ebs", storage.ebs)):
        for index, _ in enumerate(entries):
            yield warning(f"storage.{kind}[{index}]", "clusterkit's HyperPod lifecycle scripts mount FSx for "
                          "Lustre only: this file system is not mounted", "mount it from your own lifecycle step")

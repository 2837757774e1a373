"""HyperPod's rules for a group's nodes: threads per core, and a request moto and SageMaker both take."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.findings import Finding, error
from clusterkit.providers.hyperpod.request import HyperPodDraft

THREADS_PER_CORE = (1, 2)  # 1: hyperthreading off


def threads_per_core(draft: HyperPodDraft) -> Iterator[Finding]:
    """Always stated (HyperPod's default differs by type, and moto 5.2 fails without it)."""
    for index, group in enumerate(draft.request.get("InstanceGroups") or []):  # type: ignore[arg-type]
        threads = group.get("ThreadsPerCore")  # type: ignore[union-attr]
        if threads not in THREADS_PER_CORE:
            yield error(f"create_cluster_request.InstanceGroups[{index}].ThreadsPerCore",
                        "HyperPod takes 1 or 2 threads per core", "set disable_hyperthreading", threads)

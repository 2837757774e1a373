"""enroot's data on HyperPod: the instance store HyperPod's images mount, else the root volume."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.spec import PyxisSpec
from clusterkit.findings import Finding, warning
from clusterkit.providers.hyperpod.request import NVME_DIR, HyperPodDraft


def enroot_dir(draft: HyperPodDraft) -> Iterator[Finding]:
    pyxis = draft.spec.pyxis
    if pyxis.enabled and pyxis.enroot_dir != PyxisSpec().enroot_dir:
        yield warning("pyxis.enroot_dir", f"on HyperPod enroot keeps its data in {NVME_DIR}/enroot where the "
                      "instance store is, else on the root volume: this directory is not used",
                      "leave pyxis.enroot_dir out for HyperPod", pyxis.enroot_dir)

"""The Slurm this machine is configured for (`--cluster host`): on a ParallelCluster head node, or any
Slurm login node. clusterkit runs jobs there but did not make the cluster, so it neither resizes
nor deletes it."""

from __future__ import annotations

import sys
from typing import Any

from clusterkit.errors import ClusterkitError
from clusterkit.providers.base import ClusterInfo, DeletionPlan, Progress, quiet
from clusterkit.slurm import Slurm

NAME = "host"


class HostCluster:
    name = NAME

    def __init__(self, slurm: Slurm | None = None) -> None:
        self._slurm = slurm or Slurm()

    def slurm(self) -> Slurm:
        return self._slurm

    def runs_dir(self) -> str | None:
        return None

    def python(self) -> str:
        return sys.executable

    def queues(self) -> dict[str, list[str]]:
        return {}

    def describe(self) -> ClusterInfo:
        up = self._slurm.ping()
        nodes = tuple({"name": n.name, "state": n.state, "cpus": n.cpus, "gres": n.gres, "reason": n.reason}
                      for n in self._slurm.nodes()) if up else ()
        return ClusterInfo(name=NAME, provider=NAME, status="running" if up else "stopped", nodes=nodes)

    def resize(self, queue: str, max_count: int, min_count: int | None = None, compute_resource: str | None = None,
               progress: Progress = quiet) -> dict[str, Any]:
        raise ClusterkitError("clusterkit did not make this machine's Slurm cluster and does not resize it",
                              fix="resize it where it was made (e.g. pcluster update-cluster)")

    def deletion(self) -> DeletionPlan:
        raise ClusterkitError("clusterkit did not make this machine's Slurm cluster and does not delete it",
                              fix="delete it where it was made (e.g. pcluster delete-cluster)")

    def delete(self, progress: Progress = quiet) -> None:
        self.deletion()

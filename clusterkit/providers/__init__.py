"""Cluster providers: `local` (a real Slurm cluster on this machine) and `aws` (AWS ParallelCluster).

`open_cluster` is the one way from a cluster name to the object that manages it.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING

from clusterkit import registry
from clusterkit.errors import ClusterkitError
from clusterkit.slurm import Slurm

if TYPE_CHECKING:
    from clusterkit.providers.aws.cluster import AwsCluster
    from clusterkit.providers.local.cluster import LocalCluster


def open_cluster(name: str) -> LocalCluster | AwsCluster:
    """The provider object for a registered cluster, chosen by its record."""
    record = registry.load(name)
    if record.provider == "local":
        from clusterkit.providers.local.cluster import LocalCluster

        return LocalCluster(record)
    if record.provider == "aws":
        from clusterkit.providers.aws.cluster import AwsCluster

        return AwsCluster(record)
    raise ClusterkitError(f"cluster {name!r} uses provider {record.provider!r}, which this version cannot manage")


HOST_CLUSTER = "host"  # the Slurm this machine is configured for, e.g. on a ParallelCluster head node


def slurm_for(name: str) -> Slurm:
    """The Slurm commands of a cluster, for submitting and following jobs."""
    if name == HOST_CLUSTER and not registry.exists(name):
        return Slurm()
    cluster = open_cluster(name)
    slurm = getattr(cluster, "slurm", None)
    if slurm is None:
        raise ClusterkitError(
            f"jobs on {cluster.record.provider} cluster {name!r} are submitted from its head node",
            fix=f"ssh to the head node (pcluster ssh --cluster-name {name}) and run clusterkit there "
                f"with --cluster {HOST_CLUSTER}")
    return slurm


def resolve_cluster_name(name: str | None) -> str:
    """--cluster NAME, else $CLUSTERKIT_CLUSTER, else the only registered cluster, else this
    machine's own Slurm when it answers (a head node)."""
    if name:
        return name
    if os.environ.get("CLUSTERKIT_CLUSTER"):
        return os.environ["CLUSTERKIT_CLUSTER"]
    names = [record.name for record in registry.all_records()]
    if len(names) == 1:
        return names[0]
    if not names:
        if shutil.which("scontrol") and Slurm().ping():
            return HOST_CLUSTER
        raise ClusterkitError("no cluster to use",
                              fix="create one with `clusterkit create-cluster --provider local --name NAME`, "
                                  f"or run on a Slurm head node (--cluster {HOST_CLUSTER})")
    raise ClusterkitError(f"several clusters exist ({', '.join(names)})", fix="name one with --cluster NAME")

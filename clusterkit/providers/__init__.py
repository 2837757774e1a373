"""Cluster providers: `local` (a real Slurm cluster on this machine) and `aws` (AWS ParallelCluster).

`open_cluster` is the one way from a cluster name to the object that manages it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from clusterkit import registry
from clusterkit.errors import ClusterkitError

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


def resolve_cluster_name(name: str | None) -> str:
    """--cluster NAME, else $CLUSTERKIT_CLUSTER, else the only registered cluster."""
    if name:
        return name
    if os.environ.get("CLUSTERKIT_CLUSTER"):
        return os.environ["CLUSTERKIT_CLUSTER"]
    names = [record.name for record in registry.all_records()]
    if len(names) == 1:
        return names[0]
    if not names:
        raise ClusterkitError("no cluster to use",
                              fix="create one with `clusterkit create-cluster --provider local --name NAME`")
    raise ClusterkitError(f"several clusters exist ({', '.join(names)})", fix="name one with --cluster NAME")

"""Cluster providers: `local` (a real Slurm cluster on this machine), `aws` (AWS ParallelCluster) and
`hyperpod` (SageMaker HyperPod), behind one interface (`base.Provider`, `base.Cluster`); `ssh`, an existing
cluster reached over SSH; and
`host`, the Slurm this machine is configured for (a ParallelCluster head node). The last two are one
class, `existing.ExistingCluster`, given a transport: clusterkit uses them but did not make them.

`provider_named` and `open_cluster` are the one way from a name to the object that manages it;
`create_cluster` the one way to make a cluster. Providers are imported when asked for, so importing this
package stays cheap.
"""

from __future__ import annotations

import importlib
import os
import shutil
from typing import TYPE_CHECKING

from clusterkit import registry
from clusterkit.errors import ClusterkitError
from clusterkit.findings import Level
from clusterkit.providers.base import Cluster, ClusterInfo, DeletionPlan, Progress, Provider, ResizeResult, quiet
from clusterkit.providers.plan import ClusterPlan, ClusterRequest
from clusterkit.runtime import CLUSTER_ENV

if TYPE_CHECKING:  # loaded by the verbs that talk to Slurm, not by every one that names a cluster
    from clusterkit.slurm import Slurm

HOST_CLUSTER = "host"  # the Slurm this machine is configured for, e.g. on a ParallelCluster head node

# Provider name -> "module:class" of its implementation.
PROVIDERS = {
    "local": "clusterkit.providers.local.cluster:LocalProvider",
    "aws": "clusterkit.providers.aws.cluster:AwsProvider",
    "hyperpod": "clusterkit.providers.hyperpod.cluster:HyperPodProvider",
    "ssh": "clusterkit.providers.ssh:SshProvider",
}


def provider_named(name: str) -> Provider:
    try:
        module, _, cls = PROVIDERS[name].partition(":")
    except KeyError:
        raise ClusterkitError(f"unknown provider {name!r}", fix=f"use one of: {', '.join(PROVIDERS)}") from None
    return getattr(importlib.import_module(module), cls)()


def create_cluster(request: ClusterRequest, progress: Progress = quiet) -> Cluster:
    """Plan, prepare and apply: the one way to make a cluster, of the CLI and of notebooks and scripts."""
    provider = provider_named(request.provider_name)
    plan = _passed(provider.plan(request))
    return provider.apply(_passed(provider.prepare(plan, progress)), progress)


def _passed(plan: ClusterPlan) -> ClusterPlan:
    if not plan.ok:
        first = next((finding for finding in plan.findings if finding.level is Level.ERROR), None)
        raise ClusterkitError(f"cluster {plan.name!r} was not created: {first or 'its plan is incomplete'}",
                              fix="see every finding with `clusterkit create-cluster ... --dry-run`")
    return plan


def open_cluster(name: str) -> Cluster:
    """The cluster a name stands for: a registered one, else (for `host`) this machine's Slurm."""
    if name == HOST_CLUSTER and not registry.exists(name):
        from clusterkit.providers.existing import ExistingCluster

        return ExistingCluster.on_this_machine()
    record = registry.load(name)
    if record.provider not in PROVIDERS:
        raise ClusterkitError(f"cluster {name!r} uses provider {record.provider!r}, which this version cannot manage",
                              fix="upgrade clusterkit")
    provider = provider_named(record.provider)
    try:
        typed = provider.read_state(record)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise ClusterkitError(f"the record of {record.provider} cluster {name!r} is damaged: "
                              f"{type(error).__name__} {error}",
                              fix=f"remove {registry.cluster_dir(name)} and create (or connect) the cluster again"
                              ) from None
    return provider.open(typed)


def slurm_for(name: str) -> Slurm:
    """The Slurm commands of a cluster, for submitting and following jobs."""
    return open_cluster(name).slurm()


def resolve_cluster_name(name: str | None) -> str:
    """--cluster NAME, else $CLUSTERKIT_CLUSTER, else the only registered cluster, else this
    machine's own Slurm when it answers (a head node)."""
    if name:
        return name
    if os.environ.get(CLUSTER_ENV):
        return os.environ[CLUSTER_ENV]
    names = [record.name for record in registry.all_records()]
    if len(names) == 1:
        return names[0]
    if not names:
        from clusterkit.slurm import Slurm

        if shutil.which("scontrol") and Slurm().ping():
            return HOST_CLUSTER
        raise ClusterkitError("no cluster to use",
                              fix="create one with `clusterkit create-cluster --provider local --name NAME`, "
                                  f"or run on a Slurm head node (--cluster {HOST_CLUSTER})")
    raise ClusterkitError(f"several clusters exist ({', '.join(names)})", fix="name one with --cluster NAME")


__all__ = ["HOST_CLUSTER", "Cluster", "ClusterInfo", "ClusterPlan", "ClusterRequest", "DeletionPlan", "Progress",
           "Provider", "ResizeResult", "create_cluster", "open_cluster", "provider_named", "quiet",
           "resolve_cluster_name", "slurm_for"]

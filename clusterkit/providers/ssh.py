"""Any Slurm cluster reached over SSH: `clusterkit connect NAME --ssh [USER@]HOST` (or `clusterkit.connect`).

clusterkit did not make such a cluster (see clusterkit.providers.existing): it runs Slurm's commands on
its login node over SSH and puts each job's files in a per-run directory under `runs_dir` there.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from clusterkit import registry
from clusterkit.errors import ClusterkitError
from clusterkit.providers.base import Progress, quiet
from clusterkit.providers.existing import SSH, ExistingCluster, ExistingClusterState
from clusterkit.providers.plan import ClusterPlan, ClusterRequest, Option, PlanDetails
from clusterkit.registry import ClusterRecord, JsonObject
from clusterkit.slurm import Slurm, lines
from clusterkit.transport import SshTarget, SshTransport, home

PROVIDER = SSH
KNOWN_HOSTS_FILE = "known_hosts"  # host keys first seen by `connect`, for this cluster only
DEFAULT_RUNS_DIR = "clusterkit-runs"  # under the far side's home


class SshProvider:
    """Connects to existing clusters (`connect`); creates none."""

    name = PROVIDER
    options: tuple[Option, ...] = ()

    def plan(self, request: ClusterRequest) -> ClusterPlan[PlanDetails]:
        raise _creates_none()

    def prepare(self, plan: ClusterPlan[PlanDetails], progress: Progress = quiet) -> ClusterPlan[PlanDetails]:
        raise _creates_none()

    def apply(self, plan: ClusterPlan[PlanDetails], progress: Progress = quiet) -> ExistingCluster:
        raise _creates_none()

    def read_state(self, record: ClusterRecord[JsonObject]) -> ClusterRecord[ExistingClusterState]:
        state = ExistingClusterState.from_json(record.details)
        if state.ssh is None or state.runs_dir is None:
            raise KeyError("ssh" if state.ssh is None else "runs_dir")
        return ClusterRecord(record.name, record.provider, record.created, state)

    def open(self, record: ClusterRecord[ExistingClusterState]) -> ExistingCluster:
        return ExistingCluster(record)


def _creates_none() -> ClusterkitError:
    return ClusterkitError("clusterkit does not create clusters over SSH; it connects to existing ones",
                           fix="use `clusterkit connect NAME --ssh [USER@]HOST`")


def connect(name: str, ssh: str | SshTarget, *, port: int | None = None, identity_file: str | None = None,
            known_hosts: str | None = None, accept_new_host_key: bool = False, runs_dir: str | None = None,
            python: str = "python3", progress: Progress = quiet) -> ExistingCluster:
    """Register an existing Slurm cluster reached over SSH (`[USER@]HOST`, or a target), after checking that
    Slurm answers there. The one `connect`, of the CLI and of notebooks."""
    target = ssh if isinstance(ssh, SshTarget) else SshTarget.parse(ssh, port=port, identity_file=identity_file,
                                                                    known_hosts_file=known_hosts)
    with registry.claim(name) as directory:
        # A login of its own, never a shared connection that lives (it would let a wrong host key or key
        # through): what is registered is what reached the cluster now.
        if accept_new_host_key and target.known_hosts_file is None:
            # Trust on first use, kept for this cluster alone; later connections insist on the same key.
            known = str(directory / KNOWN_HOSTS_FILE)
            SshTransport(dataclasses.replace(target, options=(*target.options, "StrictHostKeyChecking=accept-new"),
                                             known_hosts_file=known)).verify()
            target = dataclasses.replace(target, known_hosts_file=known)
        else:
            SshTransport(target).verify()
        transport = SshTransport(target)
        progress(f"checking Slurm on {transport.label}")
        slurm = Slurm(transport=transport)
        version = lines(slurm.run("sinfo", "--version").stdout)
        if not slurm.ping():
            raise ClusterkitError(f"Slurm's controller does not answer on {transport.label} (scontrol ping)",
                                  fix="is slurmctld running there?")
        record = ClusterRecord(
            name=name, provider=PROVIDER, created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            details=ExistingClusterState(ssh=target, runs_dir=runs_dir or f"{home(transport)}/{DEFAULT_RUNS_DIR}",
                                         python=python, slurm_version=version[0] if version else ""))
        registry.save(record)
    return ExistingCluster(record)

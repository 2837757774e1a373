"""Any Slurm cluster reached over SSH: `clusterkit connect NAME --ssh [USER@]HOST`.

clusterkit did not make such a cluster, so it neither resizes nor deletes it: it runs Slurm's
commands on its login node over SSH (see clusterkit.transport), and puts each job's files in a
per-run directory under `runs_dir` there. Deleting the cluster in clusterkit forgets the connection.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
from typing import Any

from clusterkit import registry
from clusterkit.errors import ClusterkitError
from clusterkit.providers.base import ClusterInfo, DeletionPlan, Progress, quiet
from clusterkit.slurm import Slurm, lines
from clusterkit.transport import SshTarget, SshTransport, home

PROVIDER = "ssh"
KNOWN_HOSTS_FILE = "known_hosts"  # host keys first seen by `connect`, for this cluster only
DEFAULT_RUNS_DIR = "clusterkit-runs"  # under the far side's home


class SshProvider:
    name = PROVIDER

    def plan(self, request: Any) -> Any:
        raise ClusterkitError("clusterkit does not create clusters over SSH; it connects to existing ones",
                              fix="use `clusterkit connect NAME --ssh [USER@]HOST`")

    prepare = apply = plan

    def open(self, record: registry.ClusterRecord) -> SshCluster:
        return SshCluster(record)


class SshCluster:
    def __init__(self, record: registry.ClusterRecord) -> None:
        self.record = record
        self.target = SshTarget.from_dict(record.details["ssh"])
        self.transport = SshTransport(self.target)

    @property
    def name(self) -> str:
        return self.record.name

    def slurm(self) -> Slurm:
        return Slurm(transport=self.transport, extra_env=dict(self.record.details.get("env", {})))

    def queues(self) -> dict[str, list[str]]:
        return dict(self.record.details.get("queues", {}))

    def runs_dir(self) -> str:
        return self.record.details["runs_dir"]

    def python(self) -> str:
        return self.record.details.get("python", "python3")

    def describe(self) -> ClusterInfo:
        slurm = self.slurm()
        up = slurm.ping()
        nodes = tuple({"name": n.name, "state": n.state, "cpus": n.cpus, "gres": n.gres, "reason": n.reason}
                      for n in slurm.nodes()) if up else ()
        return ClusterInfo(self.name, PROVIDER, "running" if up else "stopped", self.record.created, nodes,
                           details={"ssh": self.record.details["ssh"], "runs_dir": self.runs_dir(),
                                    "python": self.python()},
                           where=f"at {self.transport.label}")

    def resize(self, queue: str, max_count: int, min_count: int | None = None, compute_resource: str | None = None,
               progress: Progress = quiet) -> dict[str, Any]:
        raise ClusterkitError(f"cluster {self.name!r} is reached over SSH; clusterkit did not make it and does "
                              "not resize it", fix="resize it where it was made")

    def deletion(self) -> DeletionPlan:
        return DeletionPlan(self.name, (f"clusterkit's registration of {self.name!r} (the connection and job "
                                        "records); the cluster itself is not touched",))

    def delete(self, progress: Progress = quiet) -> None:
        registry.remove(self.name)
        shutil.rmtree(registry.cluster_dir(self.name), ignore_errors=True)


def connect(name: str, target: SshTarget, *, runs_dir: str | None = None, python: str = "python3",
            accept_new_host_key: bool = False, progress: Progress = quiet) -> SshCluster:
    """Register an existing Slurm cluster reached over SSH, after checking that Slurm answers there."""
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
        runs = runs_dir or f"{home(transport)}/{DEFAULT_RUNS_DIR}"
        record = registry.ClusterRecord(
            name=name, provider=PROVIDER, created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            details={"ssh": target.to_dict(), "runs_dir": runs, "python": python,
                     "slurm_version": version[0] if version else ""})
        registry.save(record)
    return SshCluster(record)


def connect_to(name: str, ssh: str, *, port: int | None = None, identity_file: str | None = None,
               known_hosts: str | None = None, accept_new_host_key: bool = False, runs_dir: str | None = None,
               python: str = "python3") -> SshCluster:
    """`clusterkit connect NAME --ssh [USER@]HOST ...` for notebooks and scripts."""
    target = SshTarget.parse(ssh, port=port, identity_file=identity_file, known_hosts_file=known_hosts)
    return connect(name, target, runs_dir=runs_dir, python=python, accept_new_host_key=accept_new_host_key)

"""A Slurm cluster clusterkit uses but did not make, given the transport that reaches it: this machine's own
Slurm (`--cluster host`, on a ParallelCluster head node or any login node), or a login node over SSH
(`clusterkit connect NAME --ssh [USER@]HOST`, see clusterkit.transport). clusterkit neither resizes nor
deletes such a cluster; deleting a connected one forgets the connection.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import field

from clusterkit import registry
from clusterkit.errors import ClusterkitError
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.providers.base import (ClusterInfo, DeletionPlan, NodeAction, NodeActionPlan, Progress, Replacement,
                                       ResizeResult, cannot_act_on_nodes, quiet, slurm_nodes)
from clusterkit.registry import ClusterRecord, JsonObject
from clusterkit.slurm import Flavor, Slurm, flavor_of
from clusterkit.transport import LOCAL, SshTarget, SshTransport, Transport

HOST = "host"  # the provider name of this machine's own Slurm, and that cluster's name
SSH = "ssh"


@lean_dataclass(frozen=True)
class ExistingClusterState:
    """What reaching and using the cluster takes. `ssh` None: this machine's own Slurm."""

    ssh: SshTarget | None
    runs_dir: str | None  # per-run directories on the cluster; None when the submitter's are the cluster's
    python: str = "python3"
    slurm_version: str = ""
    env: dict[str, str] = field(default_factory=dict)  # what its jobs inherit on top of the login's environment
    queues: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        return {"ssh": self.ssh.to_dict() if self.ssh else None, "runs_dir": self.runs_dir, "python": self.python,
                "slurm_version": self.slurm_version, "env": dict(self.env),
                "queues": {queue: list(types) for queue, types in self.queues.items()}}

    @classmethod
    def from_json(cls, data: JsonObject) -> ExistingClusterState:
        ssh = data.get("ssh")
        return cls(ssh=SshTarget.from_dict(ssh) if isinstance(ssh, dict) else None,  # type: ignore[arg-type]
                   runs_dir=_text(data, "runs_dir"), python=_text(data, "python") or "python3",
                   slurm_version=_text(data, "slurm_version") or "",
                   env={str(k): str(v) for k, v in (data.get("env") or {}).items()},  # type: ignore[union-attr]
                   queues={str(q): [str(t) for t in types]  # type: ignore[union-attr]
                           for q, types in (data.get("queues") or {}).items()})  # type: ignore[union-attr]


def _text(data: JsonObject, key: str) -> str | None:
    value = data.get(key)
    return None if value is None else str(value)


class ExistingCluster:
    """One cluster class for every Slurm clusterkit did not make; only the transport differs."""

    def __init__(self, record: ClusterRecord[ExistingClusterState]) -> None:
        self.record = record
        self.state = record.details
        self.transport: Transport = SshTransport(self.state.ssh) if self.state.ssh else LOCAL

    @classmethod
    def on_this_machine(cls) -> ExistingCluster:
        """The Slurm this machine is configured for; jobs run with the Python that drives clusterkit."""
        return cls(ClusterRecord(HOST, HOST, "", ExistingClusterState(ssh=None, runs_dir=None,
                                                                      python=sys.executable)))

    @property
    def name(self) -> str:
        return self.record.name

    def slurm(self) -> Slurm:
        return Slurm(transport=self.transport, extra_env=dict(self.state.env))

    def queues(self) -> dict[str, list[str]]:
        return {queue: list(types) for queue, types in self.state.queues.items()}

    def flavor(self) -> Flavor:
        """HyperPod's where the machine the jobs are submitted on (a HyperPod controller or login node) has HyperPod's
        resource config; asked each time (over SSH: one round trip), since a connection records no such fact."""
        return flavor_of(self.transport)

    def runs_dir(self) -> str | None:
        return self.state.runs_dir

    def python(self) -> str:
        return self.state.python

    def replacements(self) -> dict[str, Replacement]:
        return {}  # a cluster clusterkit did not make replaces nodes its own way, if at all

    def describe(self) -> ClusterInfo:
        slurm = self.slurm()
        up = slurm.ping()
        nodes = slurm_nodes(slurm) if up else ()
        status = "running" if up else "stopped"
        version = {"slurm_version": slurm.version() if up else None}  # what its controller says it runs
        if self.state.ssh is None:
            return ClusterInfo(name=self.name, provider=HOST, status=status, nodes=nodes, details=version)
        return ClusterInfo(self.name, SSH, status, self.record.created, nodes,
                           details={"ssh": self.state.ssh.to_dict(), "runs_dir": self.state.runs_dir,
                                    "python": self.state.python, **version},
                           where=f"at {self.transport.label}")

    def _not_ours(self, verb: str, pcluster_verb: str) -> ClusterkitError:
        if self.state.ssh is None:
            return ClusterkitError(f"clusterkit did not make this machine's Slurm cluster and does not {verb} it",
                                   fix=f"{verb} it where it was made (e.g. pcluster {pcluster_verb})")
        return ClusterkitError(f"cluster {self.name!r} is reached over SSH; clusterkit did not make it and does "
                               f"not {verb} it", fix=f"{verb} it where it was made")

    def resize(self, queue: str, max_count: int, min_count: int | None = None, compute_resource: str | None = None,
               progress: Progress = quiet) -> ResizeResult:
        raise self._not_ours("resize", "update-cluster")

    def plan_node_action(self, action: NodeAction, names: list[str]) -> NodeActionPlan:
        raise cannot_act_on_nodes(self.name, "Slurm" if self.state.ssh is None else "connected (ssh)", action,
                                  f"{action.value} it where the cluster was made; on a HyperPod controller: scontrol "
                                  f"update NodeName=NODE State=FAIL Reason=Action:{action.value.capitalize()}")

    def act_on_nodes(self, plan: NodeActionPlan, progress: Progress = quiet) -> tuple[str, ...]:
        raise cannot_act_on_nodes(self.name, "Slurm", plan.action, f"{plan.action.value} it where the cluster was made")

    def deletion(self) -> DeletionPlan:
        if self.state.ssh is None:
            raise self._not_ours("delete", "delete-cluster")
        return DeletionPlan(self.name, (f"clusterkit's registration of {self.name!r} (the connection and job "
                                        "records); the cluster itself is not touched",))

    def delete(self, progress: Progress = quiet) -> None:
        self.deletion()
        registry.remove(self.name)
        shutil.rmtree(registry.cluster_dir(self.name), ignore_errors=True)

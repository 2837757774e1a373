"""AWS clusters through ParallelCluster: prepare (resolve + dry run), create, describe, update, delete.

    prepared = prepare(plan, Aws(region), ParallelClusterBackend())   # checks; changes nothing
    cluster = AwsCluster.create(prepared, progress=print)              # creates and follows the stack
    cluster.update_queue("train", max_count=8); cluster.delete()

The registry record (provider "aws") keeps the region, the stack id and the config file, so every
later verb finds the cluster by name alone.
"""

from __future__ import annotations

import copy
import datetime as dt
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusterkit import registry
from clusterkit.errors import AlreadyExists, ClusterkitError, NotFound
from clusterkit.findings import Finding, has_errors
from clusterkit.providers.aws.access import Aws, check_caller
from clusterkit.providers.aws.backend import ClusterBackend, Config, ParallelClusterBackend
from clusterkit.providers.aws.resolve import Resolution, resolve
from clusterkit.providers.aws.stack import Progress, StackFailed, follow_stack

if TYPE_CHECKING:
    from clusterkit.cluster.plan import Plan

PROVIDER = "aws"
CONFIG_FILE = "parallelcluster.yaml"
POLL_SECONDS = 15.0  # between looks at the stack; tests lower it


def _quiet(_: str) -> None:
    pass


@dataclass
class PreparedCluster:
    """A spec resolved against the account and dry-run by ParallelCluster; `config` is None on errors."""

    name: str
    region: str
    caller: dict[str, str]
    resolution: Resolution | None
    findings: list[Finding] = field(default_factory=list)
    config: Config | None = None

    @property
    def ok(self) -> bool:
        return self.config is not None and not has_errors(self.findings)


def prepare(plan: Plan, aws: Aws, backend: ClusterBackend | None = None, custom_ami: str | None = None,
            progress: Progress = _quiet) -> PreparedCluster:
    """Check the caller, resolve the spec (subnet, reservations, key, storage, AMI), then ParallelCluster's dry run."""
    from clusterkit.cluster import render_config, validate

    if not plan.ok or plan.spec is None:
        raise ClusterkitError("the cluster spec has errors", fix="run with --dry-run to see them")
    name = plan.spec.name
    if registry.exists(name):
        raise AlreadyExists(f"a cluster named {name!r} already exists",
                            fix=f"choose another --name, or delete it first with `clusterkit delete-cluster {name}`")
    backend = backend or ParallelClusterBackend()
    progress(f"checking AWS credentials for {aws.region}")
    caller = check_caller(aws)
    progress(f"resolving the spec in account {caller['account']}, {aws.region}")
    resolution = resolve(plan.spec, aws, custom_ami)
    prepared = PreparedCluster(name=name, region=aws.region, caller=caller, resolution=resolution)
    # The resolved spec is validated afresh: a chosen subnet ends the "placeholder subnet" warning.
    prepared.findings = validate(resolution.spec) + resolution.findings
    if has_errors(prepared.findings):
        return prepared
    config = render_config(resolution.spec)
    if resolution.image_id:
        config["Image"]["CustomAmi"] = resolution.image_id
    progress("ParallelCluster dry run")
    prepared.findings += backend.dry_run(name, config, aws.region)
    if not has_errors(prepared.findings):
        prepared.config = config
    return prepared


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _write_config(path: Path, config: Config) -> None:
    import yaml  # lazy: keep CLI start fast

    from clusterkit.files import write_atomically

    header = "# AWS ParallelCluster configuration of this cluster, as last applied by clusterkit.\n"
    write_atomically(path, header + yaml.safe_dump(config, sort_keys=False, width=1000))


def resize_queue(config: Config, queue: str, max_count: int, min_count: int | None = None,
                 compute_resource: str | None = None) -> Config:
    """A copy of the ParallelCluster config with one queue's compute resource resized."""
    if max_count < 1 or (min_count is not None and not 0 <= min_count <= max_count):
        raise ClusterkitError(f"invalid size: --min-count {min_count} --max-count {max_count}",
                              fix="max-count at least 1, min-count between 0 and max-count")
    config = copy.deepcopy(config)
    queues = config.get("Scheduling", {}).get("SlurmQueues", [])
    found = next((q for q in queues if q.get("Name") == queue), None)
    if found is None:
        raise NotFound(f"no queue {queue!r}", fix=f"queues: {', '.join(q.get('Name', '?') for q in queues)}")
    resources = found.get("ComputeResources", [])
    if compute_resource is None and len(resources) > 1:
        raise ClusterkitError(f"queue {queue!r} has several compute resources",
                              fix=f"name one with --compute-resource: {', '.join(r['Name'] for r in resources)}")
    target = next((r for r in resources if compute_resource in (None, r.get("Name"))), None)
    if target is None:
        raise NotFound(f"queue {queue!r} has no compute resource {compute_resource!r}",
                       fix=f"compute resources: {', '.join(r['Name'] for r in resources)}")
    new_min = target.get("MinCount", 0) if min_count is None else min_count
    if found.get("CapacityType") == "CAPACITY_BLOCK" and new_min != max_count:
        raise ClusterkitError("a Capacity Block queue needs min-count equal to max-count",
                              fix=f"pass --min-count {max_count}")
    if new_min > max_count:
        raise ClusterkitError(f"min-count {new_min} is above max-count {max_count}", fix="lower --min-count too")
    target["MaxCount"] = max_count
    target["MinCount"] = new_min
    return config


# ParallelCluster's clusterStatus → the provider-neutral status the CLI shows for every provider.
_STATUS = {"CREATE_COMPLETE": "running", "UPDATE_COMPLETE": "running", "CREATE_IN_PROGRESS": "creating",
           "UPDATE_IN_PROGRESS": "updating", "DELETE_IN_PROGRESS": "deleting"}


class AwsCluster:
    """A ParallelCluster cluster known to the registry."""

    def __init__(self, record: registry.ClusterRecord, aws: Aws | None = None,
                 backend: ClusterBackend | None = None) -> None:
        if record.provider != PROVIDER:
            raise ClusterkitError(f"cluster {record.name!r} is a {record.provider} cluster, not an AWS one")
        self.record = record
        self._aws = aws
        self.backend = backend or ParallelClusterBackend()

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def region(self) -> str:
        return self.record.details["region"]

    @property
    def stack_id(self) -> str:
        return self.record.details["stack_id"]

    @property
    def config_file(self) -> Path:
        return Path(self.record.details["config_file"])

    @property
    def aws(self) -> Aws:
        if self._aws is None:
            self._aws = Aws(self.region)
        return self._aws

    # ----- create -------------------------------------------------------------------------------
    @classmethod
    def create(cls, prepared: PreparedCluster, aws: Aws, backend: ClusterBackend | None = None,
               progress: Progress = _quiet, poll_seconds: float | None = None) -> AwsCluster:
        """Create the prepared cluster and follow its stack to CREATE_COMPLETE.

        The record is saved as soon as the stack exists, so `delete-cluster` can clean up a failed create.
        """
        if not prepared.ok or prepared.config is None:
            raise ClusterkitError(f"cluster {prepared.name!r} did not pass its checks",
                                  fix="fix the findings printed above")
        backend = backend or ParallelClusterBackend()
        config_file = registry.cluster_dir(prepared.name) / CONFIG_FILE
        config_file.parent.mkdir(parents=True, exist_ok=True)
        _write_config(config_file, prepared.config)
        progress(f"creating cluster {prepared.name!r} in {aws.region}")
        try:
            stack_id = backend.create(prepared.name, prepared.config, aws.region)
        except BaseException:
            shutil.rmtree(config_file.parent, ignore_errors=True)
            raise
        resolution = prepared.resolution
        cluster = cls(registry.ClusterRecord(
            name=prepared.name, provider=PROVIDER, created=_now(),
            details={"region": aws.region, "stack_name": prepared.name, "stack_id": stack_id,
                     "config_file": str(config_file), "account": prepared.caller.get("account"),
                     "chosen": dict(resolution.chosen) if resolution else {}},
        ), aws=aws, backend=backend)
        registry.save(cluster.record)
        cluster._follow("CREATE", progress, poll_seconds)
        return cluster

    def _follow(self, operation: str, progress: Progress, poll_seconds: float | None) -> None:
        try:
            follow_stack(self.aws.client("cloudformation"), self.stack_id, operation, progress,
                         poll_seconds=POLL_SECONDS if poll_seconds is None else poll_seconds)
        except StackFailed as failed:
            after = {"CREATE": f"then remove it with `clusterkit delete-cluster {self.name}`",
                     "UPDATE": "the cluster keeps its previous configuration",
                     "DELETE": f"fix the resource, then retry `clusterkit delete-cluster {self.name}`"}[operation]
            raise StackFailed(failed.message, failed.failure,
                              fix="; ".join(part for part in (failed.fix, after) if part)) from None

    # ----- describe -----------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        info = self.backend.describe(self.name, self.region)
        base = {"name": self.name, "provider": PROVIDER, "created": self.record.created, "region": self.region,
                "stack_name": self.record.details.get("stack_name", self.name),
                "config_file": str(self.config_file)}
        if info is None:
            return {**base, "status": "gone", "stack_status": None, "head_node": None, "nodes": []}
        cluster_status = info.get("clusterStatus", "")
        status = _STATUS.get(cluster_status, "failed" if "FAILED" in cluster_status else cluster_status.lower())
        if status == "running" and info.get("computeFleetStatus") not in (None, "RUNNING", "ENABLED"):
            status = "stopped"
        head = info.get("headNode") or {}
        nodes = [{"name": i.get("instanceId"), "node_type": i.get("nodeType"), "queue": i.get("queueName"),
                  "instance_type": i.get("instanceType"), "state": i.get("state"),
                  "private_ip": i.get("privateIpAddress")} for i in info.get("instances", [])]
        return {**base, "status": status, "stack_status": info.get("cloudFormationStackStatus"),
                "compute_fleet": info.get("computeFleetStatus"),
                "head_node": {"instance_id": head.get("instanceId"), "state": head.get("state"),
                              "public_ip": head.get("publicIpAddress"), "private_ip": head.get("privateIpAddress")}
                if head else None,
                "nodes": nodes}

    # ----- update -------------------------------------------------------------------------------
    def update_queue(self, queue: str, max_count: int, min_count: int | None = None,
                     compute_resource: str | None = None, progress: Progress = _quiet,
                     poll_seconds: float | None = None) -> dict[str, Any]:
        """Resize one queue through a ParallelCluster update; the config file follows when it succeeds."""
        import yaml  # lazy: keep CLI start fast

        config = yaml.safe_load(self.config_file.read_text())
        new = resize_queue(config, queue, max_count, min_count, compute_resource)
        progress(f"updating cluster {self.name!r}: queue {queue!r} to max {max_count}")
        self.backend.update(self.name, new, self.region)
        self._follow("UPDATE", progress, poll_seconds)
        _write_config(self.config_file, new)
        resized = next(q for q in new["Scheduling"]["SlurmQueues"] if q["Name"] == queue)
        return {"name": self.name, "queue": queue,
                "compute_resources": [{"name": r["Name"], "min_count": r["MinCount"], "max_count": r["MaxCount"]}
                                      for r in resized["ComputeResources"]]}

    # ----- delete -------------------------------------------------------------------------------
    def delete(self, progress: Progress = _quiet, poll_seconds: float | None = None) -> None:
        """Delete the cluster (its stack, and storage ParallelCluster created with DeletionPolicy Delete)."""
        if self.backend.describe(self.name, self.region) is not None:
            progress(f"deleting cluster {self.name!r} in {self.region}")
            self.backend.delete(self.name, self.region)
            self._follow("DELETE", progress, poll_seconds)
        registry.remove(self.name)
        shutil.rmtree(self.config_file.parent, ignore_errors=True)

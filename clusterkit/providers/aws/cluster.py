"""AWS clusters through ParallelCluster: the `aws` provider and the clusters it manages.

    provider = AwsProvider()
    plan = provider.plan(ClusterRequest(name="train", preset="p4de"))  # offline: spec, config, findings
    plan = provider.prepare(plan)            # credentials, resolution, ParallelCluster's dry run; no change
    cluster = provider.apply(plan)           # uploads the node scripts, creates exactly plan.config, follows it
    cluster.resize("train", max_count=8); cluster.deletion(); cluster.delete()

The registry record (provider "aws") keeps the region, the stack id and the config file, so every
later verb finds the cluster by name alone.
"""

from __future__ import annotations

import copy
import datetime as dt
import shutil
from pathlib import Path
from typing import Any

from clusterkit import registry
from clusterkit.cluster.plan import ClusterPlan, ClusterRequest, plan_spec, script_uploads, spec_data
from clusterkit.cluster.render import config_text, render_config
from clusterkit.cluster.storage import storage_fates
from clusterkit.cluster.validators import validate
from clusterkit.errors import AlreadyExists, ClusterkitError, NotFound
from clusterkit.files import write_atomically
from clusterkit.findings import has_errors
from clusterkit.providers.aws.access import Aws, check_caller
from clusterkit.providers.aws.backend import ClusterBackend, Config, ParallelClusterBackend
from clusterkit.providers.aws.cloudformation import StackFailed, follow_stack
from clusterkit.providers.aws.resolve import resolve
from clusterkit.providers.aws.uploads import upload_node_scripts
from clusterkit.providers.base import ClusterInfo, DeletionPlan, Progress, quiet
from clusterkit.slurm import Slurm

PROVIDER = "aws"
CONFIG_FILE = "parallelcluster.yaml"
POLL_SECONDS = 15.0  # between looks at the stack; tests lower it
LOCAL_FLAGS = {"nodes": ("--nodes", 4), "cpus_per_node": ("--cpus-per-node", 2),
               "gpus_per_node": ("--gpus-per-node", 0), "ssh": ("--ssh", False)}
# clusterkit uploads its node scripts at apply, after ParallelCluster's dry run: that run must not look
# for them yet (clusterkit checks the spec's own scripts in `resolve` instead).
DRY_RUN_SUPPRESSED = ("AsyncTimedUrlValidator",)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class AwsProvider:
    """AWS ParallelCluster clusters. `aws` and `backend` are the edges (boto3, pcluster); tests swap them."""

    name = PROVIDER

    def __init__(self, aws: Aws | None = None, backend: ClusterBackend | None = None) -> None:
        self._aws = aws
        self._backend = backend

    @property
    def backend(self) -> ClusterBackend:
        if self._backend is None:
            self._backend = ParallelClusterBackend()
        return self._backend

    def _aws_for(self, region: str) -> Aws:
        if self._aws is None or self._aws.region != region:
            self._aws = Aws(region)
        return self._aws

    def plan(self, request: ClusterRequest) -> ClusterPlan:
        given = [flag for key, (flag, default) in LOCAL_FLAGS.items() if getattr(request, key) != default]
        if given:
            raise ClusterkitError(f"{', '.join(given)} describe local clusters",
                                  fix="an AWS cluster's nodes come from its spec (queues[].compute[])")
        plan = plan_spec(spec_data(request))
        return plan.replace(files=self._files(plan), actions=self._actions(plan))

    def _files(self, plan: ClusterPlan) -> dict[str, str]:
        if plan.config_text is None or not plan.name:
            return {}
        return {str(registry.cluster_dir(plan.name) / CONFIG_FILE): plan.config_text}

    def _actions(self, plan: ClusterPlan) -> tuple[str, ...]:
        region = plan.spec.region if plan.spec is not None else "?"
        uploads = [f"upload {Path(path).name} to {url}" for url, path in plan.uploads.items()]
        return (f"check the AWS caller (sts get-caller-identity) in {region}",
                "resolve the spec against the account: subnet, reservations, key pair, storage, AMI, scripts bucket",
                "run ParallelCluster's dry run of the resolved configuration",
                *uploads,
                f"create the cluster with ParallelCluster (CloudFormation stack {plan.name}) and follow it")

    def prepare(self, plan: ClusterPlan, progress: Progress = quiet) -> ClusterPlan:
        """Check the caller, resolve the spec, render it again and run ParallelCluster's dry run."""
        if not plan.ok or plan.spec is None:
            raise ClusterkitError("the cluster spec has errors", fix="run with --dry-run to see them")
        name = plan.name
        if registry.exists(name):
            raise AlreadyExists(f"a cluster named {name!r} already exists", fix=f"choose another --name, or delete "
                                f"it first with `clusterkit delete-cluster {name}`")
        aws = self._aws_for(plan.spec.region)
        progress(f"checking AWS credentials for {aws.region}")
        caller = check_caller(aws)
        progress(f"resolving the spec in account {caller['account']}, {aws.region}")
        resolution = resolve(plan.spec, aws, caller["account"])
        # The resolved spec is validated afresh: a chosen subnet ends the "placeholder subnet" warning.
        findings = validate(resolution.spec) + resolution.findings
        details = {**plan.details, "prepared": True, "region": aws.region, "account": caller["account"],
                   "caller": caller["arn"], "chosen": dict(resolution.chosen),
                   "create_scripts_bucket": resolution.create_scripts_bucket}
        prepared = plan.replace(spec=resolution.spec, details=details)
        if has_errors(findings):
            return prepared.replace(findings=tuple(findings), config=None, config_text=None, files={}, uploads={})
        config = render_config(resolution.spec)
        progress("ParallelCluster dry run")
        findings += self.backend.dry_run(name, config, aws.region, suppress=DRY_RUN_SUPPRESSED)
        if has_errors(findings):
            return prepared.replace(findings=tuple(findings), config=None, config_text=None, files={}, uploads={})
        prepared = prepared.replace(findings=tuple(findings), config=config, config_text=config_text(name, config),
                                    uploads=script_uploads(config))
        return prepared.replace(files=self._files(prepared), actions=self._actions(prepared))

    def apply(self, plan: ClusterPlan, progress: Progress = quiet, poll_seconds: float | None = None) -> AwsCluster:
        """Create the prepared cluster and follow its stack to CREATE_COMPLETE.

        The record is saved as soon as the stack exists, so `delete-cluster` can clean up a failed create.
        """
        if not plan.details.get("prepared") or not plan.ok or plan.config is None:
            raise ClusterkitError(f"cluster {plan.name!r} was not prepared against AWS, or did not pass",
                                  fix="prepare the plan first (provider.prepare(plan)) and fix its findings")
        aws = self._aws_for(plan.details["region"])
        upload_node_scripts(aws, plan.spec.scripts_bucket, plan.details["account"], plan.uploads,
                            create_bucket=plan.details.get("create_scripts_bucket", False), progress=progress)
        ((config_path, text),) = plan.files.items()
        config_file = Path(config_path)
        config_file.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(config_file, text)
        progress(f"creating cluster {plan.name!r} in {aws.region}")
        try:
            stack_id = self.backend.create(plan.name, plan.config, aws.region)
        except BaseException:
            shutil.rmtree(config_file.parent, ignore_errors=True)
            raise
        cluster = AwsCluster(registry.ClusterRecord(
            name=plan.name, provider=PROVIDER, created=_now(),
            details={"region": aws.region, "stack_name": plan.name, "stack_id": stack_id,
                     "config_file": str(config_file), "account": plan.details.get("account"),
                     "chosen": dict(plan.details.get("chosen", {})), "queues": queue_instance_types(plan.config)},
        ), aws=aws, backend=self.backend)
        registry.save(cluster.record)
        cluster._follow("CREATE", progress, poll_seconds)
        return cluster

    def open(self, record: registry.ClusterRecord) -> AwsCluster:
        return AwsCluster(record, backend=self._backend)


def queue_instance_types(config: Config) -> dict[str, list[str]]:
    """Queue (Slurm partition) -> the instance types of its compute resources: what a job there runs on."""
    def types(resource: Config) -> list[str]:  # InstanceType, or the flexible `Instances` of multi-subnet queues
        if "InstanceType" in resource:
            return [resource["InstanceType"]]
        return [item["InstanceType"] for item in resource.get("Instances", [])]

    return {queue["Name"]: [name for resource in queue.get("ComputeResources", []) for name in types(resource)]
            for queue in config.get("Scheduling", {}).get("SlurmQueues", [])}


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

    def config(self) -> Config:
        import yaml  # lazy: keep CLI start fast

        return yaml.safe_load(self.config_file.read_text())

    def runs_dir(self) -> str | None:
        return None

    def python(self) -> str:
        return "python3"

    def queues(self) -> dict[str, list[str]]:
        known = self.record.details.get("queues")
        if known is not None:
            return dict(known)
        try:  # a record from before queues were kept in it
            return queue_instance_types(self.config())
        except (OSError, ValueError, AttributeError):
            return {}

    def slurm(self) -> Slurm:
        raise ClusterkitError(
            f"jobs on AWS cluster {self.name!r} are submitted from its head node",
            fix=f"ssh to the head node (pcluster ssh --cluster-name {self.name}) and run clusterkit there "
                "with --cluster host")

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

    def describe(self) -> ClusterInfo:
        info = self.backend.describe(self.name, self.region)
        details = {"region": self.region, "stack_name": self.record.details.get("stack_name", self.name),
                   "config_file": str(self.config_file)}
        if info is None:
            return ClusterInfo(self.name, PROVIDER, "gone", self.record.created,
                               details={**details, "stack_status": None, "head_node": None})
        cluster_status = info.get("clusterStatus", "")
        status = _STATUS.get(cluster_status, "failed" if "FAILED" in cluster_status else cluster_status.lower())
        if status == "running" and info.get("computeFleetStatus") not in (None, "RUNNING", "ENABLED"):
            status = "stopped"
        head = info.get("headNode") or {}
        nodes = tuple({"name": i.get("instanceId"), "node_type": i.get("nodeType"), "queue": i.get("queueName"),
                       "instance_type": i.get("instanceType"), "state": i.get("state"),
                       "private_ip": i.get("privateIpAddress")} for i in info.get("instances", []))
        head_node = ({"instance_id": head.get("instanceId"), "state": head.get("state"),
                      "public_ip": head.get("publicIpAddress"), "private_ip": head.get("privateIpAddress")}
                     if head else None)
        address = head.get("publicIpAddress") or head.get("privateIpAddress")
        return ClusterInfo(self.name, PROVIDER, status, self.record.created, nodes, details={
            **details, "stack_status": info.get("cloudFormationStackStatus"),
            "compute_fleet": info.get("computeFleetStatus"), "head_node": head_node},
            where=f"in {self.region}" + (f"; head node {address}" if address else ""))

    def resize(self, queue: str, max_count: int, min_count: int | None = None, compute_resource: str | None = None,
               progress: Progress = quiet, poll_seconds: float | None = None) -> dict[str, Any]:
        """Resize one queue through a ParallelCluster update; the config file follows when it succeeds."""
        new = resize_queue(self.config(), queue, max_count, min_count, compute_resource)
        progress(f"updating cluster {self.name!r}: queue {queue!r} to max {max_count}")
        self.backend.update(self.name, new, self.region)
        self._follow("UPDATE", progress, poll_seconds)
        write_atomically(self.config_file, config_text(self.name, new))
        resized = next(q for q in new["Scheduling"]["SlurmQueues"] if q["Name"] == queue)
        return {"name": self.name, "queue": queue,
                "compute_resources": [{"name": r["Name"], "min_count": r["MinCount"], "max_count": r["MaxCount"]}
                                      for r in resized["ComputeResources"]]}

    def deletion(self) -> DeletionPlan:
        """The stack and its instances go; storage ParallelCluster created goes only when its DeletionPolicy
        is Delete (clusterkit writes Retain unless the spec says otherwise); storage the cluster only
        mounted stays."""
        try:
            fates = storage_fates(self.config())
        except (OSError, ValueError, AttributeError):
            fates = []
        stack = (f"CloudFormation stack {self.record.details.get('stack_name', self.name)} in {self.region}: "
                 "the head node, every compute node, their root volumes and the cluster's network resources")
        lost = tuple(str(fate) for fate in fates if not fate.kept)
        return DeletionPlan(self.name, (stack, *lost), tuple(str(fate) for fate in fates if fate.kept),
                            confirm=True, storage_deleted=lost)

    def delete(self, progress: Progress = quiet, poll_seconds: float | None = None) -> None:
        """Delete the cluster (its stack, and storage ParallelCluster created with DeletionPolicy Delete)."""
        if self.backend.describe(self.name, self.region) is not None:
            progress(f"deleting cluster {self.name!r} in {self.region}")
            self.backend.delete(self.name, self.region)
            self._follow("DELETE", progress, poll_seconds)
        registry.remove(self.name)
        shutil.rmtree(self.config_file.parent, ignore_errors=True)

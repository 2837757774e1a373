"""AWS clusters through ParallelCluster: the `aws` provider and the clusters it manages.

    provider = AwsProvider()
    plan = provider.plan(ClusterRequest(name="train", preset="p4de"))  # offline: spec, config, findings
    plan = provider.prepare(plan)            # credentials, resolution, ParallelCluster's dry run; no change
    cluster = provider.apply(plan)           # the prerequisites stack when new, the node scripts, the cluster
    cluster.resize("train", max_count=8); cluster.deletion(); cluster.delete()
    cluster.slurm()                          # Slurm on its head node, over SSH (or SSM Session Manager)

The registry record (provider "aws") keeps the region, the stack id, the config file, the prerequisites stack
and how to reach the head node, so every later verb finds the cluster by name alone.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from clusterkit import registry
from clusterkit.cluster.node_scripts import installed_python
from clusterkit.cluster.plan import plan_spec, script_uploads, spec_data
from clusterkit.cluster.prerequisites import Prerequisites, planned, template_text, with_outputs
from clusterkit.cluster.render import config_text, render_config, shared_dir
from clusterkit.cluster.storage import StorageFate, storage_fates
from clusterkit.cluster.validators import validate
from clusterkit.errors import AlreadyExists, ClusterkitError, NotFound
from clusterkit.files import write_atomically
from clusterkit.findings import errors, has_errors, info
from clusterkit.providers.aws import prerequisites as stacks
from clusterkit.providers.aws.access import Aws, check_caller
from clusterkit.providers.aws.backend import ClusterBackend, Config, ParallelClusterBackend
from clusterkit.providers.aws.plan import AccountFacts, AwsClusterState, AwsPlanDetails, KeptStack, StackPlan
from clusterkit.providers.aws.uploads import upload_node_scripts
from clusterkit.providers.base import (
    ClusterInfo,
    ComputeResourceSize,
    DeletionPlan,
    InstanceInfo,
    NodeAction,
    NodeActionPlan,
    Progress,
    Replacement,
    ResizeResult,
    cannot_act_on_nodes,
    quiet,
)
from clusterkit.providers.plan import ClusterPlan, ClusterRequest, Option, refuse_foreign_options
from clusterkit.registry import JsonObject

if TYPE_CHECKING:  # loaded only when the account is asked (prepare) or the head node reached, never by a dry run
    from clusterkit.providers.aws.resolve import Resolution
    from clusterkit.slurm import Flavor, Slurm
    from clusterkit.transport import SshTarget

PROVIDER = "aws"
CONFIG_FILE = "parallelcluster.yaml"
POLL_SECONDS = 15.0  # between looks at the stack; tests lower it
# clusterkit uploads its node scripts at apply, after ParallelCluster's dry run: that run must not look
# for them yet (clusterkit checks the spec's own scripts in `resolve` instead).
DRY_RUN_SUPPRESSED = ("AsyncTimedUrlValidator",)
# Before a new prerequisites stack exists, ParallelCluster's dry run sees a subnet of the chosen zone in its place
# (whose public IPs the stack's private subnet does not give) and a placeholder database secret; apply runs the
# full dry run again once the stack's outputs are in the config.
STAND_IN_SUPPRESSED = ("MultiNetworkInterfacesInstancesValidator",)
PENDING_DATABASE_SUPPRESSED = ("PasswordSecretArnValidator",)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class AwsProvider:
    """AWS ParallelCluster clusters. `aws` and `backend` are the edges (boto3, pcluster); tests swap them."""

    name = PROVIDER
    options = (Option("preset", "--preset"), Option("spec_file", "--file"), Option("region", "--region"),
               Option("subnet_id", "--subnet-id"), Option("head_subnet_id", "--head-subnet-id"),
               Option("key_name", "--key-name"), Option("custom_ami", "--custom-ami"),
               Option("identity_file", "--identity-file"), Option("output_config", "--output-config"),
               Option("output_prerequisites", "--output-prerequisites"),
               Option("account_dry_run", "--account-dry-run"))

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

    def plan(self, request: ClusterRequest) -> ClusterPlan[AwsPlanDetails]:
        refuse_foreign_options(self, request.given())
        checked = plan_spec(spec_data(request.preset, request.spec_file, _overrides(request)))
        wanted = planned(checked.spec) if checked.spec is not None and checked.config_text is not None else None
        details = AwsPlanDetails(
            spec=checked.spec, config=checked.config, config_text=checked.config_text, summary=checked.summary,
            uploads=checked.uploads, identity_file=request.identity_file,
            prerequisites=(StackPlan(wanted.network, wanted.database, template=template_text(wanted, checked.name))
                           if wanted is not None and wanted.needed else None))
        plan = ClusterPlan(provider=PROVIDER, name=checked.name, details=details, findings=checked.findings)
        return plan.replace(files=self._files(plan), actions=self._actions(plan))

    def _files(self, plan: ClusterPlan[AwsPlanDetails]) -> dict[str, str]:
        if plan.details.config_text is None or not plan.name:
            return {}
        return {str(registry.cluster_dir(plan.name) / CONFIG_FILE): plan.details.config_text}

    def _actions(self, plan: ClusterPlan[AwsPlanDetails]) -> tuple[str, ...]:
        details = plan.details
        region = details.spec.region if details.spec is not None else "?"
        uploads = [f"upload {Path(path).name} to {url}" for url, path in details.uploads.items()]
        stack = details.prerequisites
        if details.account is None:
            made = [f"create clusterkit's prerequisites stack ({stack.makes}) unless the account has "
                    "one that fits, or (for the network) a private subnet that fits; feed its outputs into the "
                    "config and run ParallelCluster's dry run again"] if stack else []
        elif stack is not None and stack.create:
            parameters = ", ".join(f"{k}={v}" for k, v in stack.parameters.items())
            made = [f"create the prerequisites stack {stack.stack} ({stack.makes}; {parameters}) and follow it",
                    "render the config with its outputs (subnets, database) and run ParallelCluster's dry run on it"]
        else:
            made = [f"use the prerequisites stack {stack.stack}"] if stack else []
        return (f"check the AWS caller (sts get-caller-identity) in {region}",
                "resolve the spec against the account: network, reservations, key pair, storage, AMI, scripts bucket",
                "run ParallelCluster's dry run of the resolved configuration",
                *made,
                *uploads,
                f"create the cluster with ParallelCluster (CloudFormation stack {plan.name}) and follow it")

    def prepare(self, plan: ClusterPlan[AwsPlanDetails], progress: Progress = quiet) -> ClusterPlan[AwsPlanDetails]:
        """Check the caller, resolve the spec, render it again and run ParallelCluster's dry run. Changes nothing:
        a prerequisites stack still to be made is rendered, and the dry run sees stand-ins for what it will hold."""
        spec = plan.details.spec
        if not plan.ok or spec is None:
            raise ClusterkitError("the cluster spec has errors", fix="run with --dry-run to see them")
        name = plan.name
        if registry.exists(name):
            raise AlreadyExists(f"a cluster named {name!r} already exists", fix=f"choose another --name, or delete "
                                f"it first with `clusterkit delete-cluster {name}`")
        aws = self._aws_for(spec.region)
        progress(f"checking AWS credentials for {aws.region}")
        caller = check_caller(aws)
        progress(f"resolving the spec in account {caller['account']}, {aws.region}")
        from clusterkit.providers.aws.resolve import resolve

        resolution = resolve(spec, aws, caller["account"])
        # The resolved spec is validated afresh: a chosen subnet ends the "placeholder subnet" warning.
        findings = validate(resolution.spec) + resolution.findings
        account = AccountFacts(region=aws.region, account=caller["account"], caller=caller["arn"],
                               chosen=dict(resolution.chosen),
                               create_scripts_bucket=resolution.create_scripts_bucket)
        resolved = dataclasses.replace(plan.details, spec=resolution.spec, account=account,
                                       prerequisites=_resolved_prerequisites(resolution, name))
        refused = dataclasses.replace(resolved, config=None, config_text=None, uploads={})
        if has_errors(findings):
            return plan.replace(details=refused, findings=tuple(findings), files={})
        config = render_config(resolution.spec)
        checked, suppressed, note = _dry_run_config(resolution)
        if checked is None:
            findings.append(info("parallelcluster", note))
        else:
            progress("ParallelCluster dry run" + (f" ({note})" if note else ""))
            if note:
                findings.append(info("parallelcluster", f"dry run of the config with {note}"))
            findings += self.backend.dry_run(name, checked, aws.region, suppress=DRY_RUN_SUPPRESSED + suppressed)
        if has_errors(findings):
            return plan.replace(details=refused, findings=tuple(findings), files={})
        prepared = plan.replace(findings=tuple(findings), details=dataclasses.replace(
            resolved, config=config, config_text=config_text(name, config), uploads=script_uploads(config)))
        return prepared.replace(files=self._files(prepared), actions=self._actions(prepared))

    def apply(self, plan: ClusterPlan[AwsPlanDetails], progress: Progress = quiet,
              poll_seconds: float | None = None) -> AwsCluster:
        """Create the prepared cluster and follow its stack to CREATE_COMPLETE.

        The record is saved as soon as the stack exists, so `delete-cluster` can clean up a failed create.
        """
        details, account = plan.details, plan.details.account
        if account is None or not plan.ok or details.config is None or details.spec is None:
            raise ClusterkitError(f"cluster {plan.name!r} was not prepared against AWS, or did not pass",
                                  fix="prepare the plan first (provider.prepare(plan)) and fix its findings")
        spec, stack = details.spec, details.prerequisites
        aws = self._aws_for(account.region)
        poll = POLL_SECONDS if poll_seconds is None else poll_seconds
        ((config_path, text),) = plan.files.items()
        config_file = Path(config_path)
        record = registry.ClusterRecord(name=plan.name, provider=PROVIDER, created=_now(), details=AwsClusterState(
            region=aws.region, stack_name=plan.name, config_file=str(config_file), account=account.account,
            chosen=dict(account.chosen), queues=queue_instance_types(details.config), os=spec.os,
            key_name=spec.ssh.key_name, identity_file=details.identity_file, shared_dir=shared_dir(spec),
            prerequisites=(KeptStack(stack=stack.stack, created=stack.create, network=stack.network,
                                     database=stack.database, cost_per_hour=stack.holds.cost_per_hour())
                           if stack is not None and stack.stack is not None else None)))
        config = details.config
        if stack is not None and stack.create and stack.stack is not None and stack.template is not None:
            registry.save(record)  # from here on, `delete-cluster` can remove what the create made
            outputs = stacks.create(aws, stack.stack, stack.template, stack.parameters, plan.name, progress, poll)
            config = render_config(with_outputs(spec, outputs))
            progress("ParallelCluster dry run in the new network")
            refused = errors(self.backend.dry_run(plan.name, config, aws.region, suppress=DRY_RUN_SUPPRESSED))
            if refused:
                raise ClusterkitError(
                    f"ParallelCluster refused the cluster in its new network: {refused[0]}",
                    fix=f"`clusterkit delete-cluster {plan.name}` removes the prerequisites stack (a retry reuses it)")
            text = config_text(plan.name, config)
        upload_node_scripts(aws, spec.scripts_bucket, account.account, details.uploads,
                            create_bucket=account.create_scripts_bucket, progress=progress)
        config_file.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(config_file, text)
        progress(f"creating cluster {plan.name!r} in {aws.region}")
        try:
            stack_id = self.backend.create(plan.name, config, aws.region)
        except BaseException:
            if not registry.exists(plan.name):
                shutil.rmtree(config_file.parent, ignore_errors=True)
            raise
        record.details.stack_id = stack_id
        cluster = AwsCluster(record, aws=aws, backend=self.backend)
        registry.save(cluster.record)
        cluster._follow("CREATE", progress, poll_seconds)
        return cluster

    def read_state(self, record: registry.ClusterRecord[JsonObject]) -> registry.ClusterRecord[AwsClusterState]:
        return registry.ClusterRecord(record.name, record.provider, record.created,
                                      AwsClusterState.from_json(record.details))

    def open(self, record: registry.ClusterRecord[AwsClusterState]) -> AwsCluster:
        return AwsCluster(record, backend=self._backend)


def _overrides(request: ClusterRequest) -> dict[str, str]:
    """Spec fields given on the command line, by their path in the spec."""
    values = {"name": request.name, "region": request.region, "subnet_id": request.subnet_id,
              "head_node.subnet_id": request.head_subnet_id, "ssh.key_name": request.key_name,
              "image.custom_ami": request.custom_ami}
    return {path: value for path, value in values.items() if value is not None}


def _resolved_prerequisites(resolution: Resolution, name: str) -> StackPlan | None:
    """The prerequisites stack of a prepared plan: one to create (template, parameters), or one made earlier."""
    wanted = resolution.prerequisites
    if wanted is not None:
        return StackPlan(wanted.network, wanted.database, template=template_text(wanted, name),
                         stack=resolution.stack, create=True, parameters=dict(resolution.parameters))
    if resolution.stack is not None:
        held = resolution.reused or Prerequisites(network=False, database=False)
        return StackPlan(held.network, held.database, stack=resolution.stack)
    return None


def _dry_run_config(resolution: Resolution) -> tuple[Config | None, tuple[str, ...], str]:
    """What ParallelCluster's dry run checks before a new prerequisites stack exists: the config with a subnet of the
    chosen zone standing in for the stack's (None when there is none), the validators that cannot judge a stand-in,
    and a note saying so."""
    wanted = resolution.prerequisites
    if wanted is None:
        return render_config(resolution.spec), (), ""
    suppressed: tuple[str, ...] = PENDING_DATABASE_SUPPRESSED if wanted.database else ()
    notes = ["a placeholder for the accounting database and its secret"] if wanted.database else []
    spec = resolution.spec
    if wanted.network:
        zone = resolution.parameters["AvailabilityZone"]
        if resolution.stand_in is None:
            return None, (), (f"ParallelCluster's dry run waits for the prerequisites stack: no subnet of {zone} "
                              "can stand in for its subnets before it exists")
        spec = copy.deepcopy(spec)
        spec.subnet_id = resolution.stand_in
        suppressed += STAND_IN_SUPPRESSED
        notes.insert(0, f"subnet {resolution.stand_in} of {zone} standing in for the prerequisites stack's subnets")
    return render_config(spec), suppressed, "; ".join(notes) + f" (not run: {', '.join(suppressed)})"


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

    def __init__(self, record: registry.ClusterRecord[AwsClusterState], aws: Aws | None = None,
                 backend: ClusterBackend | None = None) -> None:
        if record.provider != PROVIDER:
            raise ClusterkitError(f"cluster {record.name!r} is a {record.provider} cluster, not an AWS one")
        self.record = record
        self.state = record.details
        self._aws = aws
        self.backend = backend or ParallelClusterBackend()

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def region(self) -> str:
        return self.state.region

    @property
    def stack_name(self) -> str:
        return self.state.stack_name or self.name

    @property
    def config_file(self) -> Path:
        return Path(self.state.config_file)

    @property
    def aws(self) -> Aws:
        if self._aws is None:
            self._aws = Aws(self.region)
        return self._aws

    def config(self) -> Config:
        import yaml  # lazy: keep CLI start fast

        return yaml.safe_load(self.config_file.read_text())

    def flavor(self) -> Flavor:
        from clusterkit.slurm import Flavor

        return Flavor.STOCK  # ParallelCluster's Slurm is stock Slurm

    def runs_dir(self) -> str:
        """Runs go on shared storage: /fsx (the first file system) when the cluster has one, else the home
        directory (ParallelCluster shares /home)."""
        user = self.ssh_target().user or "ubuntu"
        shared = self.state.shared_dir or "/home"
        return f"/home/{user}/clusterkit-runs" if shared == "/home" else f"{shared}/clusterkit-runs/{user}"

    def replacements(self) -> dict[str, Replacement]:
        return {}  # clustermgtd replaces nodes on the head node; its progress is not read yet

    def python(self) -> str:
        """The Python of the virtualenv the head node installed clusterkit into (python3 when it did not)."""
        try:
            return installed_python(self.config()) or "python3"
        except (OSError, ValueError, AttributeError):
            return "python3"

    def queues(self) -> dict[str, list[str]]:
        known = self.state.queues
        if known is not None:
            return {queue: list(types) for queue, types in known.items()}
        try:  # a record from before queues were kept in it
            return queue_instance_types(self.config())
        except (OSError, ValueError, AttributeError):
            return {}

    def slurm(self) -> Slurm:
        """Slurm on the head node, over SSH: its public address, else through SSM Session Manager."""
        from clusterkit.providers.aws.ssh import slurm_over_ssh

        return slurm_over_ssh(self.ssh_target, f"jobs on cluster {self.name!r} are submitted from its head node, which "
                              "clusterkit cannot find", "or run clusterkit on the head node with --cluster host")

    def ssh_target(self) -> SshTarget:
        """How to reach the head node: kept in the record once known, else from ParallelCluster's describe."""
        from clusterkit.providers.aws.ssh import KNOWN_HOSTS_FILE, head_node_target
        from clusterkit.transport import SshTarget

        if self.state.ssh is not None:
            return self.state.ssh
        described = self.backend.describe(self.name, self.region)
        if described is None:
            raise ClusterkitError(f"cluster {self.name!r} no longer exists in {self.region}",
                                  fix=f"remove it here with `clusterkit delete-cluster {self.name}`")
        state = self.state
        target = head_node_target(described, region=self.region, os_name=state.os or "ubuntu2204",
                                  key_name=state.key_name, identity_file=state.identity_file,
                                  known_hosts_file=str(registry.cluster_dir(self.name) / KNOWN_HOSTS_FILE))
        state.ssh = target
        registry.save(self.record)
        return target

    def _follow(self, operation: str, progress: Progress, poll_seconds: float | None) -> None:
        from clusterkit.providers.aws.cloudformation import StackFailed, follow_stack

        try:
            follow_stack(self.aws.client("cloudformation"), self.state.stack_id, operation, progress,
                         poll_seconds=POLL_SECONDS if poll_seconds is None else poll_seconds)
        except StackFailed as failed:
            after = {"CREATE": f"then remove it with `clusterkit delete-cluster {self.name}`",
                     "UPDATE": "the cluster keeps its previous configuration",
                     "DELETE": f"fix the resource, then retry `clusterkit delete-cluster {self.name}`"}[operation]
            raise StackFailed(failed.message, failed.failure,
                              fix="; ".join(part for part in (failed.fix, after) if part)) from None

    def describe(self) -> ClusterInfo:
        info = self.backend.describe(self.name, self.region)
        details: JsonObject = {"region": self.region, "stack_name": self.stack_name,
                               "config_file": str(self.config_file)}
        if info is None:
            return ClusterInfo(self.name, PROVIDER, "gone", self.record.created,
                               details={**details, "stack_status": None, "head_node": None})
        cluster_status = info.get("clusterStatus", "")
        status = _STATUS.get(cluster_status, "failed" if "FAILED" in cluster_status else cluster_status.lower())
        if status == "running" and info.get("computeFleetStatus") not in (None, "RUNNING", "ENABLED"):
            status = "stopped"
        head = info.get("headNode") or {}
        nodes = tuple(InstanceInfo(name=i.get("instanceId"), node_type=i.get("nodeType"), queue=i.get("queueName"),
                                   instance_type=i.get("instanceType"), state=i.get("state"),
                                   private_ip=i.get("privateIpAddress")) for i in info.get("instances", []))
        head_node = ({"instance_id": head.get("instanceId"), "state": head.get("state"),
                      "public_ip": head.get("publicIpAddress"), "private_ip": head.get("privateIpAddress")}
                     if head else None)
        address = head.get("publicIpAddress") or head.get("privateIpAddress")
        return ClusterInfo(self.name, PROVIDER, status, self.record.created, nodes, details={
            **details, "stack_status": info.get("cloudFormationStackStatus"),
            "compute_fleet": info.get("computeFleetStatus"), "head_node": head_node,
            "prerequisites_stack": self.state.prerequisites.stack if self.state.prerequisites else None,
            "python": self.python()},
            where=f"in {self.region}" + (f"; head node {address}" if address else ""))

    def resize(self, queue: str, max_count: int, min_count: int | None = None, compute_resource: str | None = None,
               progress: Progress = quiet, poll_seconds: float | None = None) -> ResizeResult:
        """Resize one queue through a ParallelCluster update; the config file follows when it succeeds."""
        new = resize_queue(self.config(), queue, max_count, min_count, compute_resource)
        progress(f"updating cluster {self.name!r}: queue {queue!r} to max {max_count}")
        self.backend.update(self.name, new, self.region)
        self._follow("UPDATE", progress, poll_seconds)
        write_atomically(self.config_file, config_text(self.name, new))
        resized = next(q for q in new["Scheduling"]["SlurmQueues"] if q["Name"] == queue)
        return ResizeResult(self.name, queue, tuple(ComputeResourceSize(r["Name"], r["MinCount"], r["MaxCount"])
                                                    for r in resized["ComputeResources"]))

    def plan_node_action(self, action: NodeAction, names: list[str]) -> NodeActionPlan:
        raise cannot_act_on_nodes(self.name, "ParallelCluster", action,
                                  "on its head node, mark the node DOWN (scontrol update NodeName=NODE State=DOWN "
                                  "Reason=...): clustermgtd replaces a DOWN static node within a minute")

    def act_on_nodes(self, plan: NodeActionPlan, progress: Progress = quiet) -> tuple[str, ...]:
        raise cannot_act_on_nodes(self.name, "ParallelCluster", plan.action, "see `clusterkit replace-node --help`")

    def deletion(self) -> DeletionPlan:
        """The stack and its instances go; storage ParallelCluster created goes only when its DeletionPolicy
        is Delete (clusterkit writes Retain unless the spec says otherwise); storage the cluster only
        mounted stays. The prerequisites stack goes when this cluster's create made it and nothing else
        uses it; its database then leaves a final snapshot and its password secret."""
        try:
            fates = storage_fates(self.config())
        except (OSError, ValueError, AttributeError):
            fates = []
        stack = (f"CloudFormation stack {self.stack_name} in {self.region}: "
                 "the head node, every compute node, their root volumes and the cluster's network resources")
        lost = tuple(str(fate) for fate in fates if not fate.kept)
        deletes, keeps = [stack, *lost], [str(fate) for fate in fates if fate.kept]
        prerequisites = self.state.prerequisites
        if prerequisites:
            reason = self._prerequisites_kept_because(prerequisites, fates)
            deletes_or_keeps = keeps if reason else deletes
            deletes_or_keeps.append(_prerequisites_words(prerequisites, reason))
            if not reason and prerequisites.database:
                keeps.append("the accounting database's final snapshot (DeletionPolicy Snapshot) and its password "
                             "secret in Secrets Manager (Retain)")
        return DeletionPlan(self.name, tuple(deletes), tuple(keeps), confirm=True, storage_deleted=lost)

    def _prerequisites_kept_because(self, prerequisites: KeptStack, fates: list[StorageFate] | None = None,
                                    live: bool = False) -> str:
        """Why the prerequisites stack stays ('' when it goes). `live`: ask AWS what still uses it (after the
        cluster's own stack is gone); else foresee it from this cluster's kept storage."""
        stack = prerequisites.stack
        if not prerequisites.created:
            return "made earlier for another cluster"
        others = sorted(record.name for record in registry.all_records() if record.name != self.name
                        and record.provider == PROVIDER and _stack_of(record) == stack)
        if others:
            return f"cluster {', '.join(others)} uses it too"
        if live:
            return stacks.kept_because(self.aws, stack, self.name)
        kept = [fate for fate in fates or [] if fate.kept and ": not made by this cluster" not in fate.reason]
        if kept and prerequisites.network:
            return f"the kept {kept[0].description} lives in its network"
        return ""

    def delete(self, progress: Progress = quiet, poll_seconds: float | None = None) -> None:
        """Delete the cluster (its stack, and storage ParallelCluster created with DeletionPolicy Delete), then the
        prerequisites stack when this cluster made it and nothing else uses it."""
        if self.state.stack_id and self.backend.describe(self.name, self.region) is not None:
            progress(f"deleting cluster {self.name!r} in {self.region}")
            self.backend.delete(self.name, self.region)
            self._follow("DELETE", progress, poll_seconds)
        prerequisites = self.state.prerequisites
        if prerequisites:
            reason = self._prerequisites_kept_because(prerequisites, live=True)
            if reason:
                progress(f"keeping {_prerequisites_words(prerequisites, reason)}")
            else:
                stacks.delete(self.aws, prerequisites.stack, progress,
                              POLL_SECONDS if poll_seconds is None else poll_seconds)
        registry.remove(self.name)
        shutil.rmtree(self.config_file.parent, ignore_errors=True)


def _stack_of(record: registry.ClusterRecord[JsonObject]) -> str | None:
    """The prerequisites stack another AWS cluster's record names."""
    kept = AwsClusterState.from_json(record.details).prerequisites
    return kept.stack if kept else None


def _prerequisites_words(prerequisites: KeptStack, kept_because: str) -> str:
    stack = f"prerequisites stack {prerequisites.stack}"
    if not kept_because:
        return f"{stack}: its network and NAT gateway, or its database (after a final snapshot)"
    cost = sum(prerequisites.cost_per_hour.values())
    costs = f"; it costs about ${cost:.2f}/h while it exists" if cost else ""
    return f"{stack} ({kept_because}{costs}; delete it in CloudFormation once nothing uses it)"

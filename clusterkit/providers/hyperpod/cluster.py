"""SageMaker HyperPod clusters: the `hyperpod` provider and the clusters it manages.

    provider = HyperPodProvider()
    plan = provider.plan(ClusterRequest(name="train", provider="hyperpod", preset="p5", subnet_id="subnet-...",
                                        execution_role="arn:aws:iam::111122223333:role/hyperpod"))
    plan.details.request           # the exact keyword arguments of boto3's sagemaker.create_cluster, checked offline
    plan.details.file_system_request  # fsx.create_file_system's, for a new FSx for Lustre (None: none), checked too
    plan = provider.prepare(plan)  # the caller, the subnets' VPC, the file system's names, the lifecycle bucket
    cluster = provider.apply(plan) # the nodes' security group, the new file system, the lifecycle set, CreateCluster
    cluster.describe(); cluster.resize("train", 8); cluster.replace_nodes(["i-..."]); cluster.delete()
    cluster.reboot_nodes(["i-..."])
    cluster.slurm()                # Slurm on its controller, over SSH through SSM Session Manager

Without --subnet-id the nodes go into clusterkit's prerequisites network (the ParallelCluster provider's stack,
network only): one made earlier in the region whose zone offers every instance type, else a new one, which
`delete-cluster` deletes with the cluster whose create made it once nothing else uses it. A new FSx for Lustre file
system goes into the nodes' first subnet and security group; it outlives the cluster unless its deletion_policy is
Delete (as storage the ParallelCluster provider makes). Jobs are submitted from elsewhere through the controller node,
reached over SSH through SSM Session Manager (see `controller`); their runs go on the FSx for Lustre file system.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from clusterkit import registry
from clusterkit.cluster.loader import load_spec_data
from clusterkit.cluster.node_scripts import lifecycle_scripts, set_digest
from clusterkit.cluster.plan import spec_data
from clusterkit.cluster.prerequisites import Prerequisites
from clusterkit.cluster.render import PLACEHOLDER_SUBNET
from clusterkit.cluster.spec import DEFAULT_DELETION_POLICY
from clusterkit.errors import AlreadyExists, ClusterkitError, NotFound
from clusterkit.files import write_atomically
from clusterkit.findings import Finding, error, shorten
from clusterkit.providers.aws.access import Aws
from clusterkit.providers.aws.plan import KeptStack
from clusterkit.providers.aws.ssh import KNOWN_HOSTS_FILE
from clusterkit.providers.base import (
    ClusterInfo,
    ComputeResourceSize,
    DeletionPlan,
    InstanceInfo,
    NodeAction,
    NodeActionPlan,
    NodeRequest,
    Progress,
    ResizeResult,
    quiet,
)
from clusterkit.providers.hyperpod.controller import (
    CONTROLLER_USER,
    ControllerAccess,
    authorized_keys,
    controller_access,
    controller_group,
    planned_access,
)
from clusterkit.providers.hyperpod.plan import HyperPodClusterState, HyperPodPlanDetails, PreparedFacts
from clusterkit.providers.hyperpod.request import (
    CLUSTER_TAG,
    PARAMETERS_FILE,
    PLACEHOLDER_SECURITY_GROUP,
    HyperPodDraft,
    LustreNames,
    create_cluster_request,
    create_file_system_request,
    lifecycle_bucket,
    lifecycle_files,
    lifecycle_parameters,
    lifecycle_prefix,
    lustre_of,
    parameters_text,
)
from clusterkit.providers.plan import ClusterPlan, ClusterRequest, Option, refuse_foreign_options
from clusterkit.registry import JsonObject

if TYPE_CHECKING:
    from clusterkit.cluster.spec import ClusterSpec
    from clusterkit.providers.aws.resolve import NetworkChoice
    from clusterkit.slurm import Flavor, Slurm

PROVIDER = "hyperpod"
REQUEST_FILE = "create_cluster_request.json"
POLL_SECONDS = 30.0  # between looks at the cluster; tests lower it
NODES_PER_CALL = 25  # BatchReplaceClusterNodes and BatchRebootClusterNodes take at most 25 nodes a call
SECURITY_GROUP_NAME = "clusterkit-hyperpod-{name}"
NETWORK = Prerequisites(network=True, database=False)  # accounting lives on the controller (on_create.sh)
_NODE_ID_RE = re.compile(r"i-[a-f0-9]{8}(?:[a-f0-9]{9})?")  # botocore's ClusterNodeId
_SLURM_NAME_RE = re.compile(r"ip(?:-(?:25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})){4}")  # HyperPod's: ip- and the address
# What the lifecycle script accepts (on_create.sh checks them again): an FSx DNS name and a Lustre mount name.
_FSX_DNS_RE = re.compile(r"fs-[0-9a-f]{8,}\.fsx\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?")
_MOUNT_NAME_RE = re.compile(r"[A-Za-z0-9_]{1,8}")
_NODE_OPERATIONS = {NodeAction.REPLACE: "batch_replace_cluster_nodes", NodeAction.REBOOT: "batch_reboot_cluster_nodes"}
# HyperPod's ClusterStatus -> the provider-neutral status the CLI shows for every provider.
_STATUS = {"InService": "running", "Creating": "creating", "Updating": "updating", "SystemUpdating": "updating",
           "RollingBack": "updating", "Deleting": "deleting", "Failed": "failed"}


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class HyperPodProvider:
    """SageMaker HyperPod clusters with Slurm, from clusterkit's cluster specs and presets. `aws` is the edge (boto3);
    tests swap it."""

    name = PROVIDER
    options = (Option("preset", "--preset"), Option("spec_file", "--file"), Option("region", "--region"),
               Option("subnet_id", "--subnet-id"), Option("execution_role", "--execution-role"),
               Option("identity_file", "--identity-file"), Option("output_config", "--output-config"))

    def __init__(self, aws: Aws | None = None) -> None:
        self._aws = aws

    def _aws_for(self, region: str) -> Aws:
        if self._aws is None or self._aws.region != region:
            self._aws = Aws(region)
        return self._aws

    def plan(self, request: ClusterRequest) -> ClusterPlan[HyperPodPlanDetails]:
        """The CreateCluster request, HyperPod's findings and the lifecycle set, from the request alone."""
        refuse_foreign_options(self, request.given())
        overrides = {path: value for path, value in (("name", request.name), ("region", request.region),
                                                     ("subnet_id", request.subnet_id)) if value is not None}
        spec, findings = load_spec_data(spec_data(request.preset, request.spec_file, overrides))
        if spec is None:
            return ClusterPlan(PROVIDER, request.name, HyperPodPlanDetails(), tuple(findings))
        details, more = _details(spec, request.execution_role, identity_file=request.identity_file)
        if request.identity_file is not None:  # it goes on the ssh command line of every later verb
            from clusterkit.spec_reader import TextValue, control_character

            more += [found for found in (control_character(TextValue("identity_file", request.identity_file)),)
                     if found is not None]
        plan = ClusterPlan(PROVIDER, spec.name, details, tuple(findings + more))
        return plan.replace(files=_files(plan), actions=_actions(plan))

    def prepare(self, plan: ClusterPlan[HyperPodPlanDetails],
                progress: Progress = quiet) -> ClusterPlan[HyperPodPlanDetails]:
        """Ask the account, change nothing: the caller, the subnets' VPC, the file system's names, the bucket."""
        from clusterkit.providers.aws.access import check_caller

        spec = plan.details.spec
        if not plan.ok or spec is None:
            raise ClusterkitError("the cluster spec has errors", fix="run with --dry-run to see them")
        if registry.exists(plan.name):
            raise AlreadyExists(f"a cluster named {plan.name!r} already exists", fix=f"choose another --name, or "
                                f"delete it first with `clusterkit delete-cluster {plan.name}`")
        subnets = plan.details.request["VpcConfig"]["Subnets"]  # type: ignore[index,call-overload]
        aws = self._aws_for(spec.region)
        progress(f"checking AWS credentials for {aws.region}")
        caller = check_caller(aws)
        findings: list[Finding] = []
        network = None
        if PLACEHOLDER_SUBNET in subnets:
            network, spec = self._network(aws, plan, spec, findings, progress)
            subnets = [spec.subnet_id] if spec.subnet_id else []
        vpc_id = network.outputs.get("VpcId", "") if network and network.outputs else ""
        if subnets:
            progress(f"looking up subnets {', '.join(subnets)}")
            found = _call(aws, "ec2", "describe_subnets", SubnetIds=list(subnets))["Subnets"]
            vpcs = sorted({subnet["VpcId"] for subnet in found})
            if len(vpcs) != 1:
                findings.append(error("subnet_id", f"the subnets are in {len(vpcs)} VPCs", "give subnets of one VPC"))
            vpc_id = vpcs[0] if vpcs else ""
        dns_name = mount_name = ""
        names = None
        lustre = lustre_of(spec)
        if lustre is not None and lustre.file_system_id is not None:
            progress(f"looking up FSx for Lustre {lustre.file_system_id}")
            system = _call(aws, "fsx", "describe_file_systems",
                           FileSystemIds=[lustre.file_system_id])["FileSystems"][0]
            dns_name = system.get("DNSName") or ""
            mount_name = (system.get("LustreConfiguration") or {}).get("MountName") or ""
            names = LustreNames(lustre.file_system_id, dns_name, mount_name)
            if not dns_name or not mount_name:
                findings.append(error("storage.lustre[0].file_system_id", "FSx reports no DNS or mount name for it",
                                      "wait until the file system is AVAILABLE", lustre.file_system_id))
            elif not _lustre_names_fit(names):
                findings.append(error("storage.lustre[0].file_system_id", "FSx reports a DNS name "
                                      f"{shorten(dns_name)!r} and mount name {shorten(mount_name)!r} the lifecycle "
                                      "script would refuse",
                                      "check the file system in the FSx console", lustre.file_system_id))
            if network is not None and system.get("VpcId") != vpc_id:
                findings.append(error("storage.lustre[0].file_system_id", f"the file system is in "
                                      f"{system.get('VpcId') or 'another VPC'}, not in clusterkit's prerequisites "
                                      "network, whose nodes could not mount it",
                                      "give --subnet-id: a private subnet of the file system's VPC",
                                      lustre.file_system_id))
        bucket = lifecycle_bucket(spec, plan.details.execution_role)
        create_bucket = _bucket_missing(aws, bucket, caller["account"])
        details, more = _details(spec, plan.details.execution_role, names, plan.details.identity_file)
        details = dataclasses.replace(details, prepared=PreparedFacts(
            account=caller["account"], caller=caller["arn"], vpc_id=vpc_id, create_bucket=create_bucket,
            lustre_dns_name=dns_name or None, network_stack=network.stack if network else None,
            network_zone=network.zone if network else None,
            create_network=network is not None and network.outputs is None))
        prepared = plan.replace(details=details, findings=tuple(more + findings))
        return prepared.replace(files=_files(prepared), actions=_actions(prepared))

    def _network(self, aws: Aws, plan: ClusterPlan[HyperPodPlanDetails], spec: ClusterSpec, findings: list[Finding],
                 progress: Progress) -> tuple[NetworkChoice | None, ClusterSpec]:
        """clusterkit's prerequisites network for a spec that names no subnet, chosen as a ParallelCluster create
        chooses it (a stack made earlier whose zone offers every instance type, else a new one); with a stack made
        earlier, the spec gets its private subnet."""
        from clusterkit.providers.aws.resolve import network_for

        groups = plan.details.request["InstanceGroups"]  # type: ignore[index,call-overload]
        types = sorted({str(group["InstanceType"]).removeprefix("ml.") for group in groups})  # type: ignore[index]
        progress(f"choosing clusterkit's prerequisites network in {aws.region} for {', '.join(types)}")
        choice = network_for(aws, types, plan.name)
        if choice is None:
            findings.append(error("subnet_id", f"no Availability Zone of {aws.region} offers every instance type of "
                                  f"the cluster ({', '.join(types)})", "give --subnet-id, or use another region"))
            return None, spec
        if choice.outputs is None:
            return choice, spec
        return choice, dataclasses.replace(spec, subnet_id=choice.outputs["PrivateSubnetId"])

    def apply(self, plan: ClusterPlan[HyperPodPlanDetails], progress: Progress = quiet,
              poll_seconds: float | None = None) -> HyperPodCluster:
        """Make the network (when it is clusterkit's own), the nodes' security group and a new FSx for Lustre file
        system (followed to AVAILABLE, its names then in the lifecycle set), upload the lifecycle set, create the
        cluster and follow it to InService. The record is saved before anything is made and names each thing as soon
        as it exists, so `delete-cluster` finds what a failed create made."""
        from clusterkit.providers.aws.uploads import put_objects

        details, prepared = plan.details, plan.details.prepared
        if prepared is None or not plan.ok or details.request is None or details.spec is None:
            raise ClusterkitError(f"cluster {plan.name!r} was not prepared against AWS, or did not pass",
                                  fix="prepare the plan first (provider.prepare(plan)) and fix its findings")
        aws = self._aws_for(details.spec.region)
        directory = registry.cluster_dir(plan.name)
        directory.mkdir(parents=True, exist_ok=True)
        objects = _lifecycle_objects(plan)
        lustre = lustre_of(details.spec)
        state = HyperPodClusterState(region=aws.region, request_file=str(directory / REQUEST_FILE),
                                     lustre_file_system_id=lustre.file_system_id if lustre else None,
                                     lustre_deletion_policy=(lustre and lustre.deletion_policy) or
                                     DEFAULT_DELETION_POLICY,
                                     lifecycle_uri=details.lifecycle_uri, queues=_queues(details.spec),
                                     identity_file=details.identity_file)
        record = registry.ClusterRecord(name=plan.name, provider=PROVIDER, created=_now(), details=state)
        registry.save(record)  # from here on, `delete-cluster` can remove what the create made
        vpc_id = prepared.vpc_id
        subnets = list(details.request["VpcConfig"]["Subnets"])  # type: ignore[index,call-overload]
        if prepared.network_stack:
            outputs = self._make_network(aws, plan.name, prepared, progress, poll_seconds)
            state.prerequisites = KeptStack(prepared.network_stack, created=prepared.create_network, network=True,
                                            cost_per_hour=NETWORK.cost_per_hour())
            registry.save(record)
            vpc_id, subnets = outputs["VpcId"], [outputs["PrivateSubnetId"]]
        group_name = SECURITY_GROUP_NAME.format(name=plan.name)
        progress(f"creating security group {group_name} in {vpc_id}")
        group = _call(aws, "ec2", "create_security_group", GroupName=group_name, VpcId=vpc_id,
                      Description=f"clusterkit HyperPod cluster {plan.name}: all traffic among its nodes (EFA)",
                      TagSpecifications=[{"ResourceType": "security-group",
                                          "Tags": [{"Key": CLUSTER_TAG, "Value": plan.name}]}])["GroupId"]
        state.security_group_id = group
        registry.save(record)
        # All traffic within the group: EFA's, and FSx for Lustre's (TCP 988 and 1018-1023) between the nodes and the
        # file system's network interfaces, which a new file system gets in this group.
        _call(aws, "ec2", "authorize_security_group_ingress", GroupId=group,
              IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]}])
        if details.file_system_request is not None:
            names = _make_file_system(aws, record, {**details.file_system_request, "SubnetIds": subnets[:1],
                                                    "SecurityGroupIds": [group]}, progress, poll_seconds)
            details = _details(details.spec, details.execution_role, names, details.identity_file)[0]
            state.lifecycle_uri = details.lifecycle_uri
            registry.save(record)
            objects = _lifecycle_objects(plan.replace(details=details, files=_files(plan.replace(details=details))))
        bucket = str(details.lifecycle_uri).split("/")[2]
        put_objects(aws, bucket, prepared.account, objects, prepared.create_bucket, progress)
        request = {**details.request, "VpcConfig": {"SecurityGroupIds": [group], "Subnets": subnets}}
        write_atomically(Path(state.request_file), json.dumps(request, indent=2) + "\n")
        progress(f"creating HyperPod cluster {plan.name!r} in {aws.region}")
        state.cluster_arn = _call(aws, "sagemaker", "create_cluster", **request)["ClusterArn"]
        registry.save(record)
        cluster = HyperPodCluster(record, aws=aws)
        cluster.follow("InService", progress, poll_seconds)
        return cluster

    @staticmethod
    def _make_network(aws: Aws, name: str, prepared: PreparedFacts, progress: Progress,
                      poll_seconds: float | None) -> dict[str, str]:
        """The prerequisites stack's outputs: made now (network only, in the chosen zone), or read from the one made
        earlier."""
        from clusterkit.cluster.prerequisites import template_text
        from clusterkit.providers.aws import prerequisites as stacks

        stack = str(prepared.network_stack)
        if not prepared.create_network:
            return stacks.outputs(aws, stack)
        return stacks.create(aws, stack, template_text(NETWORK, name), {"AvailabilityZone": str(prepared.network_zone)},
                             name, progress, POLL_SECONDS if poll_seconds is None else poll_seconds)

    def read_state(self, record: registry.ClusterRecord[JsonObject]) -> registry.ClusterRecord[HyperPodClusterState]:
        return registry.ClusterRecord(record.name, record.provider, record.created,
                                      HyperPodClusterState.from_json(record.details))

    def open(self, record: registry.ClusterRecord[HyperPodClusterState]) -> HyperPodCluster:
        return HyperPodCluster(record, aws=self._aws)


def _details(spec: ClusterSpec, execution_role: str | None, names: LustreNames | None = None,
             identity_file: str | None = None) -> tuple[HyperPodPlanDetails, list[Finding]]:
    """The requests, the lifecycle set and HyperPod's findings for a spec (with the file system's names once known,
    and the public key of the identity file given). A new file system goes into the cluster's first subnet (a
    placeholder until the network is known)."""
    from clusterkit.providers.hyperpod.rules import check  # lazy: the rules read botocore's model

    keys, key_findings = authorized_keys(identity_file)
    parameters = lifecycle_parameters(spec, names, keys)
    bucket = lifecycle_bucket(spec, execution_role)
    files = lifecycle_files(parameters)
    prefix = lifecycle_prefix(bucket, files)
    request = create_cluster_request(spec, execution_role, prefix)
    subnets: list = request["VpcConfig"]["Subnets"]  # type: ignore[index,call-overload,assignment]
    file_system = create_file_system_request(spec, subnets[0])
    findings = check(HyperPodDraft(spec, execution_role, request, bucket, file_system)) + key_findings
    shipped = {name: str(path) for name, path in lifecycle_scripts().items()}
    parameters_file = str(registry.cluster_dir(spec.name) / PARAMETERS_FILE)
    uploads = {prefix + name: shipped.get(name, parameters_file) for name in sorted(files)}
    return HyperPodPlanDetails(spec=spec, region=spec.region, request=request, lifecycle_uri=prefix, uploads=uploads,
                               execution_role=execution_role, parameters_text=parameters_text(parameters),
                               file_system_request=file_system, identity_file=identity_file), findings


def _lifecycle_objects(plan: ClusterPlan[HyperPodPlanDetails]) -> dict[str, bytes]:
    """The lifecycle set to upload (s3:// URL -> bytes), its parameters file written first; refused when the set is
    not the one the plan's prefix names (a shipped script changed since the plan was made)."""
    for path, text in plan.files.items():
        write_atomically(Path(path), text)
    objects = {url: Path(path).read_bytes() for url, path in plan.details.uploads.items()}
    if f"/sha256-{set_digest({url.rsplit('/', 1)[-1]: data for url, data in objects.items()})}/" \
            not in str(plan.details.lifecycle_uri):
        raise ClusterkitError("the lifecycle files changed since the plan was made", fix="plan again")
    return objects


def _make_file_system(aws: Aws, record: registry.ClusterRecord[HyperPodClusterState], request: JsonObject,
                      progress: Progress, poll_seconds: float | None) -> LustreNames:
    """Create the new FSx for Lustre file system, name it in the record at once (a later failure leaves it where
    `delete-cluster` finds it), and follow it to AVAILABLE."""
    lustre: dict = request["LustreConfiguration"]  # type: ignore[assignment]
    progress(f"creating FSx for Lustre ({request['StorageCapacity']} GiB {lustre['DeploymentType']}) in "
             f"{', '.join(request['SubnetIds'])}")  # type: ignore[arg-type]
    system = _call(aws, "fsx", "create_file_system", **request)["FileSystem"]
    record.details.lustre_file_system_id = str(system["FileSystemId"])
    record.details.lustre_created = True
    registry.save(record)
    return _follow_file_system(aws, record.name, record.details.lustre_file_system_id, progress, poll_seconds)


def _follow_file_system(aws: Aws, cluster: str, file_system_id: str, progress: Progress,
                        poll_seconds: float | None) -> LustreNames:
    """Poll the file system until it is AVAILABLE, saying each change of its lifecycle; any lifecycle but CREATING
    and UPDATING on the way is one line with FSx's reason. Its names are checked as the lifecycle script checks
    them."""
    poll = POLL_SECONDS if poll_seconds is None else poll_seconds
    said = ""
    while True:
        found = _call(aws, "fsx", "describe_file_systems", FileSystemIds=[file_system_id])["FileSystems"]
        system = found[0] if found else {"Lifecycle": "gone", "FailureDetails": {"Message": "FSx no longer has it"}}
        lifecycle = str(system.get("Lifecycle") or "?")
        if lifecycle != said:
            progress(f"FSx for Lustre {file_system_id}: {lifecycle}")
            said = lifecycle
        if lifecycle == "AVAILABLE":
            break
        if lifecycle not in ("CREATING", "UPDATING"):
            reason = " ".join(str((system.get("FailureDetails") or {}).get("Message") or "FSx gave no reason").split())
            raise ClusterkitError(f"FSx for Lustre {file_system_id} of cluster {cluster!r} is {lifecycle}: "
                                  f"{shorten(reason, 500)}",
                                  fix=f"`clusterkit delete-cluster {cluster}` removes what the create made and says "
                                      "what it keeps; delete the file system with `aws fsx delete-file-system "
                                      f"--file-system-id {file_system_id}`")
        time.sleep(poll)
    names = LustreNames(file_system_id, str(system.get("DNSName") or ""),
                        str((system.get("LustreConfiguration") or {}).get("MountName") or ""))
    if not _lustre_names_fit(names):
        raise ClusterkitError(f"FSx for Lustre {file_system_id} gave a DNS name {shorten(names.dns_name)!r} and mount "
                              f"name {shorten(names.mount_name)!r} the lifecycle script would refuse",
                              fix=f"check the file system in the FSx console; `clusterkit delete-cluster {cluster}` "
                                  "removes what the create made")
    return names


def _lustre_names_fit(names: LustreNames) -> bool:
    """Whether the lifecycle script takes the names (on_create.sh checks them again on every node)."""
    return bool(_FSX_DNS_RE.fullmatch(names.dns_name) and _MOUNT_NAME_RE.fullmatch(names.mount_name))


def _files(plan: ClusterPlan[HyperPodPlanDetails]) -> dict[str, str]:
    text = plan.details.parameters_text
    return {str(registry.cluster_dir(plan.name) / PARAMETERS_FILE): text} if text is not None else {}


def _actions(plan: ClusterPlan[HyperPodPlanDetails]) -> tuple[str, ...]:
    details, prepared = plan.details, plan.details.prepared
    uploads = tuple(f"upload {url.rsplit('/', 1)[-1]} to {url}" for url in details.uploads)
    placeholder = PLACEHOLDER_SUBNET in (details.request or {}).get("VpcConfig", {}).get(  # type: ignore[union-attr]
        "Subnets", [])
    if prepared is None:
        asked = (f"check the AWS caller (sts get-caller-identity) in {details.region}",
                 *(("choose clusterkit's prerequisites network: a prerequisites stack made earlier in the region whose "
                    "zone offers every instance type, else a new one (VPC, NAT gateway, private subnet) in the first "
                    "such zone",) if placeholder else ()),
                 "look up the subnets' VPC (ec2 describe-subnets)" + (
                     " and the FSx for Lustre file system's DNS and mount names (fsx describe-file-systems)"
                     if details.spec is not None and lustre_of(details.spec) is not None
                     and details.file_system_request is None else "") + ", and whether the lifecycle bucket exists")
        group = "create the nodes' security group in the subnets' VPC (all traffic within itself)"
        network: tuple[str, ...] = ()
    else:
        bucket = str(details.lifecycle_uri).split("/")[2]
        asked = (f"create S3 bucket {bucket} (private)",) if prepared.create_bucket else ()
        network = ((f"create clusterkit's prerequisites stack {prepared.network_stack} (a VPC, a NAT gateway, a "
                    f"private subnet in {prepared.network_zone}), follow it, and put its private subnet in "
                    "VpcConfig.Subnets",) if prepared.create_network else ())
        group = (f"create security group {SECURITY_GROUP_NAME.format(name=plan.name)} in "
                 f"{prepared.vpc_id or 'its VPC'} (all traffic within itself) and put its id in "
                 "VpcConfig.SecurityGroupIds")
    file_system: tuple[str, ...] = ()
    if details.file_system_request is not None:
        file_system = ("call fsx create_file_system with create_file_system_request (in the cluster's first subnet "
                       "and the nodes' security group), name the file system in the cluster's record, follow it to "
                       "AVAILABLE, and put its id, DNS and mount names in clusterkit-lifecycle.json (the lifecycle "
                       "prefix's hash, and so each SourceS3Uri, changes with them)",)
    access = planned_access(str(details.region), details.identity_file) if details.region else None
    reach = (f"submit jobs from here through the controller: ssh {access['ssh']} with ProxyCommand "
             f"{access['proxy_command']} (SSM Session Manager; the ids are known once the cluster exists)",) \
        if access else ()
    return (*asked, *network, group, *file_system, *uploads,
            f"call sagemaker create_cluster with create_cluster_request and follow cluster {plan.name} to InService",
            *reach)


def _bucket_missing(aws: Aws, bucket: str, account: str) -> bool:
    """Whether the lifecycle bucket must be made; a bucket of another account is refused."""
    from botocore.exceptions import ClientError

    from clusterkit.providers.aws.access import call

    try:
        call(aws, "s3", "head_bucket", Bucket=bucket, ExpectedBucketOwner=account)
    except ClientError as failure:
        code = str(failure.response.get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchBucket", "NotFound"):
            return True
        raise ClusterkitError(f"S3 bucket {bucket} is not this account's ({code})",
                              fix="name a bucket of yours in scripts_bucket (sagemaker-...)") from None
    return False


def _queues(spec: ClusterSpec) -> dict[str, list[str]]:
    return {queue.name: [compute.instance_type for compute in queue.compute] for queue in spec.queues}


def _call(aws: Aws, service: str, operation: str, **params: object) -> dict:
    """An AWS call whose refusal is one line naming the service, the operation and AWS's reason."""
    from botocore.exceptions import ClientError

    from clusterkit.providers.aws.access import call

    try:
        return call(aws, service, operation, **params)
    except ClientError as failure:
        reason = failure.response.get("Error", {})
        who = {"sagemaker": "SageMaker", "ec2": "EC2", "fsx": "FSx"}.get(service, service)
        raise ClusterkitError(f"{who} refused {failure.operation_name} in {aws.region}: "
                              f"{reason.get('Code', '?')}: {reason.get('Message', '')}".strip(),
                              fix="see the reason; nothing else was changed by this call") from None


class HyperPodCluster:
    """A HyperPod cluster known to the registry."""

    def __init__(self, record: registry.ClusterRecord[HyperPodClusterState], aws: Aws | None = None) -> None:
        if record.provider != PROVIDER:
            raise ClusterkitError(f"cluster {record.name!r} is a {record.provider} cluster, not a HyperPod one")
        self.record = record
        self.state = record.details
        self._aws = aws

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def aws(self) -> Aws:
        if self._aws is None or self._aws.region != self.state.region:
            self._aws = Aws(self.state.region)
        return self._aws

    def _described(self) -> dict | None:
        """DescribeCluster's answer; None when the cluster is gone."""
        from botocore.exceptions import ClientError

        from clusterkit.providers.aws.access import call

        try:
            return call(self.aws, "sagemaker", "describe_cluster", ClusterName=self.name)
        except ClientError as failure:
            reason = failure.response.get("Error", {})
            # ResourceNotFound; some SageMaker answers (and moto's) say ValidationException "Could not find ...".
            if reason.get("Code") == "ResourceNotFound" or (
                    reason.get("Code") == "ValidationException" and "Could not find" in str(reason.get("Message"))):
                return None
            raise

    def follow(self, wanted: str | None, progress: Progress = quiet, poll_seconds: float | None = None) -> None:
        """Poll until the cluster's status is `wanted` (or it is gone, when `wanted` is None), saying each change;
        a Failed cluster is one line with SageMaker's reason."""
        poll = POLL_SECONDS if poll_seconds is None else poll_seconds
        said: str | None = ""  # nothing said yet ("" is no status)
        while True:
            found = self._described()
            status = None if found is None else found.get("ClusterStatus")
            if status != said:
                progress(f"cluster {self.name!r}: {status or 'deleted'}")
                said = status
            if status == wanted:
                return
            if status == "Failed":
                reason = (found or {}).get("FailureMessage") or "SageMaker gave no reason"
                raise ClusterkitError(f"HyperPod cluster {self.name!r} failed: {reason}",
                                      fix=f"remove it with `clusterkit delete-cluster {self.name}`")
            if status is None and wanted is not None:
                raise NotFound(f"HyperPod cluster {self.name!r} is gone from {self.state.region}",
                               fix=f"remove it here with `clusterkit delete-cluster {self.name}`")
            time.sleep(poll)

    def nodes(self) -> tuple[InstanceInfo, ...]:
        groups = {group["InstanceGroupName"]: group for group in self._request()["InstanceGroups"]}
        found, token = [], None
        while True:
            page = _call(self.aws, "sagemaker", "list_cluster_nodes", ClusterName=self.name,
                         **({"NextToken": token} if token else {}))
            for node in page.get("ClusterNodeSummaries", []):
                slurm = groups.get(node["InstanceGroupName"], {}).get("SlurmConfig", {})
                partitions = slurm.get("PartitionNames") or [None]
                found.append(InstanceInfo(name=node["InstanceId"], node_type=slurm.get("NodeType", "?"),
                                          queue=partitions[0], instance_type=node["InstanceType"],
                                          state=node.get("InstanceStatus", {}).get("Status", "?"), private_ip=None))
            token = page.get("NextToken")
            if not token:
                return tuple(found)

    def describe(self) -> ClusterInfo:
        found = self._described()
        details: JsonObject = {"region": self.state.region, "cluster_arn": self.state.cluster_arn,
                               "security_group": self.state.security_group_id}
        if found is None:
            return ClusterInfo(self.name, PROVIDER, "gone", self.record.created, details=details)
        status = found.get("ClusterStatus", "")
        where = f"in {self.state.region}"
        try:
            access = self.controller()
        except ClusterkitError as error:  # describe still shows the cluster, and why it cannot be reached
            reach: JsonObject = {"unreachable": error.message}
        else:
            reach = access.to_dict()
            where += f"; controller {access.instance_id} through SSM (ssh {access.ssh.destination})"
        return ClusterInfo(self.name, PROVIDER, _STATUS.get(status, status.lower()), self.record.created,
                           self.nodes(), details={**details, "cluster_status": status, "controller": reach},
                           where=where)

    def controller(self) -> ControllerAccess:
        """The controller node and how SSH reaches it through SSM, asked of ListClusterNodes each time (HyperPod may
        have replaced the node since)."""
        try:
            request = self._request()
        except (OSError, ValueError) as failure:
            raise ClusterkitError(f"the cluster's CreateCluster request {self.state.request_file} cannot be read: "
                                  f"{getattr(failure, 'strerror', None) or failure}",
                                  fix="it is written at create; create the cluster again if it is lost") from None
        group = controller_group(request)
        nodes, token = [], None
        while True:
            page = _call(self.aws, "sagemaker", "list_cluster_nodes", ClusterName=self.name,
                         InstanceGroupNameContains=group, **({"NextToken": token} if token else {}))
            nodes += page.get("ClusterNodeSummaries", [])
            token = page.get("NextToken")
            if not token:
                break
        return controller_access(self.state.cluster_arn, group, nodes, region=self.state.region,
                                 identity_file=self.state.identity_file,
                                 known_hosts_file=str(registry.cluster_dir(self.name) / KNOWN_HOSTS_FILE))

    def slurm(self) -> Slurm:
        """Slurm on the controller, over SSH through SSM Session Manager."""
        from clusterkit.providers.aws.ssh import slurm_over_ssh

        return slurm_over_ssh(lambda: self.controller().ssh,
                              f"jobs on HyperPod cluster {self.name!r} are submitted through its controller, which "
                              "clusterkit cannot reach", "or run clusterkit on the controller with --cluster host")

    def flavor(self) -> Flavor:
        from clusterkit.slurm import Flavor

        return Flavor.HYPERPOD

    def runs_dir(self) -> str:
        """Runs submitted from elsewhere go on the FSx for Lustre file system, which every node mounts (HyperPod's
        nodes share no home directory)."""
        lustre = self._parameters().get("lustre")
        if not isinstance(lustre, dict) or not lustre.get("mount_dir"):
            raise ClusterkitError(f"HyperPod cluster {self.name!r} mounts no FSx for Lustre file system, where runs "
                                  "submitted from elsewhere go", fix="give the job a workdir on storage every node "
                                  "mounts, or run clusterkit on the controller (--cluster host)")
        return f"{lustre['mount_dir']}/clusterkit-runs/{CONTROLLER_USER}"

    def python(self) -> str:
        """The Python of the virtualenv the lifecycle script installs clusterkit into (python3 when it does not)."""
        installed = self._parameters().get("clusterkit")
        return f"{installed['venv']}/bin/python" if isinstance(installed, dict) and installed.get("venv") else "python3"

    def _parameters(self) -> JsonObject:
        """The cluster's clusterkit-lifecycle.json, as create uploaded it; empty when it cannot be read."""
        try:
            found = json.loads((registry.cluster_dir(self.name) / PARAMETERS_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}

    def queues(self) -> dict[str, list[str]]:
        return {queue: list(types) for queue, types in self.state.queues.items()}

    def replacing(self) -> tuple[str, ...]:
        return ()

    def _request(self) -> JsonObject:
        return json.loads(Path(self.state.request_file).read_text())

    def resize(self, queue: str, max_count: int, min_count: int | None = None, compute_resource: str | None = None,
               progress: Progress = quiet, poll_seconds: float | None = None) -> ResizeResult:
        """Set a queue's instance group to `max_count` nodes (UpdateCluster); HyperPod has no dynamic nodes."""
        if max_count < 0 or (min_count is not None and min_count != max_count):
            raise ClusterkitError(f"invalid size for HyperPod: --min-count {min_count} --max-count {max_count}",
                                  fix="HyperPod runs every node all the time: give --max-count only (0 or more)")
        request = self._request()
        groups = [group for group in request["InstanceGroups"]  # type: ignore[union-attr]
                  if queue in (group.get("SlurmConfig", {}).get("PartitionNames") or [])]  # type: ignore[union-attr]
        if not groups:
            raise NotFound(f"no queue {queue!r}", fix=f"queues: {', '.join(self.state.queues)}")
        names = [str(group["InstanceGroupName"])[len(queue) + 1:] for group in groups]  # type: ignore[index]
        if compute_resource is not None:
            groups = [group for group, name in zip(groups, names) if name == compute_resource]
        if len(groups) != 1:
            raise ClusterkitError(f"queue {queue!r} has {'several' if groups else 'no such'} compute resource(s)",
                                  fix=f"name one with --compute-resource: {', '.join(names)}")
        group = {**groups[0], "InstanceCount": max_count}  # type: ignore[dict-item]
        progress(f"updating HyperPod cluster {self.name!r}: instance group {group['InstanceGroupName']} to {max_count}")
        _call(self.aws, "sagemaker", "update_cluster", ClusterName=self.name, InstanceGroups=[group])
        self.follow("InService", progress, poll_seconds)
        groups[0]["InstanceCount"] = max_count  # type: ignore[index]
        write_atomically(Path(self.state.request_file), json.dumps(request, indent=2) + "\n")
        return ResizeResult(self.name, queue, (ComputeResourceSize(str(group["InstanceGroupName"]), max_count,
                                                                   max_count),))

    def replace_nodes(self, node_ids: list[str], progress: Progress = quiet) -> tuple[str, ...]:
        """Ask HyperPod to replace these nodes (new instances; their volumes are lost), at most 25 a call; returns
        the ids being replaced, and fails in one line naming those refused."""
        return self.act_on_nodes(self._node_plan(NodeAction.REPLACE, [(node, node) for node in node_ids]), progress)

    def reboot_nodes(self, node_ids: list[str], progress: Progress = quiet) -> tuple[str, ...]:
        """Ask HyperPod to reboot these nodes (the same instances and volumes), at most 25 a call."""
        return self.act_on_nodes(self._node_plan(NodeAction.REBOOT, [(node, node) for node in node_ids]), progress)

    def plan_node_action(self, action: NodeAction, names: list[str]) -> NodeActionPlan:
        """The BatchReplaceClusterNodes or BatchRebootClusterNodes requests for nodes named by Slurm name (ip-10-1-2-3,
        HyperPod's) or instance id; Slurm names are looked up in ListClusterNodes (and DescribeClusterNode where a
        listing has no host name). Every name is checked before SageMaker is asked anything."""
        wanted = list(dict.fromkeys(names))
        for name in wanted:
            if not (_NODE_ID_RE.fullmatch(name) or _SLURM_NAME_RE.fullmatch(name)):
                raise ClusterkitError(f"{shorten(name)!r} is not a node name of HyperPod cluster {self.name!r}",
                                      fix="give its Slurm name (ip-10-1-2-3, as sinfo shows it) or its instance id "
                                          "(i-..., as `clusterkit describe-cluster` lists it)")
        if not wanted:
            raise ClusterkitError(f"no node to {action.value}", fix="name one or more nodes")
        by_slurm_name = self._slurm_names() if any(_SLURM_NAME_RE.fullmatch(name) for name in wanted) else {}
        missing = [name for name in wanted if _SLURM_NAME_RE.fullmatch(name) and name not in by_slurm_name]
        if missing:
            raise NotFound(f"HyperPod cluster {self.name!r} has no node named {', '.join(missing)}",
                           fix=f"see its nodes with `clusterkit describe-cluster {self.name}` (or sinfo there)")
        return self._node_plan(action, [(name, by_slurm_name.get(name, name)) for name in wanted])

    def _node_plan(self, action: NodeAction, nodes: list[tuple[str, str]]) -> NodeActionPlan:
        malformed = [node_id for _, node_id in nodes if not _NODE_ID_RE.fullmatch(node_id)]
        if malformed or not nodes:
            raise ClusterkitError(f"not a HyperPod node id: {shorten(malformed[0])!r}" if malformed
                                  else f"no node to {action.value}",
                                  fix="give EC2 instance ids (i-...) as `clusterkit describe-cluster` lists them")
        operation = _NODE_OPERATIONS[action]
        ids = list(dict.fromkeys(node_id for _, node_id in nodes))
        requests = tuple(NodeRequest(operation, self.name, tuple(ids[start:start + NODES_PER_CALL]))
                         for start in range(0, len(ids), NODES_PER_CALL))
        return NodeActionPlan(self.name, action, tuple(nodes), requests)

    def _slurm_names(self) -> dict[str, str]:
        """Slurm name (HyperPod names a node ip-A-B-C-D after its address) -> instance id, of every node."""
        found: dict[str, str] = {}
        unnamed: list[str] = []
        token = None
        while True:
            page = _call(self.aws, "sagemaker", "list_cluster_nodes", ClusterName=self.name,
                         **({"NextToken": token} if token else {}))
            for node in page.get("ClusterNodeSummaries", []):
                host = str(node.get("PrivateDnsHostname") or "").split(".")[0]
                if host:
                    found[host] = node["InstanceId"]
                else:
                    unnamed.append(node["InstanceId"])
            token = page.get("NextToken")
            if not token:
                break
        for node_id in unnamed:
            if not _NODE_ID_RE.fullmatch(node_id):
                continue
            details = _call(self.aws, "sagemaker", "describe_cluster_node", ClusterName=self.name,
                            NodeId=node_id)["NodeDetails"]
            host = str(details.get("PrivateDnsHostname") or "").split(".")[0]
            address = str(details.get("PrivatePrimaryIp") or "")
            for name in (host, "ip-" + address.replace(".", "-") if address else ""):
                if name:
                    found[name] = node_id
        return found

    def act_on_nodes(self, plan: NodeActionPlan, progress: Progress = quiet) -> tuple[str, ...]:
        verb = plan.action.value
        done: list[str] = []
        refused: list[str] = []
        for request in plan.requests:
            progress(f"{verb.rstrip('e')}ing {len(request.node_ids)} node(s) of {self.name!r}: "
                     f"{', '.join(request.node_ids)}")
            answer = _call(self.aws, "sagemaker", request.operation, ClusterName=request.cluster_name,
                           NodeIds=list(request.node_ids))
            done += list(answer.get("Successful", []))
            refused += [f"{failed.get('NodeId')} ({failed.get('ErrorCode')}: {failed.get('Message')})"
                        for failed in answer.get("Failed", [])]
        if refused:
            raise ClusterkitError(f"HyperPod did not {verb} {len(refused)} node(s): {'; '.join(refused)}",
                                  fix="check the ids with `clusterkit describe-cluster`" +
                                      (f"; {len(done)} other(s) are being {verb.rstrip('e')}ed" if done else ""))
        return tuple(done)

    def _keeps_file_system(self) -> bool:
        """Whether a file system this cluster's create made outlives it (deletion_policy Retain, the default)."""
        return (self.state.lustre_created and self.state.lustre_file_system_id is not None
                and self.state.lustre_deletion_policy != "Delete")

    def deletion(self) -> DeletionPlan:
        deletes = [f"HyperPod cluster {self.name} in {self.state.region}: every node, its root and EBS volumes"]
        file_system, lost, kept_group = self.state.lustre_file_system_id, (), ""
        if self.state.security_group_id and self._keeps_file_system():
            kept_group = (f"security group {self.state.security_group_id} (the kept file system's network interfaces "
                          "are in it; delete it once the file system is gone)")
        elif self.state.security_group_id:
            deletes.append(f"security group {self.state.security_group_id} (made for its nodes)")
        if file_system and self.state.lustre_created and not self._keeps_file_system():
            lost = (f"FSx for Lustre {file_system} and every file on it (made by this cluster's create; "
                    "deletion_policy Delete)",)
            deletes.insert(1, lost[0])
        network = self.state.prerequisites
        if network is None:
            keeps = ["the subnets and their VPC (the network is not the cluster's)"]
        elif not network.created:
            keeps = [f"prerequisites stack {network.stack} (its network; made earlier, not by this cluster's create)"]
        else:
            others = self._others_using(network.stack)
            if others:
                keeps = [f"prerequisites stack {network.stack} (cluster {', '.join(others)} uses it too)"]
            elif self._keeps_file_system():
                keeps = [f"prerequisites stack {network.stack} (the kept file system is in its network)"]
            else:
                keeps = []
                deletes.append(f"prerequisites stack {network.stack}: its VPC, NAT gateway and subnets, made by this "
                               "cluster's create (kept if anything else is in its network by then)")
        if self._keeps_file_system():
            keeps[:0] = [f"FSx for Lustre {file_system} and every file on it (made by this cluster's create; "
                         f"deletion_policy {self.state.lustre_deletion_policy}: storage outlives the cluster)",
                         *([kept_group] if kept_group else [])]
        elif file_system and not self.state.lustre_created:
            keeps.insert(0, f"FSx for Lustre {file_system} and every file on it")
        if self.state.lifecycle_uri:
            keeps.append(f"the lifecycle scripts at {self.state.lifecycle_uri}")
        return DeletionPlan(self.name, tuple(deletes), tuple(keeps), confirm=True, storage_deleted=lost)

    def _delete_file_system(self, file_system: str, progress: Progress, poll_seconds: float | None) -> None:
        """Delete the file system this cluster's create made (deletion_policy Delete) and wait until it is gone, so
        that its network interfaces leave the nodes' security group."""
        poll = POLL_SECONDS if poll_seconds is None else poll_seconds
        if self._file_system_lifecycle(file_system) is None:
            return
        progress(f"deleting FSx for Lustre {file_system} (deletion_policy Delete)")
        _call(self.aws, "fsx", "delete_file_system", FileSystemId=file_system)
        said = ""
        while True:
            lifecycle = self._file_system_lifecycle(file_system)
            if lifecycle != said:
                progress(f"FSx for Lustre {file_system}: {lifecycle or 'deleted'}")
                said = lifecycle or ""
            if lifecycle is None:
                return
            time.sleep(poll)

    def _file_system_lifecycle(self, file_system: str) -> str | None:
        """The file system's lifecycle; None when it is gone."""
        from botocore.exceptions import ClientError

        from clusterkit.providers.aws.access import call

        try:
            found = call(self.aws, "fsx", "describe_file_systems", FileSystemIds=[file_system])["FileSystems"]
        except ClientError as failure:
            reason = failure.response.get("Error", {})
            if reason.get("Code") == "FileSystemNotFound":
                return None
            raise ClusterkitError(f"FSx refused DescribeFileSystems in {self.aws.region}: {reason.get('Code', '?')}: "
                                  f"{reason.get('Message', '')}".strip(),
                                  fix=f"retry `clusterkit delete-cluster {self.name}`") from None
        return str(found[0].get("Lifecycle") or "?") if found else None

    def _others_using(self, stack: str) -> list[str]:
        """Other clusters whose records name the prerequisites stack (HyperPod or ParallelCluster ones)."""
        from clusterkit.providers.aws.plan import AwsClusterState

        states = {"aws": AwsClusterState.from_json, PROVIDER: HyperPodClusterState.from_json}
        return sorted(record.name for record in registry.all_records() if record.name != self.name
                      and record.provider in states
                      and getattr(states[record.provider](record.details).prerequisites, "stack", None) == stack)

    def _network_kept_because(self, stack: str) -> str:
        """Why the prerequisites stack this create made stays once the cluster is gone ('' when it goes)."""
        from clusterkit.providers.aws import prerequisites as stacks

        others = self._others_using(stack)
        if others:
            return f"cluster {', '.join(others)} uses it too"
        if self._keeps_file_system():
            return f"FSx for Lustre {self.state.lustre_file_system_id}, kept, is in its network"
        return stacks.kept_because(self.aws, stack, self.name)

    def delete(self, progress: Progress = quiet, poll_seconds: float | None = None) -> None:
        from clusterkit.providers.aws.access import call

        if self.state.cluster_arn and self._described() is not None:
            progress(f"deleting HyperPod cluster {self.name!r} in {self.state.region}")
            _call(self.aws, "sagemaker", "delete_cluster", ClusterName=self.name)
            self.follow(None, progress, poll_seconds)
        file_system = self.state.lustre_file_system_id
        if file_system and self._keeps_file_system():
            progress(f"keeping FSx for Lustre {file_system} (deletion_policy {self.state.lustre_deletion_policy}) "
                     f"and security group {self.state.security_group_id}, which its network interfaces are in")
        elif file_system and self.state.lustre_created:
            self._delete_file_system(file_system, progress, poll_seconds)
        if self.state.security_group_id and not self._keeps_file_system():
            from botocore.exceptions import ClientError

            progress(f"deleting security group {self.state.security_group_id}")
            try:
                call(self.aws, "ec2", "delete_security_group", GroupId=self.state.security_group_id)
            except ClientError as failure:
                if failure.response.get("Error", {}).get("Code") != "InvalidGroup.NotFound":
                    raise ClusterkitError(f"security group {self.state.security_group_id} was not deleted: "
                                          f"{failure.response.get('Error', {}).get('Message', failure)}",
                                          fix=f"retry `clusterkit delete-cluster {self.name}` once the cluster's "
                                              "network interfaces are gone") from None
        network = self.state.prerequisites
        if network is not None and network.created:
            kept_because = self._network_kept_because(network.stack)
            if kept_because:
                progress(f"keeping prerequisites stack {network.stack} ({kept_because}; delete it in CloudFormation "
                         "once nothing uses it)")
            else:
                from clusterkit.providers.aws import prerequisites as stacks

                stacks.delete(self.aws, network.stack, progress, POLL_SECONDS if poll_seconds is None else poll_seconds)
        registry.remove(self.name)
        shutil.rmtree(registry.cluster_dir(self.name), ignore_errors=True)

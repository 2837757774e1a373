"""ParallelCluster 3.16's full validation, offline: its own dry run under moto, with moto's gaps filled.

`ParallelClusterWorld` is one mock AWS account (moto, in-process, fake keys) holding what cluster specs
name, per region: the default VPC's public subnets, a private subnet in every Availability Zone, an
ed25519 key pair, S3 buckets, a Secrets Manager secret, an EFS file system with mount targets, an
EBS volume, custom AMIs, and the AWS-managed IAM policies. `validate(name, config)` does what a real
create does before ParallelCluster's dry run (clusterkit's node scripts are uploaded), then runs that
dry run (`pcluster.lib.create_cluster(dryrun=True)`: the schema load and `config.validate()`).

moto 5.2 cannot hold some things ParallelCluster asks about. They are answered at the boto3 level
on the default session (whose clients pcluster uses), each with what AWS returns for it:
- the official ParallelCluster AMIs (Amazon-owned, 45 GiB root volume, one per OS and architecture),
  and the Architecture and root volume size of every image (moto leaves the first out and makes the
  second 15 GiB);
- the KeyType of a key pair (left out by moto; pcluster refuses RSA keys on ubuntu2204);
- RunInstances with DryRun (pcluster expects DryRunOperation);
- capacity reservations and Capacity Blocks (DescribeCapacityReservations is not implemented);
- a resource group of capacity reservations (moto finds groups by name only, and ListGroupResources
  is not implemented);
- the security groups of an EFS mount target (moto answers without them);
- a cluster placement group (DescribePlacementGroups is not implemented);
- an existing FSx for Lustre file system and an FSx for OpenZFS volume with their network interfaces
  (moto's FSx gives 8-character ids, no interfaces, and has no DescribeVolumes).
ParallelCluster's list of supported regions is read from its own resource file (it would download it).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from clusterkit.cluster.plan import script_uploads
from clusterkit.findings import Finding

KEY_NAME = "me"
DATA_BUCKET = "training-data"  # one per region: training-data-REGION
USER_SCRIPTS = ("setup.sh", "start.sh", "update.sh", "a.sh", "b.sh")  # custom-action scripts in that bucket
SECRET_NAME = "slurm-db"
CUSTOM_AMI_NAME = "team-training-ubuntu2204"
ARM_AMI_NAME = "team-training-arm64"
RESERVATION_ID = "cr-0123456789abcdef0"
BLOCK_ID = "cr-0fedcba9876543210"
RESERVED_TYPE = "p4de.24xlarge"
RESERVED_ZONE_INDEX = 1  # the zone (in zone order) the reservations are in
PLACEMENT_GROUP = "train-pg"
FSX_ID = "fs-0123456789abcdef0"
OPENZFS_FILE_SYSTEM_ID = "fs-0123456789abcdef1"
OPENZFS_VOLUME_ID = "fsvol-0123456789abcdef0"
OFFICIAL_AMI_GIB = 45
ACCOUNT = "123456789012"  # moto's


@dataclass
class RegionWorld:
    """What exists in one region of the mock account (ids are moto's, different on every run)."""

    region: str
    zones: list[str]
    vpc: str
    public_subnets: dict[str, str]  # zone -> subnet of the default VPC (public IPs on launch)
    private_subnets: dict[str, str]  # zone -> subnet without public IPs
    efs_id: str = ""
    efs_security_group: str = ""  # of every EFS mount target: NFS from the VPC
    ebs_volume_id: str = ""  # in the zone of the first private subnet
    custom_ami: str = ""  # an x86_64 AMI of this account, by id
    secret_arn: str = ""
    resource_group_arn: str = ""
    official: list[dict[str, Any]] = field(default_factory=list)

    def private(self, index: int = 0) -> str:
        return self.private_subnets[self.zones[index]]

    def public(self, index: int = 0) -> str:
        return self.public_subnets[self.zones[index]]


class ParallelClusterWorld:
    """One mock account for many validations; regions are set up the first time they are asked for.

    `empty_account`: an account as AWS opens it, holding only its default VPC (public subnets); only what
    AWS itself publishes (ParallelCluster's official AMIs) and the answers to moto's gaps are added."""

    def __init__(self, empty_account: bool = False) -> None:
        self.empty_account = empty_account
        self._regions: dict[str, RegionWorld] = {}
        self._architecture: dict[str, str] = {}  # image id -> architecture
        self._root_gib: dict[str, int] = {}  # image id -> root volume size
        self._fills: dict[str, dict[str, Any]] = {}  # region -> answers for moto's gaps
        self._current: str | None = None

    # ----- regions ---------------------------------------------------------------------------------

    def region(self, name: str) -> RegionWorld:
        if name not in self._regions:
            self._regions[name] = self._make_region(name)
        self._use(name)
        return self._regions[name]

    def _use(self, region: str) -> None:
        """Point ParallelCluster (its singleton clients, the default boto3 session) at `region`."""
        if self._current == region:
            return
        import boto3
        from pcluster.aws.aws_api import AWSApi
        from pcluster.aws.common import Cache

        os.environ["AWS_DEFAULT_REGION"] = region
        AWSApi.reset()
        Cache.clear_all()  # pcluster caches answers (the region's instance types) across its clients
        boto3.setup_default_session(region_name=region)
        events = boto3.DEFAULT_SESSION.events
        for event, handler in self._handlers(region):
            events.register(event, handler)
        self._current = region

    def close(self) -> None:
        import boto3
        from pcluster.aws.aws_api import AWSApi

        boto3.DEFAULT_SESSION = None
        AWSApi.reset()
        self._current = None

    def _make_region(self, region: str) -> RegionWorld:
        import boto3
        from pcluster.constants import OS_TO_IMAGE_NAME_PART_MAP
        from pcluster.utils import get_installed_version

        ec2 = boto3.client("ec2", region_name=region)
        zones = sorted(z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"])
        vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]
        public = {s["AvailabilityZone"]: s["SubnetId"] for s in
                  ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc["VpcId"]]}])["Subnets"]}
        private = {} if self.empty_account else {
            zone: ec2.create_subnet(VpcId=vpc["VpcId"], CidrBlock=f"172.31.{128 + 8 * i}.0/21",
                                    AvailabilityZone=zone)["Subnet"]["SubnetId"] for i, zone in enumerate(zones)}
        world = RegionWorld(region=region, zones=zones, vpc=vpc["VpcId"], public_subnets=public,
                            private_subnets=private)
        version = get_installed_version()
        for os_name, part in OS_TO_IMAGE_NAME_PART_MAP.items():
            for architecture in ("x86_64", "arm64"):
                image_id = self._image(ec2, f"aws-parallelcluster-{version}-{part}-{architecture}-202601010000",
                                       architecture, OFFICIAL_AMI_GIB)
                world.official.append({**ec2.describe_images(ImageIds=[image_id])["Images"][0],
                                       "Architecture": architecture, "OwnerId": "247102896272"})
        if self.empty_account:
            self._fills[region] = {"reservations": {}, "file_systems": {}, "volumes": {}}
            return world
        world.custom_ami = self._image(ec2, CUSTOM_AMI_NAME, "x86_64", 60)
        self._image(ec2, ARM_AMI_NAME, "arm64", 60)
        ec2.create_key_pair(KeyName=KEY_NAME, KeyType="ed25519")
        s3 = boto3.client("s3", region_name=region)
        location = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
        s3.create_bucket(Bucket=f"{DATA_BUCKET}-{region}", **location)
        for script in USER_SCRIPTS:
            s3.put_object(Bucket=f"{DATA_BUCKET}-{region}", Key=script, Body=b"#!/bin/bash\ntrue\n")
        world.secret_arn = boto3.client("secretsmanager", region_name=region).create_secret(
            Name=SECRET_NAME, SecretString="not-a-real-password")["ARN"]
        efs = boto3.client("efs", region_name=region)
        world.efs_id = efs.create_file_system(CreationToken=f"home-{region}", Encrypted=True)["FileSystemId"]
        world.efs_security_group = ec2.create_security_group(GroupName="efs-nfs", Description="NFS",
                                                             VpcId=world.vpc)["GroupId"]
        ec2.authorize_security_group_ingress(GroupId=world.efs_security_group, IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 2049, "ToPort": 2049, "IpRanges": [{"CidrIp": "172.31.0.0/16"}]}])
        for zone in zones:
            efs.create_mount_target(FileSystemId=world.efs_id, SubnetId=private[zone],
                                    SecurityGroups=[world.efs_security_group])
        world.ebs_volume_id = ec2.create_volume(AvailabilityZone=zones[0], Size=100, VolumeType="gp3")["VolumeId"]
        world.resource_group_arn = f"arn:aws:resource-groups:{region}:{ACCOUNT}:group/odcr-{region}"
        self._fills[region] = self._gap_answers(world, ec2)
        return world

    def _image(self, ec2: Any, name: str, architecture: str, size_gib: int) -> str:
        image_id = ec2.register_image(
            Name=name, Architecture=architecture, RootDeviceName="/dev/sda1", VirtualizationType="hvm",
            BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": size_gib}}])["ImageId"]
        self._architecture[image_id] = architecture
        self._root_gib[image_id] = size_gib
        return image_id

    def _gap_answers(self, world: RegionWorld, ec2: Any) -> dict[str, Any]:
        """The resources moto cannot hold, as AWS would describe them in this region."""
        zone = world.zones[RESERVED_ZONE_INDEX]
        group = ec2.create_security_group(GroupName="fsx-lustre", Description="FSx", VpcId=world.vpc)["GroupId"]
        ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=[
            {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "172.31.0.0/16"}]}])
        eni = {z: ec2.create_network_interface(SubnetId=world.private_subnets[z], Groups=[group],
                                               Description=f"FSx {z}")["NetworkInterface"]["NetworkInterfaceId"]
               for z in world.zones}
        reservations = {
            RESERVATION_ID: {"ReservationType": "default", "State": "active"},
            BLOCK_ID: {"ReservationType": "capacity-block", "State": "scheduled"},
        }
        return {
            "reservations": {rid: {"CapacityReservationId": rid, "InstanceType": RESERVED_TYPE,
                                   "AvailabilityZone": zone, "TotalInstanceCount": 8, "AvailableInstanceCount": 8,
                                   "InstancePlatform": "Linux/UNIX", "Tenancy": "default",
                                   "OwnerId": "123456789012",
                                   "CapacityReservationArn": f"arn:aws:ec2:{world.region}:123456789012:"
                                                             f"capacity-reservation/{rid}", **extra}
                             for rid, extra in reservations.items()},
            "file_systems": {
                FSX_ID: {"FileSystemId": FSX_ID, "FileSystemType": "LUSTRE", "Lifecycle": "AVAILABLE",
                         "StorageCapacity": 1200, "VpcId": world.vpc, "SubnetIds": [world.private(0)],
                         "NetworkInterfaceIds": [eni[world.zones[0]]], "DNSName": f"{FSX_ID}.fsx.example",
                         "LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "MountName": "abcdefgh"}},
                OPENZFS_FILE_SYSTEM_ID: {"FileSystemId": OPENZFS_FILE_SYSTEM_ID, "FileSystemType": "OPENZFS",
                                         "Lifecycle": "AVAILABLE", "StorageCapacity": 64, "VpcId": world.vpc,
                                         "SubnetIds": [world.private(0)],
                                         "NetworkInterfaceIds": [eni[world.zones[0]]],
                                         "DNSName": f"{OPENZFS_FILE_SYSTEM_ID}.fsx.example"},
            },
            "volumes": {OPENZFS_VOLUME_ID: {"VolumeId": OPENZFS_VOLUME_ID, "VolumeType": "OPENZFS",
                                            "FileSystemId": OPENZFS_FILE_SYSTEM_ID, "Lifecycle": "AVAILABLE",
                                            "Name": "home",
                                            "OpenZFSConfiguration": {"VolumePath": "/fsx/home"}}},
        }

    # ----- the answers -------------------------------------------------------------------------------

    def _handlers(self, region: str) -> Iterator[tuple[str, Callable[..., Any]]]:
        from botocore.awsrequest import AWSResponse
        from botocore.exceptions import ClientError

        world, fills = self._regions[region], self._fills[region]

        def answer(body: dict[str, Any]) -> tuple[AWSResponse, dict[str, Any]]:
            return AWSResponse("https://stub", 200, {}, None), {**body, "ResponseMetadata": {"HTTPStatusCode": 200}}

        def official_images(params: dict[str, Any], **_: Any) -> Any:
            body = params["body"]
            if "amazon" not in [v for k, v in body.items() if k.startswith("Owner.")]:
                return None  # moto answers for this account's own images
            names = [body[k] for k in body if k.startswith("Filter.") and k.endswith(".Value.1")
                     and body[k.replace(".Value.1", ".Name")] == "name"]
            return answer({"Images": [i for i in world.official if any(fnmatch.fnmatch(i["Name"], n) for n in names)]})

        def image_facts(parsed: dict[str, Any], **_: Any) -> None:
            for image in parsed.get("Images", []):
                if image.get("ImageId") in self._architecture:
                    image["Architecture"] = self._architecture[image["ImageId"]]
                    for mapping in image.get("BlockDeviceMappings", []):
                        mapping.get("Ebs", {})["VolumeSize"] = self._root_gib[image["ImageId"]]

        def mount_target_groups(parsed: dict[str, Any], **_: Any) -> None:
            parsed.setdefault("SecurityGroups", [world.efs_security_group])  # every mount target here has it

        def group_configuration(params: dict[str, Any], **_: Any) -> Any:
            import json

            group = json.loads(params["body"] or b"{}").get("Group")
            if group != world.resource_group_arn:
                raise ClientError({"Error": {"Code": "NotFoundException", "Message": f"group {group} not found"}},
                                  "GetGroupConfiguration")
            return answer({"GroupConfiguration": {"Status": "UPDATE_COMPLETE", "Configuration": [
                {"Type": "AWS::EC2::CapacityReservationPool"},
                {"Type": "AWS::ResourceGroups::Generic", "Parameters": [
                    {"Name": "allowed-resource-types", "Values": ["AWS::EC2::CapacityReservation"]}]}]}})

        def key_type(parsed: dict[str, Any], **_: Any) -> None:
            for key in parsed.get("KeyPairs", []):
                key.setdefault("KeyType", "ed25519")

        def run_instances(**_: Any) -> None:
            raise ClientError({"Error": {"Code": "DryRunOperation",
                                         "Message": "Request would have succeeded, but DryRun flag is set."}},
                              "RunInstances")

        def reservations(params: dict[str, Any], **_: Any) -> Any:
            wanted = [v for k, v in params["body"].items() if k.startswith("CapacityReservationId.")]
            missing = [r for r in wanted if r not in fills["reservations"]]
            if missing:
                raise ClientError({"Error": {"Code": "InvalidCapacityReservationId.NotFound",
                                             "Message": f"The capacity reservation ID '{missing[0]}' does not exist"}},
                                  "DescribeCapacityReservations")
            return answer({"CapacityReservations": [fills["reservations"][r] for r in wanted]})

        def placement_groups(params: dict[str, Any], **_: Any) -> Any:
            wanted = [v for k, v in params["body"].items() if k.startswith("GroupName.")]
            if any(name != PLACEMENT_GROUP for name in wanted):
                raise ClientError({"Error": {"Code": "InvalidPlacementGroup.Unknown",
                                             "Message": f"The Placement Group '{wanted[0]}' is unknown."}},
                                  "DescribePlacementGroups")
            return answer({"PlacementGroups": [{"GroupName": PLACEMENT_GROUP, "State": "available",
                                                "Strategy": "cluster", "GroupId": "pg-0123456789abcdef0"}]})

        def group_resources(params: dict[str, Any], **_: Any) -> Any:
            import json

            group = json.loads(params["body"] or b"{}").get("Group")
            if group != world.resource_group_arn:
                raise ClientError({"Error": {"Code": "NotFoundException", "Message": f"group {group} not found"}},
                                  "ListGroupResources")
            arn = fills["reservations"][RESERVATION_ID]["CapacityReservationArn"]
            return answer({"Resources": [{"Identifier": {"ResourceArn": arn,
                                                         "ResourceType": "AWS::EC2::CapacityReservation"}}],
                           "ResourceIdentifiers": [{"ResourceArn": arn,
                                                    "ResourceType": "AWS::EC2::CapacityReservation"}]})

        def file_systems(params: dict[str, Any], **_: Any) -> Any:
            import json

            wanted = json.loads(params["body"] or b"{}").get("FileSystemIds", [])
            known = [fills["file_systems"][i] for i in wanted if i in fills["file_systems"]]
            if wanted and len(known) < len(wanted):
                raise ClientError({"Error": {"Code": "FileSystemNotFound", "Message": "File system not found"}},
                                  "DescribeFileSystems")
            return answer({"FileSystems": known}) if wanted else None

        def volumes(params: dict[str, Any], **_: Any) -> Any:
            import json

            wanted = json.loads(params["body"] or b"{}").get("VolumeIds", [])
            if any(v not in fills["volumes"] for v in wanted):
                raise ClientError({"Error": {"Code": "VolumeNotFound", "Message": "Volume not found"}},
                                  "DescribeVolumes")
            return answer({"Volumes": [fills["volumes"][v] for v in wanted]})

        yield "before-call.ec2.DescribeImages", official_images
        yield "after-call.ec2.DescribeImages", image_facts
        yield "after-call.efs.DescribeMountTargetSecurityGroups", mount_target_groups
        yield "before-call.resource-groups.GetGroupConfiguration", group_configuration
        yield "after-call.ec2.DescribeKeyPairs", key_type
        yield "before-call.ec2.RunInstances", run_instances
        yield "before-call.ec2.DescribeCapacityReservations", reservations
        yield "before-call.ec2.DescribePlacementGroups", placement_groups
        yield "before-call.resource-groups.ListGroupResources", group_resources
        yield "before-call.fsx.DescribeFileSystems", file_systems
        yield "before-call.fsx.DescribeVolumes", volumes

    # ----- validation ---------------------------------------------------------------------------------

    def aws(self, region: str) -> Any:
        """clusterkit's view of the account (`providers.aws.Aws`), with the same gaps filled."""
        import boto3

        from clusterkit.providers.aws import Aws

        self.region(region)
        return Aws(region, session=boto3.DEFAULT_SESSION)

    @contextmanager
    def with_prerequisites(self, resolution: Any, name: str, region: str) -> Iterator[Any]:
        """The resolved spec placed in clusterkit's prerequisites stack, made here (under moto's CloudFormation) as
        a create makes it when the resolution plans a new one, and deleted again on leaving, so that each spec
        meets the account as it was (stacks made earlier are reused by `resolve`)."""
        from clusterkit.cluster.prerequisites import template_text, with_outputs
        from clusterkit.providers.aws import prerequisites

        if resolution.prerequisites is None:
            yield resolution.spec
            return
        aws = self.aws(region)
        outputs = prerequisites.create(aws, resolution.stack, template_text(resolution.prerequisites, name),
                                       resolution.parameters, name, poll_seconds=0)
        try:
            yield with_outputs(resolution.spec, outputs)
        finally:
            prerequisites.delete(aws, resolution.stack, poll_seconds=0)

    def validate(self, name: str, config: dict[str, Any], region: str) -> list[Finding]:
        """ParallelCluster's dry run of `config` in `region`, after clusterkit's create-time uploads."""
        import boto3

        from clusterkit.providers.aws.backend import ParallelClusterBackend
        from clusterkit.providers.aws.uploads import upload_node_scripts

        aws = self.aws(region)
        uploads = script_uploads(config)
        if uploads:
            bucket = next(iter(uploads)).split("/")[2]
            s3 = boto3.client("s3", region_name=region)
            exists = bucket in {b["Name"] for b in s3.list_buckets()["Buckets"]}
            upload_node_scripts(aws, bucket, ACCOUNT, uploads, create_bucket=not exists)
        return ParallelClusterBackend().dry_run(name, config, region)


def official_regions() -> list[str]:
    """ParallelCluster's supported regions, from its own resource file (it would download the list)."""
    from importlib.resources import files

    return [line for line in (files("pcluster") / "resources" / "supported-regions").read_text().split("\n") if line]


def use_local_region_list() -> None:
    """Make ParallelCluster read its region list from its package instead of downloading it."""
    from pcluster.utils import retrieve_supported_regions

    retrieve_supported_regions.cache = official_regions()

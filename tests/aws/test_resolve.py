"""Resolving a spec against an account (moto, plus capacity reservations answered at the botocore level)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from clusterkit.cluster import preset, render_config
from clusterkit.cluster.spec import (
    AccountingSpec,
    ClusterSpec,
    CustomActionsSpec,
    EbsSpec,
    LustreSpec,
    PlacementGroupSpec,
    ScriptSpec,
)
from clusterkit.findings import Level
from clusterkit.providers.aws.resolve import resolve

from .conftest import REGION, answer, answer_reservations, private_subnets, refuse, reservation

ACCOUNT = "123456789012"  # moto's

def p4de(**changes: object) -> ClusterSpec:
    spec = preset("p4de")
    spec.name = "train"
    spec.pyxis.enabled = False
    return dataclasses.replace(spec, **changes)


def private_subnet(aws, zone: str) -> str:  # noqa: ANN001
    return private_subnets(aws.client("ec2"), zone)[zone]


def errors(resolution) -> list[str]:  # noqa: ANN001
    return [f"{f.path}: {f.message} ({f.fix})" for f in resolution.findings if f.level is Level.ERROR]


def with_reservation(spec: ClusterSpec, reservation_id: str = "cr-0123456789abcdef0") -> ClusterSpec:
    spec.queues[0].compute[0].capacity_reservation_id = reservation_id
    return spec


def test_without_a_subnet_a_private_one_is_chosen_where_every_compute_type_is_offered(aws) -> None:  # noqa: ANN001
    made = private_subnets(aws.client("ec2"), "us-east-1a", "us-east-1c")
    spec = p4de()
    resolution = resolve(spec, aws, ACCOUNT)
    assert resolution.ok, errors(resolution)
    assert resolution.chosen["subnet_id"] == made["us-east-1c"]
    assert resolution.spec.subnet_id == resolution.chosen["subnet_id"] != spec.subnet_id
    assert spec.subnet_id is None  # the input spec is left alone


def test_only_public_subnets_in_the_default_vpc_is_an_error_for_several_network_cards(aws) -> None:  # noqa: ANN001
    (message,) = errors(resolve(p4de(network="existing"), aws, ACCOUNT))
    assert message.startswith("subnet_id: p4de.24xlarge (several network cards) need a private subnet (they get no "
                              "public IP), and the default VPC vpc-")
    assert "NAT gateway" in message


def test_only_public_subnets_in_the_default_vpc_plan_a_network_of_clusterkits_own(aws) -> None:  # noqa: ANN001
    resolution = resolve(p4de(), aws, ACCOUNT)
    assert errors(resolution) == []
    assert resolution.prerequisites is not None and resolution.prerequisites.to_dict() == {"network": True,
                                                                                        "database": True}
    zone = resolution.parameters["AvailabilityZone"]
    assert zone in ("us-east-1b", "us-east-1c")  # where moto offers p4de.24xlarge
    assert resolution.parameters["DatabaseAvailabilityZone"] != zone
    assert resolution.stack == "clusterkit-prerequisites-train" and resolution.spec.subnet_id is None
    assert any(f.path == "network" and "makes a network for the cluster" in f.message for f in resolution.findings)
    # A g5.12xlarge queue has one network card, but its EFA interface keeps it out of public subnets too.
    g5 = preset("g5")
    assert resolve(g5, aws, ACCOUNT).prerequisites.network is True


def test_a_given_public_subnet_is_an_error_for_several_network_cards(aws) -> None:  # noqa: ANN001
    ec2 = aws.client("ec2")
    public = ec2.describe_subnets(Filters=[{"Name": "availability-zone", "Values": ["us-east-1b"]}])
    subnet = public["Subnets"][0]["SubnetId"]
    (message,) = errors(resolve(p4de(subnet_id=subnet), aws, ACCOUNT))
    assert message.startswith(f"subnet_id: subnet {subnet} gives public IPs, which p4de.24xlarge")


def test_a_given_subnet_in_a_zone_without_the_instance_type_is_an_error(aws) -> None:  # noqa: ANN001
    subnet = private_subnet(aws, "us-east-1a")
    resolution = resolve(p4de(subnet_id=subnet), aws, ACCOUNT)
    (message,) = errors(resolution)
    assert message.startswith(f"subnet_id: p4de.24xlarge is not offered in us-east-1a, the zone of subnet {subnet}")
    assert "us-east-1b, us-east-1c" in message


def test_an_unknown_subnet_names_the_region(aws) -> None:  # noqa: ANN001
    resolution = resolve(p4de(subnet_id="subnet-0123456789abcdef0"), aws, ACCOUNT)
    assert errors(resolution) == [f"subnet_id: subnet subnet-0123456789abcdef0 not found in {REGION} "
                                  "(check the id and --region (`aws ec2 describe-subnets`))"]


def test_a_reservation_decides_the_zone_of_the_chosen_subnet(aws) -> None:  # noqa: ANN001
    private_subnets(aws.client("ec2"), "us-east-1b", "us-east-1c")
    answer_reservations(aws.client("ec2"), reservation(zone="us-east-1c", count=4))
    resolution = resolve(with_reservation(p4de()), aws, ACCOUNT)
    assert resolution.ok, errors(resolution)
    assert resolution.chosen["availability_zone"] == "us-east-1c"


@pytest.mark.parametrize("zone", ["us-east-1b", "us-east-1c"])
def test_a_reservation_decides_the_zone_of_a_network_of_clusterkits_own(aws, zone: str) -> None:  # noqa: ANN001
    answer_reservations(aws.client("ec2"), reservation(zone=zone, count=4))  # the default VPC only: all public
    resolution = resolve(with_reservation(p4de()), aws, ACCOUNT)
    assert resolution.ok, errors(resolution)
    assert resolution.prerequisites is not None and resolution.prerequisites.network
    assert resolution.parameters["AvailabilityZone"] == resolution.chosen["availability_zone"] == zone


def test_a_scheduled_capacity_block_is_usable(aws) -> None:  # noqa: ANN001
    private_subnets(aws.client("ec2"), "us-east-1b", "us-east-1c")
    answer_reservations(aws.client("ec2"), reservation(state="scheduled", kind="capacity-block", zone="us-east-1b"))
    resolution = resolve(with_reservation(p4de()), aws, ACCOUNT)
    assert resolution.ok, errors(resolution)
    assert resolution.chosen["availability_zone"] == "us-east-1b"


@pytest.mark.parametrize(("changes", "expected"), [
    ({"instance_type": "p5.48xlarge"}, "holds p5.48xlarge, but compute resource 'p4de-24xl' launches p4de.24xlarge"),
    ({"count": 2}, "holds 2 instances, but compute resource 'p4de-24xl' may launch 4 (max_count)"),
    ({"state": "expired"}, f"capacity reservation cr-0123456789abcdef0 in {REGION} is expired"),
    ({"state": "expired", "kind": "capacity-block"}, f"Capacity Block cr-0123456789abcdef0 in {REGION} is expired"),
])
def test_reservation_mismatches_are_errors_on_the_reservation_field(aws, changes, expected) -> None:  # noqa: ANN001
    private_subnets(aws.client("ec2"), "us-east-1c")
    answer_reservations(aws.client("ec2"), reservation(**changes))
    resolution = resolve(with_reservation(p4de()), aws, ACCOUNT)
    messages = errors(resolution)
    assert any(m.startswith("queues[0].compute[0].capacity_reservation_id: ") and expected in m for m in messages), \
        messages


def test_a_reservation_in_another_zone_than_the_subnet(aws) -> None:  # noqa: ANN001
    answer_reservations(aws.client("ec2"), reservation(zone="us-east-1c"))
    subnet = private_subnet(aws, "us-east-1b")
    resolution = resolve(with_reservation(p4de(subnet_id=subnet)), aws, ACCOUNT)
    (message,) = errors(resolution)
    assert "is in us-east-1c, but queue 'train' launches in us-east-1b" in message
    assert "use a subnet in us-east-1c" in message


def test_an_unknown_reservation(aws) -> None:  # noqa: ANN001
    answer_reservations(aws.client("ec2"))
    resolution = resolve(with_reservation(p4de(), "cr-0fffffffffffffff0"), aws, ACCOUNT)
    assert errors(resolution)[0].startswith(
        "queues[0].compute[0].capacity_reservation_id: capacity reservation cr-0fffffffffffffff0 "
        f"not found in {REGION}")


def test_a_missing_key_pair_says_how_to_create_it(aws) -> None:  # noqa: ANN001
    private_subnets(aws.client("ec2"), "us-east-1b")
    spec = p4de()
    spec.ssh.key_name = "alice"
    (message,) = errors(resolve(spec, aws, ACCOUNT))
    assert message.startswith(f"ssh.key_name: key pair 'alice' not found in {REGION}")
    assert "aws ec2 create-key-pair --key-type ed25519 --key-name alice" in message


def test_an_existing_key_pair_passes(aws) -> None:  # noqa: ANN001
    private_subnets(aws.client("ec2"), "us-east-1b")
    aws.client("ec2").create_key_pair(KeyName="alice", KeyType="ed25519")
    spec = p4de()
    spec.ssh.key_name = "alice"
    assert resolve(spec, aws, ACCOUNT).ok


def test_missing_fsx_and_bucket_are_named(aws) -> None:  # noqa: ANN001
    private_subnets(aws.client("ec2"), "us-east-1b")
    spec = p4de()
    spec.storage.lustre = [LustreSpec(file_system_id="fs-0123456789abcdef0"),
                           LustreSpec(name="data", mount_dir="/data", import_path="s3://no-such-bucket/train")]
    messages = errors(resolve(spec, aws, ACCOUNT))
    assert any(m.startswith(f"storage.lustre[0].file_system_id: FSx file system fs-0123456789abcdef0 not found in "
                            f"{REGION}") for m in messages), messages
    assert any(m.startswith("storage.lustre[1].import_path: S3 bucket 'no-such-bucket' does not exist")
               for m in messages), messages


def test_an_existing_bucket_passes(aws) -> None:  # noqa: ANN001
    private_subnets(aws.client("ec2"), "us-east-1b")
    aws.client("s3").create_bucket(Bucket="training-data")
    spec = p4de()
    spec.storage.lustre = [LustreSpec(import_path="s3://training-data/shards")]
    assert resolve(spec, aws, ACCOUNT).ok


def test_custom_ami_by_name_and_by_id(aws) -> None:  # noqa: ANN001
    private_subnets(aws.client("ec2"), "us-east-1b")
    ec2 = aws.client("ec2")
    image_id = ec2.register_image(
        Name="my-training-ami-2026", RootDeviceName="/dev/sda1",
        BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 60}}])["ImageId"]
    for given in ("my-training-ami-2026", image_id):
        spec = p4de()
        spec.image.custom_ami = given
        resolution = resolve(spec, aws, ACCOUNT)
        assert resolution.chosen["image_id"] == resolution.spec.image.custom_ami == image_id
    spec = p4de()
    spec.image.custom_ami = "ami-0123456789abcdef0"
    (message,) = errors(resolve(spec, aws, ACCOUNT))
    assert message.startswith(f"image.custom_ami: AMI 'ami-0123456789abcdef0' not found in {REGION}")


def test_a_denied_lookup_names_the_permission(aws) -> None:  # noqa: ANN001
    from clusterkit.providers.aws import AccessProblem

    refuse(aws.client("ec2"), "DescribeInstanceTypeOfferings", "UnauthorizedOperation",
           "You are not authorized to perform this operation. User: arn:aws:iam::123456789012:user/bob is not "
           "authorized to perform: ec2:DescribeInstanceTypeOfferings because no identity-based policy allows it. "
           "Encoded authorization failure message: abc")
    with pytest.raises(AccessProblem) as raised:
        resolve(p4de(), aws, ACCOUNT)
    assert str(raised.value) == (f"permission denied in {REGION}: this identity may not call "
                                 "ec2:DescribeInstanceTypeOfferings (grant ec2:DescribeInstanceTypeOfferings to this "
                                 "identity in IAM)")


def test_an_efa_queue_of_a_single_card_type_needs_a_private_subnet_too(aws) -> None:  # noqa: ANN001
    """ParallelCluster 3.16 gives EFA compute resources an extra EFA-only interface: no public IP then."""
    public = aws.client("ec2").describe_subnets(Filters=[{"Name": "availability-zone", "Values": ["us-east-1b"]}])
    spec = p4de(subnet_id=public["Subnets"][0]["SubnetId"])
    spec.queues[0].compute[0].instance_type = "g5.12xlarge"
    messages = errors(resolve(spec, aws, ACCOUNT))
    assert any("gives public IPs, which g5.12xlarge (EFA) cannot have" in m for m in messages), messages


def test_a_public_head_node_with_private_queues(aws) -> None:  # noqa: ANN001
    ec2 = aws.client("ec2")
    private = private_subnet(aws, "us-east-1b")
    public = ec2.describe_subnets(Filters=[{"Name": "availability-zone", "Values": ["us-east-1b"]}])["Subnets"]
    public_id = next(s["SubnetId"] for s in public if s.get("MapPublicIpOnLaunch"))
    spec = p4de(subnet_id=private)
    spec.head_node.subnet_id = public_id
    resolution = resolve(spec, aws, ACCOUNT)
    assert resolution.ok, errors(resolution)
    config = render_config(resolution.spec)
    assert config["HeadNode"]["Networking"]["SubnetId"] == public_id
    assert all(q["Networking"]["SubnetIds"] == [private] for q in config["Scheduling"]["SlurmQueues"])
    # Without a subnet for the queues, a private one is chosen for them; the head node keeps its own.
    spec = p4de()
    spec.head_node.subnet_id = public_id
    resolution = resolve(spec, aws, ACCOUNT)
    assert resolution.ok and resolution.spec.subnet_id == private
    assert resolution.spec.head_node.subnet_id == public_id


def test_a_named_placement_group_must_exist(aws) -> None:  # noqa: ANN001
    private_subnets(aws.client("ec2"), "us-east-1b")
    refuse(aws.client("ec2"), "DescribePlacementGroups", "InvalidPlacementGroup.Unknown",
           "The Placement Group 'train-pg' is unknown.")
    spec = p4de()
    spec.queues[0].placement_group = PlacementGroupSpec(name="train-pg")
    (message,) = errors(resolve(spec, aws, ACCOUNT))
    assert message.startswith(f"queues[0].placement_group: placement group 'train-pg' not found in {REGION}")


def test_a_custom_ami_must_fit_the_nodes(aws) -> None:  # noqa: ANN001
    private_subnets(aws.client("ec2"), "us-east-1b")
    answer(aws.client("ec2"), "DescribeImages", lambda: {"Images": [{
        "ImageId": "ami-0123456789abcdef0", "Name": "graviton-training", "State": "available",
        "Architecture": "arm64", "RootDeviceName": "/dev/sda1", "CreationDate": "2026-01-01T00:00:00.000Z",
        "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 300}}]}]})
    spec = p4de()
    spec.image.custom_ami = "graviton-training"
    messages = errors(resolve(spec, aws, ACCOUNT))
    assert any(m.startswith("queues[0].root_volume_gb: a root volume of 200 GiB is smaller than the 300 GiB of AMI "
                            "ami-0123456789abcdef0 (graviton-training)") for m in messages), messages
    assert any("is arm64, but p4de.24xlarge runs x86_64 images" in m for m in messages), messages


def test_an_existing_ebs_volume_must_be_in_the_head_nodes_zone(aws) -> None:  # noqa: ANN001
    ec2 = aws.client("ec2")
    subnet = private_subnet(aws, "us-east-1b")
    volume = ec2.create_volume(AvailabilityZone="us-east-1c", Size=100, VolumeType="gp3")["VolumeId"]
    spec = p4de(subnet_id=subnet)
    spec.storage.ebs = [EbsSpec(name="data", mount_dir="/data", volume_id=volume)]
    (message,) = errors(resolve(spec, aws, ACCOUNT))
    assert message.startswith(f"storage.ebs[0].volume_id: EBS volume {volume} is in us-east-1c, the head node in "
                              "us-east-1b")


def test_policies_and_the_accounting_secret_are_looked_up(aws) -> None:  # noqa: ANN001
    private_subnets(aws.client("ec2"), "us-east-1b")
    made = aws.client("iam").create_policy(PolicyName="read-datasets", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}]}))
    spec = p4de()
    spec.queues[0].iam.additional_policies = [made["Policy"]["Arn"], "arn:aws:iam::123456789012:policy/nobody"]
    spec.slurm.accounting = AccountingSpec(uri="db.example.com:3306", user_name="slurm",
                                           password_secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:"
                                                               "secret:nobody-AbCdEf")
    resolution = resolve(spec, aws, ACCOUNT)
    assert errors(resolution) == ["queues[0].iam.additional_policies[1]: IAM policy "
                                  "arn:aws:iam::123456789012:policy/nobody not found (check the policy's name or ARN "
                                  "(`aws iam get-policy --policy-arn ...`))"]
    (warning,) = [f for f in resolution.findings if f.level is Level.WARNING]
    assert warning.path == "slurm.accounting.password_secret_arn" and "secret not found" in warning.message


def test_the_scripts_bucket_is_the_accounts_own(aws) -> None:  # noqa: ANN001
    private_subnets(aws.client("ec2"), "us-east-1b")
    spec = preset("p4de")
    resolution = resolve(spec, aws, ACCOUNT)
    assert resolution.ok, errors(resolution)
    assert resolution.spec.scripts_bucket == f"clusterkit-{ACCOUNT}-{REGION}" == resolution.chosen["scripts_bucket"]
    assert resolution.create_scripts_bucket  # not there yet: apply makes it
    aws.client("s3").create_bucket(Bucket=f"clusterkit-{ACCOUNT}-{REGION}")
    assert not resolve(spec, aws, ACCOUNT).create_scripts_bucket
    refuse(aws.client("s3"), "HeadBucket", "403", "Forbidden")  # someone else's bucket of that name
    (message,) = errors(resolve(spec, aws, ACCOUNT))
    assert message.startswith(f"scripts_bucket: S3 bucket 'clusterkit-{ACCOUNT}-{REGION}' belongs to another account")


def test_the_specs_own_s3_scripts_must_be_there(aws) -> None:  # noqa: ANN001
    private_subnets(aws.client("ec2"), "us-east-1b")
    aws.client("s3").create_bucket(Bucket="team-scripts")
    aws.client("s3").put_object(Bucket="team-scripts", Key="setup.sh", Body=b"#!/bin/bash\n")
    spec = p4de()
    spec.queues[0].custom_actions = CustomActionsSpec(on_node_configured=[
        ScriptSpec("s3://team-scripts/setup.sh"), ScriptSpec("s3://team-scripts/missing.sh")])
    (message,) = errors(resolve(spec, aws, ACCOUNT))
    assert message.startswith("queues[0].custom_actions.on_node_configured[1].script: custom action script "
                              "s3://team-scripts/missing.sh not found")

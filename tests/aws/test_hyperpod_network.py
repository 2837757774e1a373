"""A HyperPod cluster without --subnet-id: clusterkit's own prerequisites network (the ParallelCluster provider's
stack, network only), made or reused at create and deleted with the cluster that made it, under moto. The clusters are
g5's, whose new FSx for Lustre file system goes with the cluster here (deletion_policy: Delete), so the network can."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from clusterkit.cluster.render import PLACEHOLDER_SUBNET
from clusterkit.providers.hyperpod.cluster import HyperPodCluster, HyperPodProvider
from clusterkit.providers.plan import ClusterRequest

ROLE = "arn:aws:iam::123456789012:role/hyperpod"
STACK = "clusterkit-prerequisites-{name}"


@pytest.fixture
def aws(aws_env, tmp_path, monkeypatch) -> Iterator[Any]:
    import boto3
    from moto import mock_aws

    from clusterkit.providers.aws.access import Aws

    from tests.aws.conftest import fill_fsx

    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path / "home"))
    with mock_aws():
        aws = Aws("us-east-1", boto3.Session(region_name="us-east-1"))
        fill_fsx(aws.client("fsx"))  # g5's new file system: what moto's FSx leaves out
        yield aws


@pytest.fixture
def g5(tmp_path) -> str:
    """g5's spec, its new file system deleted with the cluster."""
    import dataclasses

    import yaml

    from clusterkit.cluster.presets import preset

    spec = preset("g5")
    spec.storage.lustre[0].deletion_policy = "Delete"
    path = tmp_path / "g5-delete.yaml"
    path.write_text(yaml.safe_dump(dataclasses.asdict(spec)))
    return str(path)


def created(aws: Any, name: str, said: list[str], spec_file: str) -> HyperPodCluster:
    provider = HyperPodProvider(aws=aws)
    plan = provider.plan(ClusterRequest(name=name, provider="hyperpod", spec_file=spec_file, execution_role=ROLE))
    assert plan.ok and plan.details.request["VpcConfig"]["Subnets"] == [PLACEHOLDER_SUBNET]
    assert any(f.rule == "hyperpod.vpc" and "prerequisites network" in f.message for f in plan.findings)
    prepared = provider.prepare(plan, said.append)
    assert prepared.ok, [str(f) for f in prepared.findings]
    return provider.apply(prepared, said.append, poll_seconds=0)


def stack_status(aws: Any, name: str) -> str | None:
    stacks = aws.client("cloudformation").describe_stacks()["Stacks"]
    return next((stack["StackStatus"] for stack in stacks if stack["StackName"] == name), None)


def test_without_a_subnet_a_network_of_its_own_is_made_used_and_deleted_with_the_cluster(aws, g5) -> None:
    provider = HyperPodProvider(aws=aws)
    plan = provider.plan(ClusterRequest(name="hp", provider="hyperpod", spec_file=g5, execution_role=ROLE))
    prepared = provider.prepare(plan)
    facts = prepared.details.prepared
    assert facts.create_network and facts.network_stack == STACK.format(name="hp") and facts.vpc_id == ""
    zones = {offer["Location"] for offer in aws.client("ec2").describe_instance_type_offerings(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": ["g5.12xlarge"]}])[
        "InstanceTypeOfferings"]}
    assert facts.network_zone in zones
    assert any(action.startswith(f"create clusterkit's prerequisites stack {facts.network_stack}")
               for action in prepared.actions)
    assert prepared.details.plan_fields()["details"]["create_network"] is True  # --output json shows it

    said: list[str] = []
    cluster = provider.apply(prepared, said.append, poll_seconds=0)
    assert any("creating prerequisites stack clusterkit-prerequisites-hp" in line for line in said)
    outputs = {o["OutputKey"]: o["OutputValue"] for o in aws.client("cloudformation").describe_stacks(
        StackName=STACK.format(name="hp"))["Stacks"][0]["Outputs"]}
    sent = json.loads(open(cluster.state.request_file).read())
    assert sent["VpcConfig"]["Subnets"] == [outputs["PrivateSubnetId"]]
    described = aws.client("sagemaker").describe_cluster(ClusterName="hp")
    assert described["VpcConfig"]["Subnets"] == [outputs["PrivateSubnetId"]]
    group = aws.client("ec2").describe_security_groups(GroupIds=[cluster.state.security_group_id])["SecurityGroups"][0]
    assert group["VpcId"] == outputs["VpcId"]
    assert cluster.state.prerequisites is not None and cluster.state.prerequisites.created
    (system,) = aws.client("fsx").describe_file_systems()["FileSystems"]  # the new file system, in the network
    assert system["SubnetIds"] == [outputs["PrivateSubnetId"]] and cluster.state.lustre_created

    deletion = cluster.deletion()
    assert any(item.startswith("prerequisites stack clusterkit-prerequisites-hp: its VPC, NAT gateway")
               for item in deletion.deletes)
    cluster.delete(said.append, poll_seconds=0)
    assert stack_status(aws, STACK.format(name="hp")) in (None, "DELETE_COMPLETE")
    assert aws.client("fsx").describe_file_systems()["FileSystems"] == []


def test_a_second_cluster_reuses_the_network_and_it_stays_while_either_uses_it(aws, g5) -> None:
    first = created(aws, "hp", [], g5)
    outputs = {o["OutputKey"]: o["OutputValue"] for o in aws.client("cloudformation").describe_stacks(
        StackName=STACK.format(name="hp"))["Stacks"][0]["Outputs"]}
    provider = HyperPodProvider(aws=aws)
    prepared = provider.prepare(provider.plan(ClusterRequest(name="hp2", provider="hyperpod", spec_file=g5,
                                                             execution_role=ROLE)))
    facts = prepared.details.prepared
    assert not facts.create_network and facts.network_stack == STACK.format(name="hp")
    # The request a dry run after preparing shows is the one sent: the reused network's private subnet.
    assert prepared.details.request["VpcConfig"]["Subnets"] == [outputs["PrivateSubnetId"]]
    assert facts.vpc_id == outputs["VpcId"]
    second = provider.apply(prepared, poll_seconds=0)
    assert not second.state.prerequisites.created
    assert "prerequisites stack clusterkit-prerequisites-hp (cluster hp2 uses it too)" in first.deletion().keeps
    said: list[str] = []
    first.delete(said.append, poll_seconds=0)
    assert any("keeping prerequisites stack clusterkit-prerequisites-hp (cluster hp2 uses it too" in s for s in said)
    assert stack_status(aws, STACK.format(name="hp")) == "CREATE_COMPLETE"
    assert any("made earlier, not by this cluster's create" in kept for kept in second.deletion().keeps)
    second.delete(poll_seconds=0)
    assert stack_status(aws, STACK.format(name="hp")) == "CREATE_COMPLETE"  # not hp2's to delete


def test_a_file_system_outside_the_new_network_is_an_error_before_anything_is_made(aws, tmp_path) -> None:
    import dataclasses

    import yaml
    from tests.aws.conftest import answer

    from clusterkit.cluster.presets import preset
    from clusterkit.cluster.spec import LustreSpec, StorageSpec

    spec = preset("g5")
    spec.storage = StorageSpec(lustre=[LustreSpec(file_system_id="fs-0123456789abcdef0")])
    path = tmp_path / "g5.yaml"
    path.write_text(yaml.safe_dump(dataclasses.asdict(spec)))
    answer(aws.client("fsx"), "DescribeFileSystems", lambda: {"FileSystems": [{
        "FileSystemId": "fs-0123456789abcdef0", "FileSystemType": "LUSTRE", "Lifecycle": "AVAILABLE",
        "VpcId": "vpc-0aaaaaaaaaaaaaaaa", "DNSName": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        "LustreConfiguration": {"MountName": "abcdefgh"}}]})
    provider = HyperPodProvider(aws=aws)
    prepared = provider.prepare(provider.plan(ClusterRequest(name="hp", provider="hyperpod", spec_file=str(path),
                                                             execution_role=ROLE)))
    assert not prepared.ok
    (problem,) = [f for f in prepared.findings if f.path == "storage.lustre[0].file_system_id"]
    assert "vpc-0aaaaaaaaaaaaaaaa, not in clusterkit's prerequisites network" in problem.message
    assert "give --subnet-id" in problem.fix
    assert aws.client("cloudformation").describe_stacks()["Stacks"] == []  # preparing made nothing

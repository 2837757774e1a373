"""A HyperPod cluster's life under moto: create -> describe -> resize -> replace a node -> delete. moto 5.2 has
SageMaker's create, describe, list-nodes and delete; UpdateCluster, BatchReplaceClusterNodes and FSx's answer come
from fakes at the boto3 level, and every request a fake receives is checked against botocore's model first."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.aws.conftest import answer, refuse

from clusterkit.cluster.presets import preset
from clusterkit.cluster.spec import LustreSpec, StorageSpec
from clusterkit.errors import ClusterkitError
from clusterkit.providers import open_cluster
from clusterkit.providers.hyperpod.cluster import HyperPodCluster, HyperPodProvider
from clusterkit.providers.hyperpod.model import problems
from clusterkit.providers.plan import ClusterRequest

ROLE = "arn:aws:iam::123456789012:role/hyperpod"
FILE_SYSTEM = "fs-0123456789abcdef0"
DNS = f"{FILE_SYSTEM}.fsx.us-east-1.amazonaws.com"
GONE = "i-0000000000000dead"


@pytest.fixture
def world(aws_env, tmp_path, monkeypatch) -> Iterator[dict[str, Any]]:
    import boto3
    from moto import mock_aws

    from clusterkit.providers.aws.access import Aws

    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path / "home"))
    with mock_aws():
        aws = Aws("us-east-1", boto3.Session(region_name="us-east-1"))
        subnet = aws.client("ec2").describe_subnets()["Subnets"][0]
        answer(aws.client("fsx"), "DescribeFileSystems", lambda: {"FileSystems": [{
            "FileSystemId": FILE_SYSTEM, "FileSystemType": "LUSTRE", "Lifecycle": "AVAILABLE", "DNSName": DNS,
            "LustreConfiguration": {"MountName": "abcdefgh", "DeploymentType": "PERSISTENT_2"}}]})
        sent: dict[str, list[dict[str, Any]]] = {"UpdateCluster": [], "BatchReplaceClusterNodes": [],
                                                 "BatchRebootClusterNodes": []}
        sagemaker = aws.client("sagemaker")

        def fake(operation: str, respond) -> None:
            def handler(params: dict[str, Any], **_: Any):  # noqa: ANN202
                params = json.loads(params["body"])  # the request as sent (SageMaker speaks JSON)
                assert problems(operation, params) == [], problems(operation, params)
                sent[operation].append(params)
                from botocore.awsrequest import AWSResponse

                return AWSResponse("https://stub", 200, {}, None), {**respond(params),
                                                                    "ResponseMetadata": {"HTTPStatusCode": 200}}

            sagemaker.meta.events.register(f"before-call.sagemaker.{operation}", handler)

        fake("UpdateCluster", lambda params: {"ClusterArn": "arn"})
        fake("BatchReplaceClusterNodes", lambda params: {
            "Successful": [n for n in params["NodeIds"] if n != GONE],
            "Failed": [{"NodeId": GONE, "ErrorCode": "InstanceIdNotFound", "Message": "no such node"}]
            if GONE in params["NodeIds"] else []})
        fake("BatchRebootClusterNodes", lambda params: {"Successful": params["NodeIds"], "Failed": []})
        yield {"aws": aws, "subnet": subnet, "sent": sent, "home": tmp_path / "home", "tmp": tmp_path}


def spec_file(world: dict[str, Any]) -> str:
    import yaml

    spec = preset("p5")
    spec.storage = StorageSpec(lustre=[LustreSpec(file_system_id=FILE_SYSTEM)])
    path = world["tmp"] / "p5.yaml"
    path.write_text(yaml.safe_dump(dataclasses.asdict(spec)))
    return str(path)


def created(world: dict[str, Any], said: list[str]) -> HyperPodCluster:
    provider = HyperPodProvider(aws=world["aws"])
    plan = provider.plan(ClusterRequest(name="hp", provider="hyperpod", spec_file=spec_file(world),
                                        subnet_id=world["subnet"]["SubnetId"], execution_role=ROLE))
    prepared = provider.prepare(plan, said.append)
    assert prepared.ok, [str(f) for f in prepared.findings]
    return provider.apply(prepared, said.append, poll_seconds=0)


def test_create_describe_resize_replace_delete(world) -> None:
    said: list[str] = []
    cluster = created(world, said)
    aws, client = world["aws"], world["aws"].client("sagemaker")
    # The lifecycle set went to the planned prefix, byte for byte, the file system's names in its parameters.
    prefix = cluster.state.lifecycle_uri
    bucket, key = prefix[len("s3://"):].split("/", 1)
    parameters = json.loads(aws.client("s3").get_object(Bucket=bucket, Key=key + "clusterkit-lifecycle.json")
                            ["Body"].read())
    assert parameters["lustre"] == {"file_system_id": FILE_SYSTEM, "dns_name": DNS, "mount_name": "abcdefgh",
                                    "mount_dir": "/fsx"}
    assert parameters["clusterkit"]["venv"].startswith("/fsx/clusterkit/venv-")
    # The nodes' security group lets all traffic in from itself, and the cluster uses it.
    group = aws.client("ec2").describe_security_groups(GroupIds=[cluster.state.security_group_id])["SecurityGroups"][0]
    assert group["IpPermissions"][0]["UserIdGroupPairs"][0]["GroupId"] == group["GroupId"]
    described = client.describe_cluster(ClusterName="hp")
    assert described["VpcConfig"]["SecurityGroupIds"] == [group["GroupId"]]
    assert any("uploading on_create.sh" in line for line in said) and "cluster 'hp': InService" in said

    info = open_cluster("hp").describe()  # the record reads back into the provider's state
    assert info.status == "running" and info.provider == "hyperpod"
    by_group: dict[tuple[str, str | None], int] = {}
    for node in info.nodes:
        by_group[(node.node_type, node.queue)] = by_group.get((node.node_type, node.queue), 0) + 1
    assert by_group == {("Controller", None): 1, ("Compute", "train"): 8, ("Compute", "cpu"): 4}
    # moto's ARN ends in the cluster's name, not SageMaker's 12-character id: shown as why, never put on ssh's line.
    assert "ARN 'arn:aws:sagemaker:us-east-1:123456789012:cluster/hp' does not match botocore's ClusterArn pattern" \
        in info.details["controller"]["unreachable"]

    resized = cluster.resize("train", 4, progress=said.append, poll_seconds=0)
    (update,) = world["sent"]["UpdateCluster"]
    assert update["InstanceGroups"][0]["InstanceGroupName"] == "train-p5-48xl"
    assert update["InstanceGroups"][0]["InstanceCount"] == 4
    assert resized.to_dict()["compute_resources"] == [{"name": "train-p5-48xl", "min_count": 4, "max_count": 4}]
    assert json.loads(open(cluster.state.request_file).read())["InstanceGroups"][1]["InstanceCount"] == 4
    with pytest.raises(ClusterkitError, match="HyperPod runs every node all the time"):
        cluster.resize("train", 4, min_count=0)
    with pytest.raises(ClusterkitError) as unknown:
        cluster.resize("train", 4, compute_resource="p5-4xl")
    assert unknown.value.fix == "name one with --compute-resource: p5-48xl"

    # moto names its nodes after their group; SageMaker's are EC2 ids, which a replace must name.
    with pytest.raises(ClusterkitError, match="not a HyperPod node id: 'train-p5-48xl-0'"):
        cluster.replace_nodes([node.name for node in info.nodes if node.queue == "train"])
    assert world["sent"]["BatchReplaceClusterNodes"] == []
    ids = [f"i-{n:017x}" for n in range(30)]
    assert len(cluster.replace_nodes(ids, said.append)) == 30
    assert [len(call["NodeIds"]) for call in world["sent"]["BatchReplaceClusterNodes"]] == [25, 5]
    with pytest.raises(ClusterkitError) as refused:
        cluster.replace_nodes([ids[0], GONE])
    assert f"did not replace 1 node(s): {GONE} (InstanceIdNotFound: no such node)" in refused.value.message
    assert refused.value.fix.endswith("; 1 other(s) are being replaced")

    assert cluster.reboot_nodes(ids[:2], said.append) == tuple(ids[:2])
    assert world["sent"]["BatchRebootClusterNodes"] == [{"ClusterName": "hp", "NodeIds": ids[:2]}]
    assert f"rebooting 2 node(s) of 'hp': {ids[0]}, {ids[1]}" in said and any("replacing 25" in s for s in said)

    deletion = cluster.deletion()
    assert deletion.keeps[0] == f"FSx for Lustre {FILE_SYSTEM} and every file on it"
    assert any("subnets" in kept for kept in deletion.keeps) and not deletion.storage_deleted
    cluster.delete(said.append, poll_seconds=0)
    assert client.list_clusters()["ClusterSummaries"] == [] and "cluster 'hp': deleted" in said
    assert not [g for g in aws.client("ec2").describe_security_groups()["SecurityGroups"]
                if g["GroupId"] == group["GroupId"]]
    assert not (world["home"] / "clusters" / "hp").exists()


def test_a_refused_create_is_one_line_and_leaves_a_record_delete_can_clean(world) -> None:
    refuse(world["aws"].client("sagemaker"), "CreateCluster", "ResourceLimitExceeded",
           "account-level service limit 'ml.p5.48xlarge for cluster usage' is 0 Instances")
    with pytest.raises(ClusterkitError) as raised:
        created(world, [])
    assert raised.value.message == ("SageMaker refused CreateCluster in us-east-1: ResourceLimitExceeded: "
                                    "account-level service limit 'ml.p5.48xlarge for cluster usage' is 0 Instances")
    cluster = open_cluster("hp")
    group = cluster.state.security_group_id
    cluster.delete()
    assert not [g for g in world["aws"].client("ec2").describe_security_groups()["SecurityGroups"]
                if g["GroupId"] == group]


def test_a_failed_cluster_is_one_line_with_sagemakers_reason(world) -> None:
    answer(world["aws"].client("sagemaker"), "DescribeCluster", lambda: {
        "ClusterArn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/abcd1234efgh", "ClusterName": "hp",
        "ClusterStatus": "Failed", "FailureMessage": "Lifecycle scripts failed on instance group controller",
        "InstanceGroups": []})
    with pytest.raises(ClusterkitError) as raised:
        created(world, [])
    assert raised.value.message == ("HyperPod cluster 'hp' failed: Lifecycle scripts failed on instance group "
                                    "controller")


def test_a_subnet_that_is_not_there_is_one_line_and_nothing_is_made(world) -> None:
    provider = HyperPodProvider(aws=world["aws"])
    plan = provider.plan(ClusterRequest(name="hp", provider="hyperpod", spec_file=spec_file(world),
                                        subnet_id="subnet-0123456789abcdef0", execution_role=ROLE))
    with pytest.raises(ClusterkitError) as raised:
        provider.prepare(plan)
    assert raised.value.message.startswith("EC2 refused DescribeSubnets in us-east-1: InvalidSubnetID.NotFound")
    assert "\n" not in raised.value.message and not (world["home"] / "clusters").exists()


def test_the_cli_says_what_delete_keeps_without_asking_aws(tmp_path, monkeypatch) -> None:
    import os
    import subprocess
    import sys

    from clusterkit import registry
    from clusterkit.providers.hyperpod.plan import HyperPodClusterState

    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path))
    registry.save(registry.ClusterRecord("hp", "hyperpod", "2026-12-04T00:00:00+00:00", HyperPodClusterState(
        region="us-east-1", request_file=str(tmp_path / "r.json"), security_group_id="sg-0123456789abcdef0",
        cluster_arn="arn:aws:sagemaker:us-east-1:123456789012:cluster/abcd1234efgh",
        lustre_file_system_id=FILE_SYSTEM)))
    result = subprocess.run([sys.executable, "-m", "clusterkit", "delete-cluster", "hp", "--dry-run", "--output",
                             "json"], capture_output=True, text=True, env=dict(os.environ), timeout=60)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["deletes"][1] == "security group sg-0123456789abcdef0 (made for its nodes)"
    assert shown["keeps"][0] == f"FSx for Lustre {FILE_SYSTEM} and every file on it" and shown["confirm"]

"""`clusterkit replace-node` / `reboot-node`: nodes named as Slurm names them or by instance id, mapped through
ListClusterNodes, sent 25 a call; a dry run prints the exact requests. moto has no BatchReplaceClusterNodes,
BatchRebootClusterNodes or node host names, so those answers come from fakes at the boto3 level, and every request a
fake receives is checked against botocore's model first."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from clusterkit import registry
from clusterkit.cli import main
from clusterkit.errors import ClusterkitError
from clusterkit.providers import open_cluster
from clusterkit.providers.aws.cluster import AwsCluster
from clusterkit.providers.aws.plan import AwsClusterState
from clusterkit.providers.base import NodeAction
from clusterkit.providers.hyperpod import cluster as hyperpod_module
from clusterkit.providers.hyperpod.model import problems
from clusterkit.providers.hyperpod.plan import HyperPodClusterState

NODES = [(f"i-{n:017x}", f"ip-10-1-0-{n}") for n in range(1, 31)]  # (instance id, Slurm name)
UNNAMED = ("i-0000000000000beef", "10.1.9.9")  # a listing without its host name: DescribeClusterNode has its address


@pytest.fixture
def hyperpod(aws_env, tmp_path, monkeypatch) -> Iterator[dict[str, Any]]:
    """A registered HyperPod cluster `hp`, whose SageMaker answers from fakes that check each request."""
    import boto3
    from botocore.awsrequest import AWSResponse
    from moto import mock_aws

    from clusterkit.providers.aws.access import Aws

    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path / "home"))
    request_file = tmp_path / "request.json"
    request_file.write_text(json.dumps({"InstanceGroups": []}))
    registry.save(registry.ClusterRecord("hp", "hyperpod", "2026-12-04T00:00:00+00:00", HyperPodClusterState(
        region="us-east-1", request_file=str(request_file),
        cluster_arn="arn:aws:sagemaker:us-east-1:123456789012:cluster/abcd1234efgh")))
    sent: dict[str, list[dict[str, Any]]] = {}
    with mock_aws():
        aws = Aws("us-east-1", boto3.Session(region_name="us-east-1"))
        monkeypatch.setattr(hyperpod_module, "Aws", lambda region: aws)  # the CLI's cluster asks through it
        sagemaker = aws.client("sagemaker")

        def fake(operation: str, respond) -> None:
            def handler(params: dict[str, Any], **_: Any):  # noqa: ANN202
                params = json.loads(params["body"])
                assert problems(operation, params) == [], problems(operation, params)
                sent.setdefault(operation, []).append(params)
                return AWSResponse("https://stub", 200, {}, None), {**respond(params),
                                                                    "ResponseMetadata": {"HTTPStatusCode": 200}}

            sagemaker.meta.events.register(f"before-call.sagemaker.{operation}", handler)

        summaries = [{"InstanceGroupName": "train-p5-48xl", "InstanceId": node_id, "InstanceType": "ml.p5.48xlarge",
                      "LaunchTime": 1764806400, "InstanceStatus": {"Status": "Running"},
                      "PrivateDnsHostname": f"{name}.ec2.internal"} for node_id, name in NODES]
        summaries.append({"InstanceGroupName": "cpu-c5-9xl", "InstanceId": UNNAMED[0], "InstanceType": "ml.c5.9xlarge",
                          "LaunchTime": 1764806400, "InstanceStatus": {"Status": "Running"}})
        fake("ListClusterNodes", lambda params: {"ClusterNodeSummaries": summaries[:20], "NextToken": "page2"}
             if "NextToken" not in params else {"ClusterNodeSummaries": summaries[20:]})
        fake("DescribeClusterNode", lambda params: {"NodeDetails": {"InstanceId": params["NodeId"],
                                                                    "PrivatePrimaryIp": UNNAMED[1]}})
        refused: dict[str, str] = {}  # node id -> why SageMaker refuses it

        def batch(params: dict[str, Any]) -> dict[str, Any]:
            return {"Successful": [node for node in params["NodeIds"] if node not in refused],
                    "Failed": [{"NodeId": node, "ErrorCode": "InstanceIdInUse", "Message": refused[node]}
                               for node in params["NodeIds"] if node in refused]}

        fake("BatchReplaceClusterNodes", batch)
        fake("BatchRebootClusterNodes", batch)
        yield {"sent": sent, "tmp": tmp_path, "refused": refused}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_slurm_names_and_ids_map_through_list_cluster_nodes_25_a_call(hyperpod) -> None:
    cluster = open_cluster("hp")
    names = [name for _, name in NODES[:28]] + [NODES[28][0], "ip-10-1-9-9", NODES[0][1]]  # one twice
    plan = cluster.plan_node_action(NodeAction.REPLACE, names)
    assert plan.nodes[0] == ("ip-10-1-0-1", NODES[0][0]) and plan.nodes[-1] == ("ip-10-1-9-9", UNNAMED[0])
    assert len(plan.nodes) == 30
    assert [len(request.node_ids) for request in plan.requests] == [25, 5]
    for request in plan.requests:
        assert problems("BatchReplaceClusterNodes", {"ClusterName": request.cluster_name,
                                                     "NodeIds": list(request.node_ids)}) == []
    assert "BatchReplaceClusterNodes" not in hyperpod["sent"]  # a plan asks, changes nothing
    assert len(hyperpod["sent"]["ListClusterNodes"]) == 2  # both pages
    assert hyperpod["sent"]["DescribeClusterNode"] == [{"ClusterName": "hp", "NodeId": UNNAMED[0]}]
    done = cluster.act_on_nodes(plan)
    assert [call["NodeIds"] for call in hyperpod["sent"]["BatchReplaceClusterNodes"]] == [
        list(request.node_ids) for request in plan.requests]
    assert len(done) == 30


def test_instance_ids_alone_need_no_lookup(hyperpod) -> None:
    plan = open_cluster("hp").plan_node_action(NodeAction.REBOOT, [NODES[0][0]])
    assert [request.to_dict() for request in plan.requests] == [
        {"operation": "batch_reboot_cluster_nodes", "ClusterName": "hp", "NodeIds": [NODES[0][0]]}]
    assert hyperpod["sent"] == {}


def test_dry_run_prints_the_exact_requests_and_sends_none(hyperpod, capsys) -> None:
    code, out, err = run(capsys, "replace-node", "hp", "ip-10-1-0-3", NODES[4][0], "--dry-run", "--output", "json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["dry_run"] is True and shown["action"] == "replace"
    assert shown["nodes"] == [{"name": "ip-10-1-0-3", "node_id": NODES[2][0]},
                              {"name": NODES[4][0], "node_id": NODES[4][0]}]
    assert shown["requests"] == [{"operation": "batch_replace_cluster_nodes", "ClusterName": "hp",
                                  "NodeIds": [NODES[2][0], NODES[4][0]]}]
    assert "BatchReplaceClusterNodes" not in hyperpod["sent"]
    code, out, _ = run(capsys, "reboot-node", "hp", "ip-10-1-0-3", "--dry-run")
    assert code == 0 and f"would call batch_reboot_cluster_nodes(ClusterName='hp', NodeIds=['{NODES[2][0]}'])" in out


def test_the_cli_sends_what_the_dry_run_showed(hyperpod, capsys) -> None:
    code, out, err = run(capsys, "reboot-node", "hp", "ip-10-1-0-3", "ip-10-1-0-4", "--output", "json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["done"] == [NODES[2][0], NODES[3][0]] and shown["dry_run"] is False
    assert hyperpod["sent"]["BatchRebootClusterNodes"] == [{"ClusterName": "hp", "NodeIds": shown["done"]}]
    code, out, err = run(capsys, "replace-node", "hp", NODES[0][0])
    assert code == 0 and f"1 node(s) being replaced: {NODES[0][0]}" in out and "replacing 1 node(s)" in err


@pytest.mark.parametrize("hostile", [
    "ip-10-1-0-3\nip-10-1-0-4", "$(touch /tmp/pwned)", "ip-10-1-0-3'; rm -rf /", 'ip-"10"', "ip-10-1-0-3\u2028",
    "ip-10-1-0-3\x9b", "i-" + "a" * 100_000, "", "ip-10-1-0-300",
])
def test_a_hostile_node_name_is_one_line_and_nothing_is_asked(hyperpod, capsys, hostile: str) -> None:
    code, out, err = run(capsys, "replace-node", "hp", "ip-10-1-0-3", hostile)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "is not a node name of HyperPod cluster 'hp'" in err
    assert "(give its Slurm name (ip-10-1-2-3" in err and len(err) < 800
    assert hyperpod["sent"] == {}  # refused before SageMaker was asked anything


def test_a_name_the_cluster_does_not_have_is_one_line_and_nothing_is_sent(hyperpod, capsys) -> None:
    code, out, err = run(capsys, "replace-node", "hp", "ip-10-1-0-3", "ip-10-7-7-7")
    assert code == 1 and "HyperPod cluster 'hp' has no node named ip-10-7-7-7" in err
    assert "BatchReplaceClusterNodes" not in hyperpod["sent"]


def test_a_node_hyperpod_refuses_is_named_with_its_reason(hyperpod) -> None:
    cluster = open_cluster("hp")
    hyperpod["refused"][NODES[1][0]] = "being replaced"
    with pytest.raises(ClusterkitError) as refused:
        cluster.replace_nodes([NODES[0][0], NODES[1][0]])
    assert refused.value.message == (f"HyperPod did not replace 1 node(s): {NODES[1][0]} "
                                     "(InstanceIdInUse: being replaced)")
    assert refused.value.fix.endswith("; 1 other(s) are being replaced")


def test_providers_that_cannot_say_so_in_one_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path))
    registry.save(registry.ClusterRecord("train", "aws", "2026-11-30T00:00:00+00:00",
                                         AwsClusterState(region="us-east-1", config_file="x", stack_id="s")))
    assert isinstance(open_cluster("train"), AwsCluster)
    code, out, err = run(capsys, "replace-node", "train", "queue1-st-p5-1", "--dry-run")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "cluster 'train' is a ParallelCluster cluster: clusterkit cannot replace its nodes by name" in err
    assert "State=DOWN" in err  # the fix: ParallelCluster's own way
    code, out, err = run(capsys, "reboot-node", "host", "n1")
    assert code == 1 and "clusterkit cannot reboot its nodes by name" in err and "Action:Reboot" in err

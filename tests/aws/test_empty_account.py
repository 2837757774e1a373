"""From an account with only its default VPC (every subnet public) to a cluster and back, for the presets.

AWS is moto (CloudFormation deploys clusterkit's prerequisites stack; moto_gaps fills the resource types it
lacks); ParallelCluster's own dry run runs for real on the configs (tests/aws/parallelcluster_world.py fills
moto's gaps for it); ParallelCluster's create, describe and delete are tests/aws/fake_backend.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterkit import registry
from clusterkit.cli import main
from clusterkit.cluster.prerequisites import CREATED_FOR_TAG, LAYOUT, LAYOUT_TAG
from clusterkit.findings import Finding, Level

from .conftest import parallelcluster_world, use_fake_parallelcluster
from .fake_backend import FakeParallelCluster

pytestmark = pytest.mark.slow
REGION = "us-east-1"
PRESETS = ("p4de", "g5", "trn1")


class DryRunForReal(FakeParallelCluster):
    """ParallelCluster's own dry run (under moto); create, describe and delete as the fake does them."""

    def __init__(self) -> None:
        super().__init__()
        self.dry_runs: list[list[Finding]] = []

    def dry_run(self, name: str, config: dict[str, Any], region: str, suppress: tuple[str, ...] = ()) -> list[Finding]:
        from clusterkit.providers.aws.backend import ParallelClusterBackend

        self.calls.append(("dry_run", name, config))
        self.suppressed.append(tuple(suppress))
        findings = ParallelClusterBackend().dry_run(name, config, region, suppress=suppress)
        self.dry_runs.append(findings)
        return findings


@pytest.fixture(scope="module")
def empty_world(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    for world in parallelcluster_world(tmp_path_factory, empty_account=True):
        world.region(REGION)  # the region's images and gaps, before any test asks
        yield world


@pytest.fixture
def backend(empty_world: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> DryRunForReal:
    return use_fake_parallelcluster(DryRunForReal(), monkeypatch, tmp_path / "home")


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def account() -> dict[str, list[str]]:
    """What the account holds, by kind (ids): every kind a create could make."""
    import boto3

    ec2, region = boto3.client("ec2", region_name=REGION), {"region_name": REGION}
    return {
        "vpcs": sorted(v["VpcId"] for v in ec2.describe_vpcs()["Vpcs"]),
        "subnets": sorted(s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]),
        "security_groups": sorted(g["GroupId"] for g in ec2.describe_security_groups()["SecurityGroups"]),
        "nat_gateways": sorted(n["NatGatewayId"] for n in ec2.describe_nat_gateways()["NatGateways"]
                               if n["State"] != "deleted"),
        "addresses": sorted(a["AllocationId"] for a in ec2.describe_addresses()["Addresses"]),
        "network_interfaces": sorted(i["NetworkInterfaceId"]
                                     for i in ec2.describe_network_interfaces()["NetworkInterfaces"]),
        "stacks": sorted(s["StackName"] for s in boto3.client("cloudformation", **region).describe_stacks()["Stacks"]),
        "databases": sorted(d["DBInstanceIdentifier"]
                            for d in boto3.client("rds", **region).describe_db_instances()["DBInstances"]),
        "secrets": sorted(s["ARN"] for s in boto3.client("secretsmanager", **region).list_secrets()["SecretList"]),
        "buckets": sorted(b["Name"] for b in boto3.client("s3", **region).list_buckets()["Buckets"]),
        "file_systems": sorted(f["FileSystemId"]
                               for f in boto3.client("fsx", **region).describe_file_systems()["FileSystems"]),
    }


def added(before: dict[str, list[str]], after: dict[str, list[str]]) -> dict[str, list[str]]:
    return {kind: sorted(set(after[kind]) - set(before[kind]))
            for kind in after if set(after[kind]) - set(before[kind])}


def test_the_account_has_only_its_default_vpc(empty_world: Any) -> None:
    import boto3

    subnets = boto3.client("ec2", region_name=REGION).describe_subnets()["Subnets"]
    assert subnets and all(subnet["MapPublicIpOnLaunch"] for subnet in subnets)
    assert len(account()["vpcs"]) == 1


def test_the_account_dry_run_creates_nothing_and_prints_parallelclusters_findings(
        backend: DryRunForReal, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    before = account()
    template_file = tmp_path / "prerequisites.yaml"
    code, out, err = run(capsys, "create-cluster", "--preset", "p4de", "--name", "train", "--account-dry-run",
                         "--output-config", str(tmp_path / "cluster.yaml"),
                         "--output-prerequisites", str(template_file))
    assert code == 0, err
    assert added(before, account()) == {}
    assert not registry.exists("train")
    assert [call[0] for call in backend.calls] == ["dry_run"]
    # ParallelCluster's findings, as it reported them, among the printed ones.
    reported = backend.dry_runs[0]
    printed = out + err  # with --output-config the report goes to stdout
    missing = [str(f) for f in reported if str(f) not in printed]
    assert reported and missing == [], printed
    assert "dry run of the config with subnet subnet-" in printed and "standing in for the prerequisites" in printed
    assert "create the prerequisites stack clusterkit-prerequisites-train (network, accounting database" in printed
    assert "account dry run: nothing was created in us-east-1" in printed
    template = yaml.safe_load(template_file.read_text())
    assert {"Vpc", "PrivateSubnet", "NatGateway", "S3Endpoint", "Database", "DatabaseSecret"} <= set(
        template["Resources"])
    code, out, _ = run(capsys, "create-cluster", "--preset", "p4de", "--name", "train", "--account-dry-run",
                       "--output", "json")
    assert code == 0 and added(before, account()) == {}
    assert json.loads(out)["details"]["prerequisites"]["parameters"]["AvailabilityZone"] in ("us-east-1b",
                                                                                          "us-east-1c")


@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_from_an_empty_account_to_a_cluster_and_back(backend: DryRunForReal, capsys: pytest.CaptureFixture,
                                                              preset: str) -> None:
    import boto3

    before = account()
    code, out, err = run(capsys, "create-cluster", "--preset", preset, "--name", f"e2e-{preset}")
    assert code == 0, err
    stack_name = f"clusterkit-prerequisites-e2e-{preset}"
    assert f"{stack_name}: CREATE_COMPLETE" in err
    stack = boto3.client("cloudformation", region_name=REGION).describe_stacks(StackName=stack_name)["Stacks"][0]
    assert {"Key": LAYOUT_TAG, "Value": LAYOUT} in stack["Tags"]
    assert {"Key": CREATED_FOR_TAG, "Value": f"e2e-{preset}"} in stack["Tags"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}

    # ParallelCluster's dry run passed twice: before the stack (a stand-in subnet), and on the config created.
    assert [call[0] for call in backend.calls] == ["dry_run", "dry_run", "create"]
    assert [[f for f in findings if f.level is Level.ERROR] for findings in backend.dry_runs] == [[], []]
    config = backend.calls[-1][2]
    assert config["HeadNode"]["Networking"] == {"SubnetId": outputs["PublicSubnetId"],
                                                "AdditionalSecurityGroups": [outputs["DatabaseClientSecurityGroupId"]]}
    assert {s for q in config["Scheduling"]["SlurmQueues"] for s in q["Networking"]["SubnetIds"]} == {
        outputs["PrivateSubnetId"]}
    private = boto3.client("ec2", region_name=REGION).describe_subnets(SubnetIds=[outputs["PrivateSubnetId"]])
    assert private["Subnets"][0]["MapPublicIpOnLaunch"] is False
    assert private["Subnets"][0]["AvailabilityZone"] == outputs["AvailabilityZone"]
    assert config["Scheduling"]["SlurmSettings"]["Database"] == {
        "Uri": outputs["DatabaseUri"], "UserName": "clusterkit", "PasswordSecretArn": outputs["DatabaseSecretArn"]}

    code, out, _ = run(capsys, "describe-cluster", f"e2e-{preset}", "--output", "json")
    described = json.loads(out)
    assert (described["status"], described["prerequisites_stack"]) == ("running", stack_name)

    code, out, err = run(capsys, "delete-cluster", f"e2e-{preset}", "--yes")
    assert code == 0, err
    # The kept FSx file system lives in the stack's network: AWS could not delete it, so clusterkit keeps it and
    # says why and what it costs.
    assert f"keeping prerequisites stack {stack_name} (still used by eni-" in err and "/h while it exists" in err
    left = added(before, account())
    assert set(left) >= {"file_systems", "stacks"} and left["stacks"] == [stack_name]
    assert not registry.exists(f"e2e-{preset}")
    # Once the file system goes (by hand: it holds the data), the stack can go, and nothing but kept data is left.
    (file_system,) = left["file_systems"]
    ec2 = boto3.client("ec2", region_name=REGION)
    boto3.client("fsx", region_name=REGION).delete_file_system(FileSystemId=file_system)
    for interface in ec2.describe_network_interfaces()["NetworkInterfaces"]:
        if interface["Description"] == f"ENI for FSx file system {file_system}":
            ec2.delete_network_interface(NetworkInterfaceId=interface["NetworkInterfaceId"])
    boto3.client("cloudformation", region_name=REGION).delete_stack(StackName=stack_name)
    # The database's password (kept with its final snapshot) and the account's node-scripts bucket.
    assert set(added(before, account())) <= {"secrets", "buckets"}


def test_with_storage_it_may_delete_only_the_kept_data_stores_remain(backend: DryRunForReal,
                                                                     capsys: pytest.CaptureFixture,
                                                                     tmp_path: Path) -> None:
    import boto3

    spec = yaml.safe_load((Path(__file__).resolve().parents[2] / "cluster-configs" / "p4de.yaml").read_text())
    spec["storage"]["lustre"][0]["deletion_policy"] = "Delete"
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    before = account()
    code, _, err = run(capsys, "create-cluster", "--file", str(spec_file), "--name", "scratch")
    assert code == 0, err
    code, out, _ = run(capsys, "delete-cluster", "scratch", "--dry-run")
    assert "prerequisites stack clusterkit-prerequisites-scratch: its network and NAT gateway" in out
    assert "the accounting database's final snapshot (DeletionPolicy Snapshot) and its password secret" in out
    code, out, err = run(capsys, "delete-cluster", "scratch", "--yes", "--delete-storage")
    assert code == 0, err
    assert "deleting prerequisites stack clusterkit-prerequisites-scratch" in err
    # Left: the database's password secret (AWS would also keep its final snapshot; moto takes none) and the
    # node-scripts bucket, which every cluster of the account shares.
    left = added(before, account())
    assert set(left) <= {"secrets", "buckets"} and len(left["secrets"]) == 1
    secret = boto3.client("secretsmanager", region_name=REGION).describe_secret(SecretId=left["secrets"][0])
    assert "Slurm accounting database password" in secret["Description"]


def test_a_second_cluster_reuses_the_stack_and_the_first_delete_keeps_it(backend: DryRunForReal,
                                                                         capsys: pytest.CaptureFixture) -> None:
    assert run(capsys, "create-cluster", "--preset", "p4de", "--name", "first")[0] == 0
    code, out, err = run(capsys, "create-cluster", "--preset", "p4de", "--name", "second", "--output", "json")
    assert code == 0, out + err
    chosen = json.loads(out)["plan"]["details"]["chosen"]
    assert chosen["prerequisites_stack"] == "clusterkit-prerequisites-first (made earlier, reused)"
    code, out, _ = run(capsys, "delete-cluster", "first", "--dry-run", "--output", "json")
    assert any("cluster second uses it too" in item for item in json.loads(out)["keeps"])
    code, _, err = run(capsys, "delete-cluster", "first", "--yes")
    assert code == 0 and "keeping prerequisites stack clusterkit-prerequisites-first (cluster second uses it" in err
    # The second cluster's delete keeps it too (its create did not make it), and says what it costs.
    code, _, err = run(capsys, "delete-cluster", "second", "--yes")
    assert code == 0 and "keeping prerequisites stack clusterkit-prerequisites-first (made earlier for another " \
        "cluster; it costs about $0.09/h while it exists; delete it in CloudFormation once nothing uses it)" in err

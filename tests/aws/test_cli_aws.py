"""The cluster verbs on AWS end to end: moto for AWS, a fake in place of ParallelCluster."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from clusterkit import registry
from clusterkit.cli import main
from clusterkit.findings import Finding, Level

from .conftest import REGION, answer, answer_reservations, private_subnets, reservation, use_fake_parallelcluster
from .fake_backend import FakeParallelCluster


@pytest.fixture
def backend(mocked: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeParallelCluster:
    import boto3

    private_subnets(boto3.client("ec2", region_name=REGION), "us-east-1b", "us-east-1c")
    return use_fake_parallelcluster(FakeParallelCluster(), monkeypatch, tmp_path / "home")


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def create(capsys: pytest.CaptureFixture, *extra: str) -> tuple[int, str, str]:
    source = () if "--file" in extra else ("--preset", "p4de")
    return run(capsys, "create-cluster", *source, "--name", "train", "--region", REGION, *extra)


def test_create_describe_list_update_delete(backend: FakeParallelCluster, capsys: pytest.CaptureFixture,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = create(capsys)
    assert code == 0, err
    assert out.startswith("cluster 'train' is running in us-east-1; head node 10.0.0.10")
    assert "ParallelCluster dry run" in err and "chose availability_zone: us-east-1" in err
    assert "train: CREATE_COMPLETE" in err
    assert [call[0] for call in backend.calls] == ["dry_run", "dry_run", "create"]  # again with the database
    config = backend.calls[-1][2]
    assert config["HeadNode"]["Networking"]["SubnetId"].startswith("subnet-")
    assert config["HeadNode"]["Networking"]["SubnetId"] != "subnet-00000000000000000"

    record = registry.load("train")
    assert record.provider == "aws" and record.details["region"] == REGION
    assert yaml.safe_load(Path(record.details["config_file"]).read_text()) == config

    code, out, _ = run(capsys, "describe-cluster", "train", "--output", "json")
    described = json.loads(out)
    assert (described["provider"], described["status"], described["stack_status"]) == ("aws", "running",
                                                                                        "CREATE_COMPLETE")
    code, out, _ = run(capsys, "describe-cluster", "train")
    assert out.startswith("cluster train (aws): running\n")
    assert "region: us-east-1\n" in out and "stack_status: CREATE_COMPLETE\n" in out and "i-0head" in out

    code, out, _ = run(capsys, "list-clusters", "--output", "json")
    assert [(c["name"], c["provider"], c["status"]) for c in json.loads(out)] == [("train", "aws", "running")]

    code, out, err = run(capsys, "update-cluster", "train", "--queue", "train", "--max-count", "8",
                         "--min-count", "2", "--output", "json")
    assert code == 0, err
    assert json.loads(out)["compute_resources"] == [{"name": "p4de-24xl", "min_count": 2, "max_count": 8}]
    saved = yaml.safe_load(Path(record.details["config_file"]).read_text())
    resized = saved["Scheduling"]["SlurmQueues"][0]["ComputeResources"][0]
    assert (resized["MinCount"], resized["MaxCount"]) == (2, 8)

    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal
    code, _, err = run(capsys, "delete-cluster", "train")
    assert code == 1
    assert err.strip() == ("error: deleting cluster 'train' needs confirmation and there is no terminal to ask "
                           "(see what it deletes with --dry-run, then pass --yes)")
    assert registry.exists("train")

    code, out, _ = run(capsys, "delete-cluster", "train", "--yes", "--output", "json")
    assert code == 0 and json.loads(out)["deleted"] is True
    assert not registry.exists("train") and not Path(record.details["config_file"]).exists()
    assert backend.calls[-1][0] == "delete"


def test_create_json_output(backend: FakeParallelCluster, capsys: pytest.CaptureFixture) -> None:
    code, out, err = create(capsys, "--output", "json")
    assert code == 0 and err == ""
    result = json.loads(out)
    chosen = result["plan"]["details"]["chosen"]
    assert result["status"] == "running" and chosen["availability_zone"] in ("us-east-1b", "us-east-1c")
    assert any(f["path"] == "parallelcluster.DeletionPolicyValidator" for f in result["plan"]["findings"])
    # What was created is what the plan held, with the accounting database's stack outputs in place of placeholders.
    planned, created = result["plan"]["config"], backend.calls[-1][2]
    stack = result["plan"]["details"]["prerequisites"]["stack"]
    import boto3

    outputs = {o["OutputKey"]: o["OutputValue"] for o in boto3.client("cloudformation", region_name=REGION)
               .describe_stacks(StackName=stack)["Stacks"][0]["Outputs"]}
    assert created["Scheduling"]["SlurmSettings"]["Database"] == {
        "Uri": outputs["DatabaseUri"], "UserName": "clusterkit", "PasswordSecretArn": outputs["DatabaseSecretArn"]}
    assert created["HeadNode"]["Networking"]["AdditionalSecurityGroups"] == [outputs["DatabaseClientSecurityGroupId"]]
    for config in (planned, created):
        del config["Scheduling"]["SlurmSettings"]["Database"]
        config["HeadNode"]["Networking"].pop("AdditionalSecurityGroups", None)
    assert planned == created


def test_findings_stop_the_create_before_anything_is_made(backend: FakeParallelCluster,
                                                          capsys: pytest.CaptureFixture) -> None:
    code, out, err = create(capsys, "--key-name", "nobody", "--output", "json")
    assert code == 1
    result = json.loads(out)
    assert result["created"] is False
    assert [f["path"] for f in result["findings"] if f["level"] == "error"] == ["ssh.key_name"]
    assert backend.calls == [] and not registry.exists("train")


def test_a_parallelcluster_rejection_is_printed_and_nothing_is_created(backend: FakeParallelCluster,
                                                                       capsys: pytest.CaptureFixture) -> None:
    backend.dry_run_findings = [Finding(Level.ERROR, "parallelcluster.EfaValidator", "EFA needs a placement group")]
    code, _, err = create(capsys)
    assert code == 1
    assert "error: parallelcluster.EfaValidator: EFA needs a placement group" in err
    assert "nothing was created" in err
    assert [call[0] for call in backend.calls] == ["dry_run"] and not registry.exists("train")


def _spec_without_accounting(tmp_path: Path, **changes: object) -> Path:
    spec = yaml.safe_load((Path(__file__).resolve().parents[2] / "cluster-configs" / "p4de.yaml").read_text())
    spec["slurm"]["accounting"] = "none"
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump({**spec, **changes}))
    return spec_file


def test_a_failing_stack_says_why_and_keeps_the_record_for_delete(backend: FakeParallelCluster,
                                                                  capsys: pytest.CaptureFixture,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    from clusterkit.providers.aws import access

    original = access.Aws.client

    def client(self, service: str):  # noqa: ANN001, ANN202
        made = original(self, service)
        if service == "cloudformation" and not getattr(made, "_failing", False):
            made._failing = True
            answer(made, "DescribeStacks", lambda: {"Stacks": [{"StackName": "train", "StackStatus": "CREATE_FAILED",
                                                                "CreationTime": "2026-01-01T00:00:00Z"}]})
            answer(made, "DescribeStackEvents", lambda: {"StackEvents": [{
                "StackId": "s", "EventId": "1", "StackName": "train", "LogicalResourceId": "ComputeFleet",
                "ResourceType": "AWS::EC2::Instance", "Timestamp": "2026-01-01T00:05:00Z",
                "ResourceStatus": "CREATE_FAILED",
                "ResourceStatusReason": "We currently do not have sufficient p4de.24xlarge capacity in the "
                                        "Availability Zone you requested (InsufficientInstanceCapacity)"}]})
        return made

    monkeypatch.setattr(access.Aws, "client", client)
    code, _, err = create(capsys, "--file", str(_spec_without_accounting(tmp_path)))
    assert code == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: stack train: create failed (CREATE_FAILED) at ComputeFleet (AWS::EC2::Instance): "
                           "We currently do not have sufficient p4de.24xlarge capacity")
    assert "try another zone" in last and "clusterkit delete-cluster train" in last
    assert registry.exists("train")


def test_capacity_reservation_flows_into_the_config(backend: FakeParallelCluster, capsys: pytest.CaptureFixture,
                                                    tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clusterkit.providers.aws import access

    original = access.Aws.client

    def client(self, service: str):  # noqa: ANN001, ANN202
        made = original(self, service)
        if service == "ec2" and not getattr(made, "_reserved", False):
            made._reserved = True
            answer_reservations(made, reservation(zone="us-east-1c"))
        return made

    monkeypatch.setattr(access.Aws, "client", client)
    spec = yaml.safe_load((Path(__file__).resolve().parents[2] / "cluster-configs" / "p4de.yaml").read_text())
    spec["queues"][0]["compute"][0]["capacity_reservation_id"] = "cr-0123456789abcdef0"
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    code, out, err = run(capsys, "create-cluster", "--file", str(spec_file), "--name", "train", "-o", "json")
    assert code == 0, out + err
    assert json.loads(out)["plan"]["details"]["chosen"]["availability_zone"] == "us-east-1c"
    resource = backend.calls[-1][2]["Scheduling"]["SlurmQueues"][0]["ComputeResources"][0]
    assert resource["CapacityReservationTarget"] == {"CapacityReservationId": "cr-0123456789abcdef0"}
    assert resource["Networking"]["PlacementGroup"] == {"Enabled": False}


def test_update_of_an_unknown_queue_and_of_a_local_cluster(backend: FakeParallelCluster,
                                                           capsys: pytest.CaptureFixture) -> None:
    assert create(capsys)[0] == 0
    code, _, err = run(capsys, "update-cluster", "train", "--queue", "gpu", "--max-count", "4")
    assert code == 1 and err.strip() == "error: no queue 'gpu' (queues: train, cpu)"
    from clusterkit.providers.local.cluster import LocalCluster
    from clusterkit.providers.local.config import LocalClusterConfig

    registry.save(LocalCluster.from_config(LocalClusterConfig("dev", 2, 2, 0, 4000, 24000, "host")).record)
    code, _, err = run(capsys, "update-cluster", "dev", "--queue", "x", "--max-count", "4")
    assert code == 1 and "is a local cluster, whose size is fixed" in err


def test_dry_run_stays_offline(aws_env: None, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(variable)
    code, out, _ = create(capsys, "--dry-run", "--output", "json")
    assert code == 0 and json.loads(out)["config"]["Region"] == REGION


def test_output_config_is_the_same_bytes_with_and_without_dry_run(backend: FakeParallelCluster,
                                                                  capsys: pytest.CaptureFixture,
                                                                  tmp_path: Path) -> None:
    """When the spec names everything a create would otherwise fill in (here: the subnet and the scripts
    bucket; a custom AMI would be given by id), the dry run writes the config the create uses."""
    import boto3

    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="172.31.192.0/20",
                               AvailabilityZone="us-east-1b")["Subnet"]["SubnetId"]
    spec_file = _spec_without_accounting(tmp_path, scripts_bucket="team-cluster-scripts", subnet_id=subnet)
    dry, real = tmp_path / "dry.yaml", tmp_path / "real.yaml"
    source = ("create-cluster", "--file", str(spec_file), "--name", "train")
    assert run(capsys, *source, "--dry-run", "--output-config", str(dry))[0] == 0
    code, _, err = run(capsys, *source, "--output-config", str(real))
    assert code == 0, err
    assert dry.read_bytes() == real.read_bytes()
    # ... and the cluster's own copy, and what ParallelCluster was given, are that config too.
    record = registry.load("train")
    assert Path(record.details["config_file"]).read_bytes() == real.read_bytes()
    assert yaml.safe_load(real.read_text()) == backend.calls[-1][2]


def test_delete_dry_run_says_what_goes_and_what_stays(backend: FakeParallelCluster,
                                                      capsys: pytest.CaptureFixture) -> None:
    assert create(capsys)[0] == 0
    code, out, _ = run(capsys, "delete-cluster", "train", "--dry-run", "--output", "json")
    plan = json.loads(out)
    assert code == 0 and plan["confirm"] is True and registry.exists("train")
    assert any("CloudFormation stack train" in item for item in plan["deletes"])
    assert any("FsxLustre 'fsx' on /fsx" in item for item in plan["deletes"] + plan["keeps"])
    assert [call[0] for call in backend.calls] == ["dry_run", "dry_run", "create"]  # nothing deleted


def _fsx_of(cluster: str) -> list[dict]:
    import boto3

    return [fs for fs in boto3.client("fsx", region_name=REGION).describe_file_systems()["FileSystems"]
            if {"Key": "parallelcluster:cluster-name", "Value": cluster} in fs.get("Tags", [])]


def test_deleting_a_p4de_cluster_keeps_its_fsx_and_says_so(backend: FakeParallelCluster,
                                                            capsys: pytest.CaptureFixture) -> None:
    assert create(capsys)[0] == 0
    (fsx,) = _fsx_of("train")
    code, out, _ = run(capsys, "delete-cluster", "train", "--dry-run")
    assert code == 0
    assert "and keep:\n  - FsxLustre 'fsx' on /fsx (DeletionPolicy Retain)" in out
    code, out, err = run(capsys, "delete-cluster", "train", "--yes")
    assert code == 0, err
    assert "it keeps: FsxLustre 'fsx' on /fsx (DeletionPolicy Retain)" in err
    assert "kept: FsxLustre 'fsx' on /fsx (DeletionPolicy Retain); the accounting database's final snapshot" in out
    assert [fs["FileSystemId"] for fs in _fsx_of("train")] == [fsx["FileSystemId"]]  # the data outlived the cluster
    assert not registry.exists("train")


def test_storage_that_would_be_deleted_takes_an_explicit_flag(backend: FakeParallelCluster,
                                                              capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    spec = yaml.safe_load((Path(__file__).resolve().parents[2] / "cluster-configs" / "p4de.yaml").read_text())
    spec["storage"]["lustre"][0]["deletion_policy"] = "Delete"
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    code, out, err = run(capsys, "create-cluster", "--file", str(spec_file), "--name", "scratchy", "--dry-run")
    assert code == 0 and "delete-cluster deletes: FsxLustre 'fsx' on /fsx (DeletionPolicy Delete" in err
    assert run(capsys, "create-cluster", "--file", str(spec_file), "--name", "scratchy")[0] == 0
    code, _, err = run(capsys, "delete-cluster", "scratchy", "--yes")
    assert code == 1
    assert err.strip() == ("error: deleting cluster 'scratchy' would delete shared storage and every file on it: "
                           "FsxLustre 'fsx' on /fsx (DeletionPolicy Delete: every file on it is lost) (copy what you "
                           "need, then pass --delete-storage (or set its deletion_policy: Retain and update the "
                           "cluster))")
    assert registry.exists("scratchy") and len(_fsx_of("scratchy")) == 1
    code, out, _ = run(capsys, "delete-cluster", "scratchy", "--yes", "--delete-storage", "--output", "json")
    assert code == 0 and json.loads(out)["storage_deleted"] == [
        "FsxLustre 'fsx' on /fsx (DeletionPolicy Delete: every file on it is lost)"]
    assert _fsx_of("scratchy") == []


def test_the_dry_run_says_what_survives_a_delete(aws_env: None, capsys: pytest.CaptureFixture) -> None:
    code, out, err = create(capsys, "--dry-run")
    assert code == 0
    assert "delete-cluster keeps: FsxLustre 'fsx' on /fsx (DeletionPolicy Retain)" in err
    code, out, _ = create(capsys, "--dry-run", "--output", "json")
    assert json.loads(out)["summary"]["kept_on_delete"] == ["FsxLustre 'fsx' on /fsx (DeletionPolicy Retain)"]


def test_create_uploads_clusterkits_node_scripts_to_their_content_addressed_keys(
        backend: FakeParallelCluster, capsys: pytest.CaptureFixture) -> None:
    import boto3

    from clusterkit.cluster.node_scripts import node_script

    code, out, err = create(capsys, "--output", "json")
    assert code == 0, err
    plan = json.loads(out)["plan"]
    bucket = f"clusterkit-123456789012-{REGION}"
    script, install = node_script("pyxis-enroot.sh"), node_script("clusterkit-venv.sh")
    agent, docker = node_script("clusterkit-agent.sh"), node_script("docker.sh")
    assert plan["uploads"] == {script.url(bucket): str(script.path), install.url(bucket): str(install.path),
                               agent.url(bucket): str(agent.path), docker.url(bucket): str(docker.path)}
    assert f"upload pyxis-enroot.sh to {script.url(bucket)}" in plan["actions"]
    s3 = boto3.client("s3", region_name=REGION)
    assert s3.get_object(Bucket=bucket, Key=script.key)["Body"].read() == script.path.read_bytes()
    assert s3.get_object(Bucket=bucket, Key=docker.key)["Body"].read() == docker.path.read_bytes()
    assert s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]["BlockPublicPolicy"]
    created = backend.calls[-1][2]
    assert [action["Script"] for action in created["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Sequence"]] == \
        [script.url(bucket), install.url(bucket), agent.url(bucket)]
    # ParallelCluster's dry run ran before the upload: it was told not to look for the scripts yet. Before the
    # accounting database existed it did not look for its secret either; the second run, with the database, did.
    assert backend.suppressed == [("AsyncTimedUrlValidator", "PasswordSecretArnValidator"), ("AsyncTimedUrlValidator",)]


def test_a_custom_ami_by_name_is_a_placeholder_offline_and_the_image_at_create(
        backend: FakeParallelCluster, capsys: pytest.CaptureFixture) -> None:
    import boto3

    code, out, _ = create(capsys, "--custom-ami", "team-neuron-ami", "--dry-run", "--output", "json")
    dry = json.loads(out)
    assert code == 0 and dry["config"]["Image"]["CustomAmi"] == "ami-00000000000000000"
    assert any(f["path"] == "image.custom_ami" and "looked up by name at create" in f["message"]
               for f in dry["findings"])
    image_id = boto3.client("ec2", region_name=REGION).register_image(
        Name="team-neuron-ami", RootDeviceName="/dev/sda1",
        BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 100}}])["ImageId"]
    code, out, err = create(capsys, "--custom-ami", "team-neuron-ami", "--output", "json")
    assert code == 0, err
    assert backend.calls[-1][2]["Image"]["CustomAmi"] == image_id
    assert json.loads(out)["plan"]["details"]["chosen"]["image_id"] == image_id


def test_a_public_head_node_and_private_queues_end_to_end(backend: FakeParallelCluster,
                                                          capsys: pytest.CaptureFixture) -> None:
    import boto3

    ec2 = boto3.client("ec2", region_name=REGION)
    subnets = ec2.describe_subnets(Filters=[{"Name": "availability-zone", "Values": ["us-east-1b"]}])["Subnets"]
    public = next(s["SubnetId"] for s in subnets if s.get("MapPublicIpOnLaunch"))
    private = next(s["SubnetId"] for s in subnets if not s.get("MapPublicIpOnLaunch"))
    code, _, err = create(capsys, "--head-subnet-id", public, "--subnet-id", private)
    assert code == 0, err
    config = backend.calls[-1][2]
    assert config["HeadNode"]["Networking"]["SubnetId"] == public
    assert {tuple(q["Networking"]["SubnetIds"]) for q in config["Scheduling"]["SlurmQueues"]} == {(private,)}
    # The other way round the p4de queue would get public IPs, which its four network cards cannot have.
    code, _, err = run(capsys, "create-cluster", "--preset", "p4de", "--name", "other", "--subnet-id", public)
    assert code == 1 and "gives public IPs, which p4de.24xlarge (several network cards) cannot have" in err


def test_the_queues_of_a_multi_subnet_queue_are_known_to_jobs() -> None:
    from clusterkit.cluster import load_spec_data, render_config
    from clusterkit.providers.aws.cluster import queue_instance_types

    from tests.cluster.cluster_spec_helpers import SUBNET, base_data, set_field

    data = set_field(set_field(base_data(), "queues[1].subnet_ids", [SUBNET, "subnet-0123456789abcdef1"]),
                     "storage.lustre", [])
    config = render_config(load_spec_data(data)[0])
    assert queue_instance_types(config) == {"gpu": ["p4de.24xlarge"], "cpu": ["c5.4xlarge"]}


def test_the_offline_dry_run_writes_the_prerequisites_template_beside_the_config(
        aws_env: None, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    config, template = tmp_path / "cluster.yaml", tmp_path / "prerequisites.yaml"
    code, out, err = create(capsys, "--dry-run", "--output-config", str(config), "--output-prerequisites",
                            str(template))
    assert code == 0, err
    assert f"wrote {template}" in out
    resources = yaml.safe_load(template.read_text())["Resources"]
    assert {"Vpc", "PrivateSubnet", "NatGateway", "Database", "DatabaseSecret"} <= set(resources)
    assert "Database" in yaml.safe_load(config.read_text())["Scheduling"]["SlurmSettings"]
    assert "NAT gateway" in out and "accounting database" in out  # their cost per hour in the summary
    code, out, _ = create(capsys, "--dry-run", "--output", "json", "--output-prerequisites", str(template))
    assert code == 0 and json.loads(out)["prerequisites_file"] == str(template)


@pytest.mark.parametrize(("extra", "message"), [
    (("--output-prerequisites", "t.yaml"), "--output-prerequisites writes the template of a dry run"),
    (("--dry-run", "--account-dry-run"), "--dry-run stays offline; --account-dry-run asks the account"),
])
def test_the_dry_run_flags_are_refused_in_one_line(aws_env: None, capsys: pytest.CaptureFixture, extra: tuple[str, ...],
                                                   message: str) -> None:
    code, _, err = create(capsys, *extra)
    assert code != 0 and err.startswith(f"error: {message}") and err.count("\n") == 1


def test_a_template_for_a_spec_that_needs_none_is_refused_and_nothing_written(
        aws_env: None, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    spec_file = _spec_without_accounting(tmp_path, subnet_id="subnet-0123456789abcdef0")
    template = tmp_path / "prerequisites.yaml"
    code, _, err = create(capsys, "--file", str(spec_file), "--dry-run", "--output-prerequisites", str(template))
    assert code == 1 and "needs no prerequisites stack" in err and "drop --output-prerequisites" in err
    assert not template.exists()


def test_the_template_is_not_written_to_a_fifo(aws_env: None, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, _, err = create(capsys, "--dry-run", "--output-prerequisites", str(fifo))
    assert code == 1 and err.count("\n") == 1 and str(fifo) in err

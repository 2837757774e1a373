"""A HyperPod cluster whose spec asks for a new FSx for Lustre file system, under moto: create makes it in the
cluster's subnet and the nodes' security group, follows it to AVAILABLE, mounts it by its names, and names it in the
record at once; delete keeps it (deletion_policy Retain, the default) and says so with its id. moto's FSx has create,
describe and delete but no `Lifecycle` nor mount name: `fill_fsx` adds them at the boto3 level and checks every FSx
request against botocore's model."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from tests.aws.conftest import fill_fsx, refuse

from clusterkit.cluster.presets import preset
from clusterkit.errors import ClusterkitError
from clusterkit.findings import Level
from clusterkit.providers import open_cluster
from clusterkit.providers.hyperpod.cluster import HyperPodCluster, HyperPodProvider
from clusterkit.providers.plan import ClusterRequest

ROLE = "arn:aws:iam::123456789012:role/hyperpod"


@pytest.fixture
def world(aws, tmp_path, monkeypatch) -> dict[str, Any]:  # noqa: ANN001
    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path / "home"))
    subnet = aws.client("ec2").describe_subnets()["Subnets"][0]["SubnetId"]
    return {"aws": aws, "subnet": subnet, "home": tmp_path / "home", "tmp": tmp_path}


def spec_file(world: dict[str, Any], **lustre: object) -> str:
    import yaml

    spec = preset("p4de")  # a new PERSISTENT_2 file system of 4800 GiB, 250 MB/s per TiB
    spec.storage.lustre[0] = dataclasses.replace(spec.storage.lustre[0], **lustre)
    path = world["tmp"] / "p4de.yaml"
    path.write_text(yaml.safe_dump(dataclasses.asdict(spec)))
    return str(path)


def plan(world: dict[str, Any], **lustre: object):  # noqa: ANN201
    provider = HyperPodProvider(aws=world["aws"])
    prepared = provider.prepare(provider.plan(ClusterRequest(
        name="hp", provider="hyperpod", spec_file=spec_file(world, **lustre), subnet_id=world["subnet"],
        execution_role=ROLE)))
    assert prepared.ok, [str(f) for f in prepared.findings]
    return provider, prepared


def created(world: dict[str, Any], said: list[str], **lustre: object) -> HyperPodCluster:
    provider, prepared = plan(world, **lustre)
    return provider.apply(prepared, said.append, poll_seconds=0)


def s3_json(aws: Any, url: str) -> dict[str, Any]:
    bucket, key = url[len("s3://"):].split("/", 1)
    return json.loads(aws.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())


def test_create_makes_the_file_system_mounts_it_by_its_names_and_delete_keeps_it(world) -> None:
    aws = world["aws"]
    sent = fill_fsx(aws.client("fsx"))
    provider, prepared = plan(world)
    planned = prepared.details.file_system_request
    assert planned["SubnetIds"] == [world["subnet"]]  # the dry run after preparing shows the subnet it goes in
    assert any(action.startswith("call fsx create_file_system with create_file_system_request")
               for action in prepared.actions)
    said: list[str] = []
    cluster = provider.apply(prepared, said.append, poll_seconds=0)

    # One CreateFileSystem, the planned request with the nodes' security group in place of the placeholder.
    group = cluster.state.security_group_id
    (request,) = [params for operation, params in sent if operation == "CreateFileSystem"]
    request.pop("ClientRequestToken")  # botocore's idempotency token
    assert request == {**planned, "SecurityGroupIds": [group]}
    assert request["StorageCapacity"] == 4800 and request["LustreConfiguration"] == {
        "DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250, "DataCompressionType": "LZ4"}
    (system,) = aws.client("fsx").describe_file_systems()["FileSystems"]
    file_system = system["FileSystemId"]
    assert {"Key": "clusterkit:cluster", "Value": "hp"} in system["Tags"]
    # Lustre's ports (TCP 988 and 1018-1023) are open within the nodes' group, which the file system is in.
    (rule,) = aws.client("ec2").describe_security_groups(GroupIds=[group])["SecurityGroups"][0]["IpPermissions"]
    assert rule["IpProtocol"] == "-1" and [pair["GroupId"] for pair in rule["UserIdGroupPairs"]] == [group]
    # It was followed to AVAILABLE, with progress, before anything was uploaded or the cluster asked for.
    creating = next(i for i, line in enumerate(said) if line.startswith("creating FSx for Lustre (4800 GiB"))
    available = said.index(f"FSx for Lustre {file_system}: AVAILABLE")
    assert said[creating + 1] == f"FSx for Lustre {file_system}: CREATING" and creating < available
    assert available < min(i for i, line in enumerate(said) if line.startswith(("uploading", "creating HyperPod")))

    # The nodes mount it by its id, DNS and mount names, as an existing one; the lifecycle set's prefix follows them.
    lifecycle = aws.client("sagemaker").describe_cluster(ClusterName="hp")["InstanceGroups"][0]["LifeCycleConfig"]
    assert lifecycle["SourceS3Uri"] == cluster.state.lifecycle_uri != prepared.details.lifecycle_uri
    parameters = s3_json(aws, cluster.state.lifecycle_uri + "clusterkit-lifecycle.json")
    mount_name = system["LustreConfiguration"]["MountName"]
    assert parameters["lustre"] == {"file_system_id": file_system, "dns_name": system["DNSName"],
                                    "mount_name": mount_name, "mount_dir": "/fsx"}
    assert parameters["clusterkit"]["venv"].startswith("/fsx/")
    assert json.loads((world["home"] / "clusters" / "hp" / "clusterkit-lifecycle.json").read_text()) == parameters

    # The record names it; describe reads the record back.
    reopened = open_cluster("hp")
    assert reopened.state.lustre_file_system_id == file_system and reopened.state.lustre_created
    assert reopened.describe().status == "running"

    deletion = reopened.deletion()
    assert deletion.keeps[:2] == (
        f"FSx for Lustre {file_system} and every file on it (made by this cluster's create; deletion_policy Retain: "
        "storage outlives the cluster)",
        f"security group {group} (the kept file system's network interfaces are in it; delete it once the file "
        "system is gone)")
    assert not deletion.storage_deleted and not any(group in item for item in deletion.deletes)
    said.clear()
    reopened.delete(said.append, poll_seconds=0)
    assert f"keeping FSx for Lustre {file_system} (deletion_policy Retain) and security group {group}, which its " \
           "network interfaces are in" in said
    assert [s["FileSystemId"] for s in aws.client("fsx").describe_file_systems()["FileSystems"]] == [file_system]
    assert aws.client("ec2").describe_security_groups(GroupIds=[group])["SecurityGroups"]
    assert aws.client("sagemaker").list_clusters()["ClusterSummaries"] == []
    assert "DeleteFileSystem" not in [operation for operation, _ in sent]


def test_deletion_policy_delete_deletes_it_with_the_cluster_and_says_so_first(world) -> None:
    aws = world["aws"]
    sent = fill_fsx(aws.client("fsx"))
    cluster = created(world, [], deletion_policy="Delete")
    file_system, group = cluster.state.lustre_file_system_id, cluster.state.security_group_id
    deletion = cluster.deletion()
    assert deletion.storage_deleted == (f"FSx for Lustre {file_system} and every file on it (made by this "
                                        "cluster's create; deletion_policy Delete)",)
    assert deletion.storage_deleted[0] in deletion.deletes
    said: list[str] = []
    cluster.delete(said.append, poll_seconds=0)
    assert [params["FileSystemId"] for operation, params in sent if operation == "DeleteFileSystem"] == [file_system]
    assert said[said.index(f"deleting FSx for Lustre {file_system} (deletion_policy Delete)") + 1:][:1] == [
        f"FSx for Lustre {file_system}: deleted"]
    assert aws.client("fsx").describe_file_systems()["FileSystems"] == []
    assert not [g for g in aws.client("ec2").describe_security_groups()["SecurityGroups"] if g["GroupId"] == group]


def test_a_failed_file_system_is_one_line_with_fsxs_reason_and_the_record_keeps_it(world) -> None:
    aws = world["aws"]
    fill_fsx(aws.client("fsx"), ("CREATING", "FAILED"),
             failure="The file system could not be created\nbecause the subnet has no free IP addresses.")
    with pytest.raises(ClusterkitError) as raised:
        created(world, [])
    (system,) = aws.client("fsx").describe_file_systems()["FileSystems"]
    file_system = system["FileSystemId"]
    assert raised.value.message == (f"FSx for Lustre {file_system} of cluster 'hp' is FAILED: The file system could "
                                    "not be created because the subnet has no free IP addresses.")
    assert "clusterkit delete-cluster hp" in raised.value.fix and file_system in raised.value.fix
    assert aws.client("sagemaker").list_clusters()["ClusterSummaries"] == []  # no cluster was asked for
    record = open_cluster("hp")
    assert record.state.lustre_file_system_id == file_system and record.state.lustre_created
    assert record.deletion().keeps[0].startswith(f"FSx for Lustre {file_system} and every file on it")


def test_a_refused_create_after_the_file_system_was_made_leaves_it_in_the_record(world) -> None:
    aws = world["aws"]
    fill_fsx(aws.client("fsx"))
    refuse(aws.client("sagemaker"), "CreateCluster", "ResourceLimitExceeded", "no ml.p4de.24xlarge for you")
    with pytest.raises(ClusterkitError, match="SageMaker refused CreateCluster"):
        created(world, [])
    (system,) = aws.client("fsx").describe_file_systems()["FileSystems"]
    cluster = open_cluster("hp")
    assert cluster.state.lustre_file_system_id == system["FileSystemId"] and cluster.state.cluster_arn is None
    said: list[str] = []
    cluster.delete(said.append, poll_seconds=0)
    assert any(line.startswith(f"keeping FSx for Lustre {system['FileSystemId']}") for line in said)
    assert aws.client("fsx").describe_file_systems()["FileSystems"] == [system]


def test_names_fsx_gives_that_the_lifecycle_script_would_refuse_stop_the_create(world) -> None:
    aws = world["aws"]
    fill_fsx(aws.client("fsx"))

    def hostile(parsed: dict[str, Any], **_: Any) -> None:
        for system in parsed.get("FileSystems", []):
            system["LustreConfiguration"]["MountName"] = "a$(reboot)"

    aws.client("fsx").meta.events.register("after-call.fsx.DescribeFileSystems", hostile)
    with pytest.raises(ClusterkitError, match=r"mount name 'a\$\(reboot\)' the lifecycle script would refuse"):
        created(world, [])
    assert aws.client("sagemaker").list_clusters()["ClusterSummaries"] == []
    assert not list((world["home"] / "clusters" / "hp").glob("create_cluster_request.json"))


@pytest.mark.parametrize(("field", "value", "path"), [
    ("mount_dir", "/fsx\n$(reboot)", "storage.lustre[0].mount_dir"),
    ("mount_dir", "/fsx'; touch /pwned; '", "storage.lustre[0].mount_dir"),
    ("mount_dir", "/fsx\u2028x", "storage.lustre[0].mount_dir"),
    ("mount_dir", "/fsx\x85", "storage.lustre[0].mount_dir"),
    ("name", "fsx$(id)", "create_file_system_request.Tags[0].Value"),
    ("import_path", "s3://bucket/\u2028x", "storage.lustre[0].import_path"),
    ("import_path", "s3://" + "b" * 100_000, "create_file_system_request.LustreConfiguration.ImportPath"),
])
def test_hostile_values_never_reach_the_lifecycle_set_or_aws(world, field, value, path) -> None:
    aws = world["aws"]
    sent = fill_fsx(aws.client("fsx"))
    provider = HyperPodProvider(aws=aws)
    planned = provider.plan(ClusterRequest(name="hp", provider="hyperpod", spec_file=spec_file(world, **{field: value}),
                                           subnet_id=world["subnet"], execution_role=ROLE))
    assert not planned.ok and path in {f.path for f in planned.findings if f.level is Level.ERROR}, \
        [str(f) for f in planned.findings]
    with pytest.raises(ClusterkitError):
        provider.prepare(planned)
    assert sent == [] and not world["home"].exists()


def _cli(home, *args: str) -> Any:
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True,
                          env=dict(os.environ, CLUSTERKIT_HOME=str(home)), timeout=60)


def test_the_cli_dry_runs_show_the_file_system_request_and_what_delete_keeps(tmp_path, monkeypatch) -> None:
    from clusterkit import registry
    from clusterkit.providers.hyperpod.plan import HyperPodClusterState

    result = _cli(tmp_path, "create-cluster", "--provider", "hyperpod", "--name", "hp", "--preset", "p5",
                  "--execution-role", ROLE, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "# new FSx for Lustre: 9600 GiB PERSISTENT_2, 500 MB/s per TiB" in result.stderr
    assert "call fsx create_file_system with create_file_system_request" in result.stderr

    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path))
    file_system = "fs-0123456789abcdef0"
    for policy in ("Retain", "Delete"):
        registry.save(registry.ClusterRecord("hp", "hyperpod", "2026-12-06T00:00:00+00:00", HyperPodClusterState(
            region="us-east-1", request_file=str(tmp_path / "r.json"), security_group_id="sg-0123456789abcdef0",
            lustre_file_system_id=file_system, lustre_created=True, lustre_deletion_policy=policy)))
        result = _cli(tmp_path, "delete-cluster", "hp", "--dry-run", "--output", "json")
        assert result.returncode == 0, result.stderr
        shown = json.loads(result.stdout)
        if policy == "Retain":
            assert shown["keeps"][0].startswith(f"FSx for Lustre {file_system} and every file on it (made by this "
                                                "cluster's create; deletion_policy Retain")
            assert shown["keeps"][1].startswith("security group sg-0123456789abcdef0 (the kept file system's")
            assert shown["storage_deleted"] == []
        else:
            assert shown["storage_deleted"] == [f"FSx for Lustre {file_system} and every file on it (made by this "
                                                "cluster's create; deletion_policy Delete)"]
            assert "security group sg-0123456789abcdef0 (made for its nodes)" in shown["deletes"]
    # Without --delete-storage, deleting storage is refused in one line before anything is asked of AWS.
    result = _cli(tmp_path, "delete-cluster", "hp", "--yes")
    assert result.returncode != 0 and file_system in result.stderr and len(result.stderr.strip().splitlines()) <= 2


def test_a_kept_file_system_keeps_the_network_it_is_in(world) -> None:
    aws = world["aws"]
    fill_fsx(aws.client("fsx"))
    provider = HyperPodProvider(aws=aws)
    prepared = provider.prepare(provider.plan(ClusterRequest(name="hp", provider="hyperpod", preset="g5",
                                                             execution_role=ROLE)))
    assert prepared.ok and prepared.details.prepared.create_network
    cluster = provider.apply(prepared, poll_seconds=0)
    stack = cluster.state.prerequisites.stack
    assert f"prerequisites stack {stack} (the kept file system is in its network)" in cluster.deletion().keeps
    said: list[str] = []
    cluster.delete(said.append, poll_seconds=0)
    assert any(line.startswith(f"keeping prerequisites stack {stack} (FSx for Lustre "
                               f"{cluster.state.lustre_file_system_id}, kept, is in its network") for line in said)
    (found,) = aws.client("cloudformation").describe_stacks(StackName=stack)["Stacks"]
    assert found["StackStatus"] == "CREATE_COMPLETE"


def test_a_file_system_gone_while_creating_is_one_line(world) -> None:
    aws = world["aws"]
    fill_fsx(aws.client("fsx"))

    def gone(parsed: dict[str, Any], **_: Any) -> None:
        parsed["FileSystems"] = []  # as moto answers for an id it does not have

    aws.client("fsx").meta.events.register("after-call.fsx.DescribeFileSystems", gone)
    with pytest.raises(ClusterkitError) as raised:
        created(world, [])
    assert raised.value.message.endswith("of cluster 'hp' is gone: FSx no longer has it")
    assert open_cluster("hp").state.lustre_created

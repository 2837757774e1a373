"""The `hyperpod` provider's plan: from every preset, a CreateCluster request that botocore's model and moto's
create accept; HyperPod's rules refuse what SageMaker would, naming the field; creating is refused in one line."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from clusterkit.cluster.node_scripts import LIFECYCLE_KEY_PREFIX
from clusterkit.cluster.presets import preset, preset_names
from clusterkit.findings import Level
from clusterkit.providers import provider_named
from clusterkit.providers.hyperpod.model import problems, service_model
from clusterkit.providers.hyperpod.request import PARAMETERS_FILE
from clusterkit.providers.plan import ClusterRequest

ROLE = "arn:aws:iam::123456789012:role/hyperpod"
# moto 5.2's CreateCluster knows an older list of HyperPod's types than botocore's.
MOTO_REFUSES = ("p5e", "p5en", "p6-b200", "trn2")


def plan_of(**fields: object):
    fields.setdefault("name", "hp")
    return provider_named("hyperpod").plan(ClusterRequest(provider="hyperpod", **fields))  # type: ignore[arg-type]


def errors_of(plan) -> dict[str, str]:
    return {f.path: f"{f.rule}: {f.message} (fix: {f.fix})" for f in plan.findings if f.level is Level.ERROR}


def spec_file(tmp_path, base: str = "p5", **changes: object) -> str:
    import yaml

    data = dataclasses.asdict(preset(base))
    for path, value in changes.items():
        target = data
        *parents, last = path.split(".")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[last] = value
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("name", preset_names())
def test_every_presets_request_passes_botocores_model_and_motos_create(name: str, aws_env) -> None:
    import boto3
    from botocore.validate import validate_parameters
    from moto import mock_aws

    plan = plan_of(preset=name, execution_role=ROLE)
    assert plan.ok, errors_of(plan)
    request = plan.details.request
    validate_parameters(request, service_model().operation_model("CreateCluster").input_shape)  # botocore's own
    assert problems("CreateCluster", request) == []
    groups = {group["InstanceGroupName"]: group for group in request["InstanceGroups"]}
    spec = preset(name)
    assert groups["controller"]["SlurmConfig"] == {"NodeType": "Controller"}
    assert groups["controller"]["InstanceType"] == f"ml.{spec.head_node.instance_type}"
    train = groups[f"{spec.queues[0].name}-{spec.queues[0].compute[0].name}"]
    assert train["SlurmConfig"] == {"NodeType": "Compute", "PartitionNames": [spec.queues[0].name]}
    assert train["InstanceCount"] == spec.queues[0].compute[0].max_count
    assert train["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    assert "OnStartDeepHealthChecks" not in groups["controller"]
    assert {group["ExecutionRole"] for group in groups.values()} == {ROLE}
    assert request["NodeRecovery"] == "Automatic"
    # A new FSx for Lustre: FSx's CreateFileSystem, with the spec's settings, valid by botocore's fsx model.
    file_system = plan.details.file_system_request
    (lustre,) = spec.storage.lustre
    assert (file_system is not None) == lustre.is_new
    if file_system is not None:
        validate_parameters(file_system, service_model("fsx").operation_model("CreateFileSystem").input_shape)
        assert problems("CreateFileSystem", file_system, service="fsx") == []
        assert file_system["FileSystemType"] == "LUSTRE"
        assert file_system["StorageCapacity"] == lustre.effective_capacity_gib
        assert file_system["LustreConfiguration"]["DeploymentType"] == lustre.effective_deployment_type
        assert file_system["LustreConfiguration"].get("PerUnitStorageThroughput") == lustre.effective_throughput
        assert {"Key": "clusterkit:cluster", "Value": "hp"} in file_system["Tags"]
    if name in MOTO_REFUSES:
        return
    with mock_aws():
        client = boto3.client("sagemaker", region_name=plan.details.region)
        client.create_cluster(**request)
        nodes = client.list_cluster_nodes(ClusterName=plan.name)["ClusterNodeSummaries"]
        if file_system is not None:
            boto3.client("fsx", region_name=plan.details.region).create_file_system(**file_system)
    assert len(nodes) == sum(group["InstanceCount"] for group in groups.values())


def test_the_file_system_request_names_what_fsx_would_refuse(tmp_path) -> None:
    plan = plan_of(spec_file=spec_file(tmp_path, **{"storage.lustre.0.name": "scratch space!",
                                                     "tags": {"team": "ml"}}), execution_role=ROLE)
    found = errors_of(plan)
    assert "does not match the pattern" in found["create_file_system_request.Tags[0].Value"], found
    assert plan.details.file_system_request["Tags"][:2] == [{"Key": "Name", "Value": "hp-scratch space!"},
                                                            {"Key": "team", "Value": "ml"}]
    # The spec's own rules for a new file system hold on HyperPod too.
    found = errors_of(plan_of(spec_file=spec_file(tmp_path, **{"storage.lustre.0.storage_capacity_gib": 1000}),
                              execution_role=ROLE))
    assert "PERSISTENT_2 capacity must be 1200 or n × 2400 GiB" in found["storage.lustre[0].storage_capacity_gib"]
    found = errors_of(plan_of(spec_file=spec_file(tmp_path, **{"storage.lustre.0.deletion_policy": "Keep"}),
                              execution_role=ROLE))
    assert "unknown deletion policy 'Keep'" in found["storage.lustre[0].deletion_policy"]


def test_the_lifecycle_set_is_uploaded_under_one_hash_of_all_of_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path))
    plan = plan_of(preset="p4de", execution_role=ROLE)
    prefix = plan.details.lifecycle_uri
    assert prefix.startswith(f"s3://sagemaker-clusterkit-123456789012-us-east-1/{LIFECYCLE_KEY_PREFIX}/sha256-")
    assert {group["LifeCycleConfig"]["SourceS3Uri"] for group in plan.details.request["InstanceGroups"]} == {prefix}
    assert sorted(plan.details.uploads) == [prefix + name for name in
                                            ("clusterkit-agent.sh", "clusterkit-lifecycle.json", "clusterkit-venv.sh",
                                             "on_create.sh")]
    ((path, text),) = plan.files.items()
    assert path == str(tmp_path / "clusters" / "hp" / PARAMETERS_FILE) == plan.details.uploads[prefix + PARAMETERS_FILE]
    assert json.loads(text)["nvme_groups"] == ["train-p4de-24xl"]
    # Another cluster's parameters are another set: another prefix.
    other = plan_of(spec_file=spec_file(tmp_path, "p4de", **{"storage.lustre.0.file_system_id":
                                                                      "fs-0123456789abcdef0"}),
                    execution_role=ROLE)
    assert other.details.lifecycle_uri != prefix and json.loads(next(iter(other.files.values())))["lustre"] == {
        "file_system_id": "fs-0123456789abcdef0", "dns_name": "", "mount_name": "", "mount_dir": "/fsx"}


@pytest.mark.parametrize(("changes", "path", "said"), [
    ({"queues.0.compute.0.instance_type": "p4.24xlarge"}, "queues[0].compute[0].instance_type",
     "hyperpod.hyperpod-instance-types: HyperPod offers no ml.p4.24xlarge"),
    ({"head_node.instance_type": "c5.10xlarge"}, "head_node.instance_type", "HyperPod's c5 types: c5.large, "),
    ({"head_node.instance_type": "c7i.4xlarge"}, "head_node.instance_type", "HyperPod has no c7i type"),
    ({"scripts_bucket": "my-bucket"}, "scripts_bucket", "only from buckets named sagemaker-*"),
    ({"queues.0.compute.0.max_count": 7000}, "create_cluster_request.InstanceGroups[1].InstanceCount",
     "7000 is above the maximum 6758"),
    ({"queues.0.capacity_type": "SPOT"}, "queues[0].capacity_type", "HyperPod has no SPOT capacity type"),
    ({"tags": {"team": "ml\u00a7"}}, "create_cluster_request.Tags[0].Value", "does not match the pattern"),
])
def test_hyperpods_rules_refuse_what_sagemaker_would_naming_the_field(tmp_path, changes, path, said) -> None:
    plan = plan_of(spec_file=spec_file(tmp_path, **changes), execution_role=ROLE)
    found = errors_of(plan)
    assert not plan.ok and path in found and said in found[path], found


def test_a_cluster_name_sagemaker_refuses_is_an_error() -> None:
    found = errors_of(plan_of(name="train-", preset="p5", execution_role=ROLE))
    assert "does not match the pattern" in found["create_cluster_request.ClusterName"]


def test_a_missing_or_malformed_execution_role_is_an_error() -> None:
    assert "--execution-role" in errors_of(plan_of(preset="p5"))
    found = errors_of(plan_of(preset="p5", execution_role="hyperpod-role"))
    assert "not an IAM role ARN" in found["--execution-role"]
    assert "create_cluster_request.InstanceGroups[0].ExecutionRole" in found  # and SageMaker's pattern says so too


def test_a_spec_setting_hyperpod_does_not_use_is_a_warning_naming_it(tmp_path) -> None:
    plan = plan_of(spec_file=spec_file(tmp_path, **{"pyxis.enroot_dir": "/scratch/containers"}), execution_role=ROLE)
    (found,) = [f for f in plan.findings if f.path == "pyxis.enroot_dir"]
    assert found.level is Level.WARNING and "/opt/dlami/nvme/enroot" in found.message and plan.ok


def test_hyperthreading_off_is_one_thread_per_core(tmp_path) -> None:
    plan = plan_of(spec_file=spec_file(tmp_path, **{"queues.0.compute.0.disable_hyperthreading": True}),
                   execution_role=ROLE)
    threads = {g["InstanceGroupName"]: g["ThreadsPerCore"] for g in plan.details.request["InstanceGroups"]}
    assert threads == {"controller": 2, "train-p5-48xl": 1, "cpu-c5-4xl": 2}


def test_the_model_check_finds_what_botocores_client_would_not() -> None:
    # botocore's ParamValidator checks minimums and types only; the service refuses the rest.
    request = {"ClusterName": "x", "InstanceGroups": [{
        "InstanceGroupName": "g", "InstanceType": "ml.p9.48xlarge", "InstanceCount": 1, "ThreadsPerCore": 3,
        "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Worker"}}], "NodeRecovery": "Sometimes"}
    found = {problem.path: problem.message for problem in problems("CreateCluster", request)}
    assert set(found) == {"InstanceGroups[0].InstanceType", "InstanceGroups[0].ThreadsPerCore",
                          "InstanceGroups[0].SlurmConfig.NodeType", "NodeRecovery"}
    assert found["InstanceGroups[0].ThreadsPerCore"] == "3 is above the maximum 2"
    typed = problems("CreateCluster", {"ClusterName": "x", "InstanceGroups": [{"InstanceCount": "2"}]})
    assert {p.path for p in typed} == {"InstanceGroups[0].InstanceCount", "InstanceGroups[0].InstanceGroupName",
                                       "InstanceGroups[0].ExecutionRole"}


def _cli(*args: str, home) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", "create-cluster", "--provider", "hyperpod", *args],
                          capture_output=True, text=True, env=dict(os.environ, CLUSTERKIT_HOME=str(home)), timeout=60)


def test_a_dry_run_prints_the_request_whole_and_writes_nothing(tmp_path) -> None:
    subnet = "subnet-0abc1234def567890"
    result = _cli("--name", "hp", "--preset", "trn1", "--execution-role", ROLE, "--subnet-id", subnet,
                  "--dry-run", "--output", "json", home=tmp_path)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    planned = plan_of(name="hp", preset="trn1", execution_role=ROLE, subnet_id=subnet).details
    assert shown["create_cluster_request"] == planned.request
    assert shown["create_cluster_request"]["VpcConfig"]["Subnets"] == [subnet]
    assert shown["create_file_system_request"] == planned.file_system_request
    assert shown["create_file_system_request"]["SubnetIds"] == [subnet]
    assert {f["rule"] for f in shown["findings"]} >= {"hyperpod.vpc"}
    assert len(shown["uploads"]) == 4 and list(tmp_path.iterdir()) == []


def test_a_dry_run_without_a_subnet_says_the_network_is_clusterkits_own(tmp_path) -> None:
    result = _cli("--name", "hp", "--preset", "p5", "--execution-role", ROLE, "--dry-run", "--output", "json",
                  home=tmp_path)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    (vpc,) = [f for f in shown["findings"] if f["rule"] == "hyperpod.vpc" and f["path"] == "subnet_id"]
    assert vpc["level"] == "info" and "clusterkit's prerequisites network" in vpc["message"]
    assert any(action.startswith("choose clusterkit's prerequisites network") for action in shown["actions"])
    assert list(tmp_path.iterdir()) == []


def test_a_table_dry_run_shows_the_request_and_the_groups(tmp_path) -> None:
    result = _cli("--name", "hp", "--preset", "g5", "--execution-role", ROLE, "--dry-run", home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ClusterName"] == "hp"
    assert "# gpu-g5-12xl: 4 x ml.g5.12xlarge (Compute, partition gpu)" in result.stderr

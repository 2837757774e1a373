"""Rendering: golden files per preset, and the details ParallelCluster insists on."""

from __future__ import annotations

from pathlib import Path

import hashlib

import pytest
import yaml
from tests.cluster.cluster_spec_helpers import RESERVATION, SUBNET, base_data, set_field, with_fields

from clusterkit.cluster import load_spec_data, preset, preset_names, render, render_config
from clusterkit.cluster.node_scripts import (DOCKER_VERSION, NVIDIA_CONTAINER_TOOLKIT_VERSION, node_script,
                                             queue_scripts)

from tests.golden import assert_matches_golden

GOLDEN_DIR = Path(__file__).parent / "golden"


@pytest.mark.parametrize("name", preset_names())
def test_preset_matches_golden_file(name: str) -> None:
    assert_matches_golden(render(preset(name)), GOLDEN_DIR / f"{name}.yaml")


def test_render_is_deterministic_and_yaml_equals_dict() -> None:
    spec = preset("p5")
    assert render(spec) == render(preset("p5"))
    assert yaml.safe_load(render(spec)) == render_config(spec)


def _config(changes: dict) -> dict:
    spec, findings = load_spec_data(with_fields(base_data(), changes))
    assert spec is not None, findings
    return render_config(spec)


def _compute(config: dict, queue: int = 0, compute: int = 0) -> dict:
    return config["Scheduling"]["SlurmQueues"][queue]["ComputeResources"][compute]


def test_secure_defaults() -> None:
    config = _config({"ssh.allowed_cidr": None})
    assert config["Imds"] == {"ImdsSupport": "v2.0"}
    assert config["HeadNode"]["Ssh"]["AllowedIps"] == "10.0.0.0/8"
    assert config["HeadNode"]["LocalStorage"]["RootVolume"]["Encrypted"] is True
    for queue in config["Scheduling"]["SlurmQueues"]:
        assert queue["ComputeSettings"]["LocalStorage"]["RootVolume"]["Encrypted"] is True
    assert "GdrSupport" not in render(load_spec_data(base_data())[0])


def test_efa_compute_gets_an_explicit_placement_group() -> None:
    config = _config({})
    assert _compute(config)["Efa"] == {"Enabled": True}
    assert _compute(config)["Networking"] == {"PlacementGroup": {"Enabled": True}}
    assert "Networking" not in _compute(config, queue=1)  # no EFA, no placement group


def test_capacity_block_turns_the_placement_group_off() -> None:
    config = _config({"queues[0].capacity_type": "CAPACITY_BLOCK", "queues[0].compute[0].min_count": 2,
                      "queues[0].compute[0].capacity_reservation_id": RESERVATION})
    compute = _compute(config)
    assert compute["Networking"] == {"PlacementGroup": {"Enabled": False}}
    assert compute["CapacityReservationTarget"] == {"CapacityReservationId": RESERVATION}
    assert config["Scheduling"]["SlurmQueues"][0]["CapacityType"] == "CAPACITY_BLOCK"


def test_reservation_turns_the_placement_group_off_but_a_named_group_wins() -> None:
    assert _compute(_config({"queues[0].compute[0].capacity_reservation_id": RESERVATION}))["Networking"] == {
        "PlacementGroup": {"Enabled": False}}
    named = _config({"queues[0].placement_group": {"name": "my-pg"}})
    assert _compute(named)["Networking"] == {"PlacementGroup": {"Enabled": True, "Name": "my-pg"}}


def test_lustre_defaults_and_existing_file_system() -> None:
    settings = _config({})["SharedStorage"][0]["FsxLustreSettings"]
    assert settings == {"StorageCapacity": 1200, "DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250,
                        "DeletionPolicy": "Retain"}
    existing = _config({"storage.lustre[0]": {"name": "fsx", "mount_dir": "/fsx",
                                              "file_system_id": "fs-0123456789abcdef0"}})
    assert existing["SharedStorage"][0]["FsxLustreSettings"] == {"FileSystemId": "fs-0123456789abcdef0"}


def test_pyxis_and_user_actions_run_in_sequence() -> None:
    config = _config({"queues[0].custom_actions": {"on_node_configured": [{"script": "s3://b/setup.sh",
                                                                          "args": ["-x"]}]}})
    sequence = config["Scheduling"]["SlurmQueues"][0]["CustomActions"]["OnNodeConfigured"]["Sequence"]
    assert sequence[0]["Args"] == ["--role", "compute", "--enroot-dir", "/scratch/enroot"]  # p4de has NVMe
    assert sequence[1]["Script"].endswith("/docker.sh")
    assert sequence[1]["Args"] == ["--docker", DOCKER_VERSION, "--nvidia-container-toolkit",
                                   NVIDIA_CONTAINER_TOOLKIT_VERSION]  # GPUs: docker run --gpus
    assert sequence[2] == {"Script": "s3://b/setup.sh", "Args": ["-x"]}
    pyxis, install, agent = config["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Sequence"]
    assert pyxis["Args"] == ["--role", "head", "--enroot-dir", "/var/enroot"]  # c5.9xlarge has none
    assert install["Script"].endswith("/clusterkit-venv.sh") and agent["Script"].endswith("/clusterkit-agent.sh")
    cpu_pyxis, cpu_docker = config["Scheduling"]["SlurmQueues"][1]["CustomActions"]["OnNodeConfigured"]["Sequence"]
    assert cpu_pyxis["Args"][-1] == "/var/enroot"
    assert cpu_docker["Args"] == ["--docker", DOCKER_VERSION]  # no GPUs, no toolkit


@pytest.mark.parametrize(("changes", "installed"), [
    ({}, True), ({"docker.install": False}, False), ({"os": "alinux2023"}, False),
    ({"image.custom_ami": "ami-0123456789abcdef0"}, False),
    ({"image.custom_ami": "ami-0123456789abcdef0", "docker.install": True}, True),
])
def test_docker_is_installed_on_ubuntu_unless_turned_off_or_a_custom_ami_brings_it(changes: dict,
                                                                                   installed: bool) -> None:
    config = _config(changes)
    for queue in config["Scheduling"]["SlurmQueues"]:
        assert ("docker.sh" in queue_scripts(config, queue["Name"])) is installed


def test_node_scripts_are_clusterkits_own_pinned_by_content_hash() -> None:
    config = _config({})
    script = node_script("pyxis-enroot.sh")
    url = config["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Sequence"][0]["Script"]
    digest = hashlib.sha256(script.path.read_bytes()).hexdigest()
    assert url == f"s3://clusterkit-000000000000-us-east-1/clusterkit/node-scripts/sha256-{digest}/pyxis-enroot.sh"
    assert "githubusercontent" not in render(load_spec_data(base_data())[0])
    # The nodes may read those scripts and nothing else of the bucket.
    assert config["HeadNode"]["Iam"]["S3Access"] == [{"BucketName": "clusterkit-000000000000-us-east-1",
                                                      "KeyName": "clusterkit/node-scripts/*",
                                                      "EnableWriteAccess": False}]
    named = _config({"scripts_bucket": "team-scripts"})
    assert named["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Sequence"][1]["Script"].startswith(
        "s3://team-scripts/")


def test_pyxis_and_clusterkit_off_leave_no_custom_actions() -> None:
    config = _config({"pyxis.enabled": False, "clusterkit.install": False, "docker.install": False})
    assert "CustomActions" not in config["HeadNode"]
    assert "CustomActions" not in config["Scheduling"]["SlurmQueues"][0]
    assert "S3Access" not in config["HeadNode"]["Iam"]


def test_slurm_requeue_and_custom_settings() -> None:
    settings = _config({"slurm.custom_settings": {"RequeueExit": 42}, "slurm.scaledown_idletime": 30})[
        "Scheduling"]["SlurmSettings"]
    # The GPU queue's health check gets its room last (see the test below).
    assert settings["CustomSlurmSettings"] == [{"JobRequeue": 1}, {"RequeueExit": "42"}, {"BatchStartTimeout": 720}]
    assert settings["ScaledownIdletime"] == 30
    overridden = _config({"slurm.custom_settings": {"JobRequeue": "0"}, "queues[0].gpu_health_checks": False})[
        "Scheduling"]["SlurmSettings"]
    assert overridden["CustomSlurmSettings"] == [{"JobRequeue": "0"}]  # the user's wins, with a warning


def test_home_on_efs_and_openzfs() -> None:
    efs = _config({"storage.efs": [{"throughput_mode": "provisioned", "provisioned_throughput": 128}]})[
        "SharedStorage"][1]
    assert efs == {"MountDir": "/home", "Name": "home", "StorageType": "Efs",
                   "EfsSettings": {"Encrypted": True, "ThroughputMode": "provisioned", "ProvisionedThroughput": 128,
                                   "DeletionPolicy": "Retain"}}
    zfs = _config({"storage.openzfs": [{"volume_id": "fsvol-0123456789abcdef0"}]})["SharedStorage"][1]
    assert zfs["StorageType"] == "FsxOpenZfs" and zfs["FsxOpenZfsSettings"] == {"VolumeId": "fsvol-0123456789abcdef0"}


def test_new_storage_is_kept_on_delete_unless_the_spec_says_delete() -> None:
    config = _config({"storage.efs": [{}], "storage.ebs": [{"name": "data", "mount_dir": "/data", "size_gib": 100}]})
    policies = [next(v for k, v in entry.items() if k.endswith("Settings"))["DeletionPolicy"]
                for entry in config["SharedStorage"]]
    assert policies == ["Retain", "Retain", "Retain"]
    deleted = _config({"storage.lustre[0].deletion_policy": "Delete"})
    assert deleted["SharedStorage"][0]["FsxLustreSettings"]["DeletionPolicy"] == "Delete"


def test_every_node_role_gets_ssm_and_ecr_read_only_by_default() -> None:
    config = render_config(preset("p4de"))
    expected = [{"Policy": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"},
                {"Policy": "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly"}]
    assert config["HeadNode"]["Iam"]["AdditionalIamPolicies"] == expected
    for queue in config["Scheduling"]["SlurmQueues"]:
        assert queue["Iam"]["AdditionalIamPolicies"] == expected
    china = _config({"region": "cn-north-1", "queues[0].iam.additional_policies": ["AmazonS3ReadOnlyAccess"]})
    assert china["Scheduling"]["SlurmQueues"][0]["Iam"]["AdditionalIamPolicies"] == [
        {"Policy": "arn:aws-cn:iam::aws:policy/AmazonS3ReadOnlyAccess"}]
    assert "AdditionalIamPolicies" not in _config({"head_node.iam.additional_policies": []})["HeadNode"]["Iam"]


def test_training_presets_scale_down_after_an_hour_drain_on_update_and_check_gpus() -> None:
    for name in ("p4de", "p4d", "p5", "trn1", "trn1n"):
        settings = render_config(preset(name))["Scheduling"]["SlurmSettings"]
        assert (settings["ScaledownIdletime"], settings["QueueUpdateStrategy"]) == (60, "DRAIN")
    for name in ("p4de", "p4d", "p5", "g5"):
        gpu_queue = render_config(preset(name))["Scheduling"]["SlurmQueues"][0]
        assert gpu_queue["HealthChecks"] == {"Gpu": {"Enabled": True}}
    cpu_queue = render_config(preset("p4de"))["Scheduling"]["SlurmQueues"][1]
    assert "HealthChecks" not in cpu_queue


def test_trainium_queues_install_pinned_neuron_packages_unless_a_custom_ami_brings_them() -> None:
    queues = render_config(preset("trn1"))["Scheduling"]["SlurmQueues"]
    first = queues[0]["CustomActions"]["OnNodeConfigured"]["Sequence"][0]
    assert first["Script"].endswith("/neuron.sh")
    assert first["Args"] == ["--dkms", "2.26.5.0", "--runtime", "2.30.51.0", "--collectives", "2.30.59.0",
                             "--tools", "2.28.23.0"]
    assert "neuron.sh" not in str(queues[1])  # the CPU queue has no Neuron devices
    spec = preset("trn1")
    spec.image.custom_ami = "ami-0123456789abcdef0"
    assert "neuron.sh" not in render(spec)


def test_multi_subnet_queues_use_the_instances_form() -> None:
    config = _config({"queues[1].subnet_ids": [SUBNET, "subnet-0123456789abcdef1"], "storage.lustre": []})
    assert _compute(config, queue=1)["Instances"] == [{"InstanceType": "c5.4xlarge"}]
    assert "InstanceType" not in _compute(config, queue=1)
    assert _compute(config)["InstanceType"] == "p4de.24xlarge"


def test_custom_ami_login_nodes_and_per_node_settings() -> None:
    config = _config({"image.custom_ami": "my-training-ami", "login_nodes": [{"name": "login",
                                                                             "instance_type": "c5.2xlarge"}],
                      "queues[0].compute[0].slurm_settings": {"Sockets": "2"},
                      "queues[0].compute[0].capacity_reservation_resource_group_arn":
                          "arn:aws:resource-groups:us-east-1:123456789012:group/odcr"})
    assert config["Image"] == {"Os": "ubuntu2204", "CustomAmi": "ami-00000000000000000"}  # looked up at create
    (pool,) = config["LoginNodes"]["Pools"]
    assert pool["Networking"] == {"SubnetIds": [SUBNET]} and pool["Count"] == 1
    assert _compute(config)["CustomSlurmSettings"] == {"Sockets": "2"}
    assert _compute(config)["CapacityReservationTarget"] == {
        "CapacityReservationResourceGroupArn": "arn:aws:resource-groups:us-east-1:123456789012:group/odcr"}
    assert _compute(config)["Networking"] == {"PlacementGroup": {"Enabled": False}}  # reserved capacity


def test_the_head_node_installs_clusterkit_on_shared_storage_for_the_jobs() -> None:
    from clusterkit import __version__
    from clusterkit.cluster.node_scripts import installed_python

    config = _config({})
    install = config["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Sequence"][1]
    assert install["Args"] == ["--venv", f"/fsx/clusterkit/venv-{__version__}",
                               "--package", f"clusterkit=={__version__}"]
    assert installed_python(config) == f"/fsx/clusterkit/venv-{__version__}/bin/python"
    # Nothing else installs it: the compute nodes read it from /fsx.
    assert not any("clusterkit-venv.sh" in str(queue.get("CustomActions"))
                   for queue in config["Scheduling"]["SlurmQueues"])
    without_fsx = _config({"storage.lustre": [], "clusterkit.package": "https://example.com/ck.whl"})
    assert installed_python(without_fsx) == f"/home/clusterkit/venv-{__version__}/bin/python"
    assert without_fsx["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Sequence"][1]["Args"][-1] == \
        "https://example.com/ck.whl"
    assert installed_python(_config({"clusterkit.install": False})) is None


@pytest.mark.parametrize("name", preset_names())
def test_the_head_node_runs_the_agent_from_that_virtualenv_pinned_by_hash(name: str) -> None:
    """The batch host's watcher outlives every job: a service on the head node, started after the install."""
    from clusterkit.cluster.node_scripts import uploads
    from clusterkit.cluster.render import clusterkit_venv, scripts_bucket

    spec = preset(name)
    config = render_config(spec)
    *_, install, agent = config["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Sequence"]
    script = node_script("clusterkit-agent.sh")
    assert install["Script"].endswith("/clusterkit-venv.sh")
    assert agent == {"Script": script.url(scripts_bucket(spec)), "Args": ["--venv", clusterkit_venv(spec)]}
    assert install["Args"][:2] == agent["Args"]
    assert uploads(config)[agent["Script"]] == script
    assert not any("clusterkit-agent.sh" in str(queue.get("CustomActions"))
                   for queue in config["Scheduling"]["SlurmQueues"])


def test_without_clusterkit_on_the_nodes_there_is_no_agent() -> None:
    assert "clusterkit-agent.sh" not in str(_config({"clusterkit.install": False})["HeadNode"])
    with_own = _config({"clusterkit.install": False, "pyxis.enabled": False,
                        "head_node.custom_actions": {"on_node_configured": [{"script": "s3://b/setup.sh"}]}})
    assert with_own["HeadNode"]["CustomActions"] == {"OnNodeConfigured": {"Script": "s3://b/setup.sh"}}


def test_a_database_clusterkit_makes_is_a_placeholder_until_its_stack_exists() -> None:
    from clusterkit.cluster.prerequisites import with_outputs

    spec = load_spec_data(set_field(base_data(), "slurm.accounting", "create"))[0]
    database = render_config(spec)["Scheduling"]["SlurmSettings"]["Database"]
    assert database == {"Uri": "clusterkit-accounting.invalid:3306", "UserName": "clusterkit",
                        "PasswordSecretArn": "arn:aws:secretsmanager:us-east-1:000000000000:secret:"
                                             "clusterkit-accounting-000000"}
    outputs = {"DatabaseUri": "db.abc.us-east-1.rds.amazonaws.com:3306", "DatabaseUserName": "clusterkit",
               "DatabaseSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:db-AbC",
               "DatabaseClientSecurityGroupId": "sg-0123456789abcdef0"}
    config = render_config(with_outputs(spec, outputs))
    assert config["Scheduling"]["SlurmSettings"]["Database"] == {
        "Uri": outputs["DatabaseUri"], "UserName": "clusterkit", "PasswordSecretArn": outputs["DatabaseSecretArn"]}
    assert config["HeadNode"]["Networking"]["AdditionalSecurityGroups"] == ["sg-0123456789abcdef0"]


def test_the_p4de_preset_has_a_database_unless_accounting_none_opts_out() -> None:
    from clusterkit.cluster import validate
    from clusterkit.findings import Level

    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "cluster-configs" / "p4de.yaml").read_text())
    spec, _ = load_spec_data(data)
    assert "Database" in render_config(spec)["Scheduling"]["SlurmSettings"]
    (too_long,) = [f for f in validate(load_spec_data({**data, "name": "c" * 41})[0]) if f.level is Level.ERROR]
    assert too_long.path == "name" and "at most 40 allowed with Slurm accounting" in too_long.message
    opted_out, _ = load_spec_data({**data, "name": "c" * 41, "slurm": {**data["slurm"], "accounting": "none"}})
    assert "Database" not in render_config(opted_out)["Scheduling"]["SlurmSettings"]
    findings = validate(opted_out)
    assert not [f for f in findings if f.level is Level.ERROR]  # 41 characters: fine without accounting
    assert any(f.path == "slurm.accounting" and f.level is Level.WARNING and "no Slurm accounting database" in
               f.message for f in findings)


def _custom_slurm(config: dict) -> list[dict]:
    return config["Scheduling"]["SlurmSettings"]["CustomSlurmSettings"]


@pytest.mark.parametrize("name", ["p4d", "p4de", "p5"])
def test_a_gpu_health_check_gets_room_to_run_before_the_job_starts(name: str) -> None:
    """ParallelCluster's DCGM prolog may run 600 s; its own slurm.conf gives a job's start 180 (issue #6777)."""
    config = render_config(preset(name))
    assert config["Scheduling"]["SlurmQueues"][0]["HealthChecks"] == {"Gpu": {"Enabled": True}}
    assert {"BatchStartTimeout": 720} in _custom_slurm(config)


def test_the_room_follows_the_health_check_and_the_specs_own_timeout_wins() -> None:
    assert {"BatchStartTimeout": 720} in _custom_slurm(_config({}))
    off = _custom_slurm(_config({"queues[0].gpu_health_checks": False}))
    assert not any("BatchStartTimeout" in setting for setting in off)
    own = _custom_slurm(_config({"slurm.custom_settings": {"batchstarttimeout": "900"}}))
    assert [setting for setting in own if "BatchStartTimeout".lower() in str(setting).lower()] == \
        [{"batchstarttimeout": "900"}]
    assert not any("BatchStartTimeout" in setting for setting in _custom_slurm(render_config(preset("trn1"))))

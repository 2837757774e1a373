"""Rendering: golden files per preset, and the details ParallelCluster insists on."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.cluster.cluster_spec_helpers import RESERVATION, base_data, with_fields

from clusterkit.cluster import load_spec_data, preset, preset_names, render, render_config

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
    assert settings == {"StorageCapacity": 1200, "DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250}
    existing = _config({"storage.lustre[0]": {"name": "fsx", "mount_dir": "/fsx",
                                              "file_system_id": "fs-0123456789abcdef0"}})
    assert existing["SharedStorage"][0]["FsxLustreSettings"] == {"FileSystemId": "fs-0123456789abcdef0"}


def test_pyxis_and_user_actions_run_in_sequence() -> None:
    config = _config({"queues[0].custom_actions": {"on_node_configured": [{"script": "s3://b/setup.sh",
                                                                          "args": ["-x"]}]}})
    sequence = config["Scheduling"]["SlurmQueues"][0]["CustomActions"]["OnNodeConfigured"]["Sequence"]
    assert sequence[0]["Args"] == ["/scratch/enroot"]
    assert sequence[1] == {"Script": "s3://b/setup.sh", "Args": ["-x"]}
    head = config["HeadNode"]["CustomActions"]["OnNodeConfigured"]
    assert head["Script"].endswith("pyxis/postinstall.sh")


def test_pyxis_off_leaves_no_custom_actions() -> None:
    config = _config({"pyxis.enabled": False})
    assert "CustomActions" not in config["HeadNode"]
    assert "CustomActions" not in config["Scheduling"]["SlurmQueues"][0]


def test_slurm_requeue_and_custom_settings() -> None:
    settings = _config({"slurm.custom_settings": {"RequeueExit": 42}, "slurm.scaledown_idletime": 30})[
        "Scheduling"]["SlurmSettings"]
    assert settings["CustomSlurmSettings"] == [{"JobRequeue": 1}, {"RequeueExit": "42"}]
    assert settings["ScaledownIdletime"] == 30


def test_home_on_efs_and_openzfs() -> None:
    efs = _config({"storage.efs": [{}]})["SharedStorage"][1]
    assert efs == {"MountDir": "/home", "Name": "home", "StorageType": "Efs", "EfsSettings": {"Encrypted": True}}
    zfs = _config({"storage.openzfs": [{"volume_id": "fsvol-0123456789abcdef0"}]})["SharedStorage"][1]
    assert zfs["StorageType"] == "FsxOpenZfs" and zfs["FsxOpenZfsSettings"] == {"VolumeId": "fsvol-0123456789abcdef0"}

"""ParallelCluster's own schema as the oracle: every preset and a matrix of variants load with no error."""

from __future__ import annotations

import copy
import dataclasses
import itertools

import pytest
from tests.cluster.cluster_spec_helpers import RESERVATION, SUBNET

from clusterkit.cluster import load_spec_data, preset, preset_names, render_config, validate
from clusterkit.findings import Level

cluster_schema = pytest.importorskip("pcluster.schemas.cluster_schema")
marshmallow = pytest.importorskip("marshmallow")

CAPACITY_TYPES = ("ONDEMAND", "SPOT", "CAPACITY_BLOCK")
OS_CHOICES = ("ubuntu2204", "alinux2023", "ubuntu2404", "rocky9")


def _storage_variant(data: dict, variant: str) -> None:
    storage = data["storage"]
    if variant == "preset":
        return
    if variant == "existing-fsx+efs-home":
        storage["lustre"] = [{"name": "fsx", "mount_dir": "/fsx", "file_system_id": "fs-0123456789abcdef0"}]
        storage["efs"] = [{"name": "home", "mount_dir": "/home", "throughput_mode": "bursting"}]
    elif variant == "dra":
        storage["lustre"] = [{
            "name": "fsx", "mount_dir": "/fsx", "deployment_type": "PERSISTENT_2", "storage_capacity_gib": 2400,
            "per_unit_storage_throughput": 125, "data_compression": "LZ4",
            "data_repository_associations": [
                {"name": "datasets", "file_system_path": "/datasets", "data_repository_path": "s3://bucket/datasets",
                 "batch_import_metadata_on_create": True, "auto_import_policy": ["NEW", "CHANGED"]},
                {"name": "ckpt", "file_system_path": "/checkpoints", "data_repository_path": "s3://bucket/ckpt",
                 "auto_export_policy": ["NEW", "CHANGED", "DELETED"]},
            ],
        }]
    elif variant == "openzfs-home+ebs+scratch":
        storage["lustre"] = [{"name": "fsx", "mount_dir": "/fsx", "deployment_type": "SCRATCH_2",
                              "storage_capacity_gib": 2400, "import_path": "s3://bucket/data",
                              "export_path": "s3://bucket/out", "auto_import_policy": "NEW_CHANGED"}]
        storage["openzfs"] = [{"volume_id": "fsvol-0123456789abcdef0"}]
        storage["ebs"] = [{"name": "data", "mount_dir": "/data", "size_gib": 500}]
    else:
        raise ValueError(variant)


STORAGE_VARIANTS = ("preset", "existing-fsx+efs-home", "dra", "openzfs-home+ebs+scratch")


def _variant(name: str, capacity_type: str, storage: str, os_name: str) -> dict:
    data = copy.deepcopy(dataclasses.asdict(preset(name)))
    data.update(name=f"{name}-{capacity_type.lower().replace('_', '')}", os=os_name, subnet_id=SUBNET)
    data["ssh"] = {"key_name": "me", "allowed_cidr": "10.1.0.0/16"}
    first_queue = data["queues"][0]
    first_queue["capacity_type"] = capacity_type
    if capacity_type == "CAPACITY_BLOCK":
        compute = first_queue["compute"][0]
        compute.update(min_count=2, max_count=2, capacity_reservation_id=RESERVATION)
    _storage_variant(data, storage)
    return data


MATRIX = [
    (name, capacity, storage, OS_CHOICES[index % len(OS_CHOICES)])
    for index, (name, capacity, storage) in enumerate(
        itertools.product(preset_names(), CAPACITY_TYPES, STORAGE_VARIANTS))
]


def _schema_errors(config: dict, cluster_name: str) -> object:
    try:
        cluster_schema.ClusterSchema(cluster_name=cluster_name).load(config)
    except marshmallow.ValidationError as error:
        return error.messages
    return None


@pytest.fixture(autouse=True)
def _region(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def test_matrix_is_large_enough() -> None:
    assert len(MATRIX) >= 50
    assert {os_name for *_, os_name in MATRIX} == set(OS_CHOICES)


@pytest.mark.parametrize("name", preset_names())
def test_preset_loads_in_parallelcluster_schema(name: str) -> None:
    assert _schema_errors(render_config(preset(name)), name) is None


@pytest.mark.parametrize(("name", "capacity", "storage", "os_name"), MATRIX,
                         ids=["-".join(combo) for combo in MATRIX])
def test_variant_loads_in_parallelcluster_schema(name: str, capacity: str, storage: str, os_name: str) -> None:
    spec, findings = load_spec_data(_variant(name, capacity, storage, os_name))
    assert spec is not None, findings
    errors = [f for f in validate(spec) if f.level is Level.ERROR]
    assert errors == [], "the matrix holds valid specs only"
    assert _schema_errors(render_config(spec), spec.name) is None


def test_oracle_rejects_what_we_reject() -> None:
    """Sanity check of the oracle itself: a config with alinux2 fails ParallelCluster's schema too."""
    config = render_config(preset("p4de"))
    config["Image"]["Os"] = "alinux2"
    assert _schema_errors(config, "p4de") is not None

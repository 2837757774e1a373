"""The differential matrix: cluster spec variants over every field and every rule.

Each variant is a small valid spec (`base`) with a few fields changed. A value may be a function of
the region's world (`RegionWorld`) when it names something that exists there: a subnet, the EFS file
system, the secret. `scope` says where clusterkit decides: "offline" variants are decided by
`validate` alone, "account" variants by validate plus `resolve` against the account (a named placement
group, a subnet that gives public IPs, a reservation in another zone: only AWS knows).

Hostile values (control characters, hidden shell or slurm.conf syntax, 100 KB values) are not here:
clusterkit refuses them where ParallelCluster does not, and tests/cluster/test_hostile_values.py shows
that no such value can run anything.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.cluster.cluster_spec_helpers import set_field

from .parallelcluster_world import (
    ARM_AMI_NAME,
    BLOCK_ID,
    CUSTOM_AMI_NAME,
    DATA_BUCKET,
    FSX_ID,
    KEY_NAME,
    OPENZFS_VOLUME_ID,
    PLACEMENT_GROUP,
    RESERVATION_ID,
    RegionWorld,
)

Value = Any  # a plain value, or a function of the RegionWorld
OFFLINE, ACCOUNT = "offline", "account"


@dataclass(frozen=True)
class Variant:
    id: str
    changes: dict[str, Value] = field(default_factory=dict)
    region: str = "us-east-1"
    scope: str = OFFLINE

    def data(self, world: RegionWorld) -> dict[str, Any]:
        data = base(world)
        for path, value in self.changes.items():
            data = set_field(data, path, _resolved(value, world))
        return data


def _resolved(value: Value, world: RegionWorld) -> Any:
    if callable(value):
        return value(world)
    if isinstance(value, dict):
        return {key: _resolved(item, world) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolved(item, world) for item in value]
    return value


def base(world: RegionWorld) -> dict[str, Any]:
    """A small valid cluster: an EFA GPU queue and a CPU queue in a private subnet, FSx for Lustre."""
    return copy.deepcopy({
        "name": "diff",
        "region": world.region,
        "subnet_id": world.private(1),
        "ssh": {"key_name": KEY_NAME, "allowed_cidr": "10.1.0.0/16"},
        "queues": [
            {"name": "gpu", "compute": [{"name": "p4de", "instance_type": "p4de.24xlarge", "max_count": 2}]},
            {"name": "cpu", "compute": [{"name": "c5", "instance_type": "c5.4xlarge", "max_count": 4}]},
        ],
        "storage": {"lustre": [{"name": "fsx", "mount_dir": "/fsx"}]},
    })


def private(index: int) -> Callable[[RegionWorld], str]:
    return lambda world: world.private(index)


def public(index: int) -> Callable[[RegionWorld], str]:
    return lambda world: world.public(index)


def accounting(uri: str = "slurm-db.cluster-abc.us-east-1.rds.amazonaws.com:3306") -> Callable[[RegionWorld], dict]:
    return lambda world: {"uri": uri, "user_name": "slurm", "password_secret_arn": world.secret_arn}


def cpu_only(instance_type: str, **compute: Any) -> dict[str, Any]:
    """Changes that make the first queue a one-type CPU queue (no EFA, no GPU)."""
    return {"queues[0].compute": [{"name": "c", "instance_type": instance_type, **compute}]}


GPU = "queues[0]"
CR = "queues[0].compute[0]"
FSX = "storage.lustre[0]"
S3 = f"s3://{DATA_BUCKET}-us-east-1"


def _queues(count: int) -> list[dict]:
    return [{"name": f"q{i}", "compute": [{"name": "c", "instance_type": "c5.large"}]} for i in range(count)]


def _computes(count: int) -> list[dict]:
    return [{"name": f"c{i}", "instance_type": "c5.large", "max_count": 1} for i in range(count)]


def _dras(count: int) -> list[dict]:
    return [{"name": f"d{i}", "file_system_path": f"/d{i}", "data_repository_path": f"{S3}/d{i}"}
            for i in range(count)]


def V(id: str, changes: dict[str, Value] | None = None, region: str = "us-east-1",  # noqa: N802, A002
      scope: str = OFFLINE) -> Variant:
    return Variant(id, changes or {}, region, scope)


VARIANTS: list[Variant] = [
    V("base"),
    # --- network and accounting of clusterkit's own; clusterkit on the nodes --------------------------
    V("network-create", {"network": "create", "subnet_id": None}),
    V("network-existing-no-subnet", {"network": "existing", "subnet_id": None}),
    V("network-open-no-subnet", {"subnet_id": None}),
    V("accounting-create", {"slurm.accounting": {"create": True}}),
    V("accounting-create-network-create", {"slurm.accounting": "create", "network": "create", "subnet_id": None}),
    V("accounting-create-name-40", {"name": "c" * 40, "slurm.accounting": "create"}),
    V("accounting-create-name-41", {"name": "c" * 41, "slurm.accounting": "create"}),
    V("head-node-security-group", {"head_node.additional_security_groups": [lambda w: w.efs_security_group]}),
    V("head-node-unknown-security-group", {"head_node.additional_security_groups": ["sg-0123456789abcdef0"]},
      scope=ACCOUNT),
    V("clusterkit-not-installed", {"clusterkit.install": False}),
    V("clusterkit-package-url", {"clusterkit.package": "https://example.com/clusterkit-0.1.0-py3-none-any.whl"}),
    # --- names ---------------------------------------------------------------------------------------
    V("cluster-name-newline", {"name": "tr\nain"}),
    V("queue-name-newline", {f"{GPU}.name": "gp\nu"}),
    V("cluster-name-hyphen", {"name": "Train-2026"}),
    V("cluster-name-digit-first", {"name": "2train"}),
    V("cluster-name-underscore", {"name": "train_p4de"}),
    V("cluster-name-60", {"name": "c" * 60}),
    V("cluster-name-61", {"name": "c" * 61}),
    V("cluster-name-40-accounting", {"name": "c" * 40, "slurm.accounting": accounting()}),
    V("cluster-name-41-accounting", {"name": "c" * 41, "slurm.accounting": accounting()}),
    V("queue-name-upper", {f"{GPU}.name": "GPU"}),
    V("queue-name-underscore", {f"{GPU}.name": "gpu_queue"}),
    V("queue-name-25", {f"{GPU}.name": "q" * 25}),
    V("queue-name-26", {f"{GPU}.name": "q" * 26}),
    V("queue-name-default", {f"{GPU}.name": "default"}),
    V("queue-name-duplicate", {"queues[1].name": "gpu"}),
    V("queue-name-digits", {f"{GPU}.name": "gpu-2"}),
    V("compute-name-digit-first", {f"{CR}.name": "4de"}),
    V("compute-name-26", {f"{CR}.name": "c" * 26}),
    V("compute-name-default", {f"{CR}.name": "default"}),
    V("compute-name-duplicate", {"queues[1].compute[1]": {"name": "c5", "instance_type": "c5.large"}}),
    V("compute-name-same-in-two-queues", {"queues[1].compute[0].name": "p4de"}),
    # --- counts --------------------------------------------------------------------------------------
    V("queues-50", {"queues": _queues(50)}),
    V("queues-51", {"queues": _queues(51)}),
    V("no-queues", {"queues": []}),
    V("queue-without-compute", {"queues[1].compute": []}),
    V("compute-per-queue-50", {"queues[1].compute": _computes(49)}),
    V("compute-per-queue-51", {"queues[1].compute": _computes(51)}),
    V("min-negative", {f"{CR}.min_count": -1}),
    V("min-static", {f"{CR}.min_count": 2}),
    V("max-zero", {f"{CR}.max_count": 0}),
    V("max-below-min", {f"{CR}.min_count": 3, f"{CR}.max_count": 2}),
    V("max-default-below-min", {"queues[1].compute[0].min_count": 11, "queues[1].compute[0].max_count": None}),
    # --- instance types and regions --------------------------------------------------------------------
    V("type-unknown", {"queues[1].compute[0].instance_type": "c9.huge"}),
    V("type-typo", {f"{CR}.instance_type": "p4de.24xlrge"}),
    V("type-malformed", {"head_node.instance_type": "banana"}),
    V("head-type-unknown", {"head_node.instance_type": "c5.10xlarge"}),
    V("head-type-m6i", {"head_node.instance_type": "m6i.2xlarge"}),
    V("p4de-eu-west-1", {}, region="eu-west-1"),
    V("p4de-us-east-2", {}, region="us-east-2"),
    V("p4de-us-west-2", {}, region="us-west-2"),
    V("p5-eu-west-1", {f"{CR}.instance_type": "p5.48xlarge"}, region="eu-west-1"),
    V("p5-eu-west-2", {f"{CR}.instance_type": "p5.48xlarge"}, region="eu-west-2"),
    V("p5e-us-east-1", {f"{CR}.instance_type": "p5e.48xlarge"}),
    V("p5e-us-east-2", {f"{CR}.instance_type": "p5e.48xlarge"}, region="us-east-2"),
    V("p5en-us-east-1", {f"{CR}.instance_type": "p5en.48xlarge", "subnet_id": private(2)}),
    V("trn1-eu-west-1", {f"{CR}.instance_type": "trn1.32xlarge"}, region="eu-west-1"),
    V("trn1-us-west-2", {f"{CR}.instance_type": "trn1.32xlarge"}, region="us-west-2"),
    V("trn1n-ap-south-1", {f"{CR}.instance_type": "trn1n.32xlarge"}, region="ap-south-1"),
    V("trn2-us-east-1", {f"{CR}.instance_type": "trn2.48xlarge"}),
    V("trn2-us-east-2", {f"{CR}.instance_type": "trn2.48xlarge"}, region="us-east-2"),
    V("inf2-us-east-1", {f"{CR}.instance_type": "inf2.48xlarge", f"{CR}.efa": False}),
    V("g5-us-east-1", {f"{CR}.instance_type": "g5.12xlarge"}),
    V("g6-us-east-1", {f"{CR}.instance_type": "g6.12xlarge"}),
    V("c5n-efa", {f"{CR}.instance_type": "c5n.18xlarge"}),
    V("cpu-type-m6i", {"queues[1].compute[0].instance_type": "m6i.large"}),
    V("head-arm-queues-x86", {"head_node.instance_type": "m7g.2xlarge"}),
    V("head-x86-queue-arm", {"queues[1].compute[0].instance_type": "c7g.4xlarge"}),
    V("all-arm", {"head_node.instance_type": "m7g.2xlarge", **cpu_only("c7g.4xlarge"),
                  "queues[1].compute[0].instance_type": "c7g.2xlarge"}),
    V("arm-gpu-g5g", {"head_node.instance_type": "m7g.2xlarge", **cpu_only("g5g.16xlarge"),
                      "queues[1].compute[0].instance_type": "c7g.2xlarge"}),
    V("mac-type", {"queues[1].compute[0].instance_type": "mac2.metal"}),
    V("region-not-parallelcluster", {}, region="ap-southeast-4"),
    V("region-ca-west-1", {}, region="ca-west-1"),
    V("region-bogus", {"region": "mars-1"}),
    V("region-ap-northeast-1", {}, region="ap-northeast-1"),
    V("region-il-central-1", {}, region="il-central-1"),
    # --- EFA and placement ----------------------------------------------------------------------------
    V("efa-on-m6i", {"queues[1].compute[0]": {"name": "m6i", "instance_type": "m6i.large", "efa": True}}),
    V("efa-on-c5", {"queues[1].compute[0].efa": True}),
    V("efa-off-p4de", {f"{CR}.efa": False}),
    V("efa-on-p4de", {f"{CR}.efa": True}),
    V("pg-disabled", {f"{CR}.placement_group": {"enabled": False}}),
    V("pg-queue-disabled", {f"{GPU}.placement_group": {"enabled": False}}),
    V("pg-named", {f"{GPU}.placement_group": {"name": PLACEMENT_GROUP}}),
    V("pg-named-compute", {f"{CR}.placement_group": {"enabled": True, "name": PLACEMENT_GROUP}}),
    V("pg-named-unknown", {f"{GPU}.placement_group": {"name": "nobody-made-this"}}, scope=ACCOUNT),
    V("pg-compute-id", {f"{CR}.placement_group": {"id": PLACEMENT_GROUP}}),
    V("pg-id-and-name", {f"{GPU}.placement_group": {"id": PLACEMENT_GROUP, "name": PLACEMENT_GROUP}}),
    V("pg-disabled-with-name", {f"{CR}.placement_group": {"enabled": False, "name": PLACEMENT_GROUP}}),
    V("pg-on-cpu-queue", {"queues[1].placement_group": {"enabled": True}}),
    V("hyperthreading-off", {f"{CR}.disable_hyperthreading": True}),
    V("exclusive-on", {f"{GPU}.exclusive": True}),
    V("exclusive-off", {f"{GPU}.exclusive": False}),
    # --- capacity ------------------------------------------------------------------------------------
    V("spot", {f"{GPU}.capacity_type": "SPOT"}),
    V("capacity-type-unknown", {f"{GPU}.capacity_type": "SPOTTY"}),
    V("reservation", {f"{CR}.capacity_reservation_id": RESERVATION_ID, "subnet_id": private(1)}),
    V("reservation-format", {f"{CR}.capacity_reservation_id": "cr-123"}),
    V("reservation-unknown", {f"{CR}.capacity_reservation_id": "cr-0aaaaaaaaaaaaaaaa"}, scope=ACCOUNT),
    V("reservation-other-zone", {f"{CR}.capacity_reservation_id": RESERVATION_ID, "subnet_id": private(2)},
      scope=ACCOUNT),
    V("reservation-other-type", {f"{CR}.instance_type": "p5.48xlarge",
                                 f"{CR}.capacity_reservation_id": RESERVATION_ID}, scope=ACCOUNT),
    V("capacity-block", {f"{GPU}.capacity_type": "CAPACITY_BLOCK", f"{CR}.min_count": 2,
                         f"{CR}.capacity_reservation_id": BLOCK_ID}),
    V("capacity-block-no-reservation", {f"{GPU}.capacity_type": "CAPACITY_BLOCK", f"{CR}.min_count": 2}),
    V("capacity-block-min-max", {f"{GPU}.capacity_type": "CAPACITY_BLOCK", f"{CR}.min_count": 1,
                                 f"{CR}.capacity_reservation_id": BLOCK_ID}),
    V("capacity-block-zero", {f"{GPU}.capacity_type": "CAPACITY_BLOCK", f"{CR}.min_count": 0, f"{CR}.max_count": 1,
                              f"{CR}.capacity_reservation_id": BLOCK_ID}),
    V("resource-group", {f"{CR}.capacity_reservation_resource_group_arn": lambda w: w.resource_group_arn}),
    V("resource-group-format", {f"{CR}.capacity_reservation_resource_group_arn": "odcr-group"}),
    V("resource-group-and-reservation", {f"{CR}.capacity_reservation_resource_group_arn":
                                         lambda w: w.resource_group_arn,
                                         f"{CR}.capacity_reservation_id": RESERVATION_ID}),
    # --- FSx for Lustre -------------------------------------------------------------------------------
    V("lustre-scratch2-1200", {f"{FSX}.deployment_type": "SCRATCH_2"}),
    V("lustre-scratch2-1000", {f"{FSX}.deployment_type": "SCRATCH_2", f"{FSX}.storage_capacity_gib": 1000}),
    V("lustre-scratch1-3600", {f"{FSX}.deployment_type": "SCRATCH_1", f"{FSX}.storage_capacity_gib": 3600}),
    V("lustre-scratch1-4800", {f"{FSX}.deployment_type": "SCRATCH_1", f"{FSX}.storage_capacity_gib": 4800}),
    V("lustre-persistent2-3600", {f"{FSX}.storage_capacity_gib": 3600}),
    V("lustre-persistent2-4800", {f"{FSX}.storage_capacity_gib": 4800}),
    V("lustre-persistent1", {f"{FSX}.deployment_type": "PERSISTENT_1", f"{FSX}.per_unit_storage_throughput": 100}),
    V("lustre-persistent1-125", {f"{FSX}.deployment_type": "PERSISTENT_1", f"{FSX}.per_unit_storage_throughput": 125}),
    V("lustre-deployment-unknown", {f"{FSX}.deployment_type": "PERSISTENT_3"}),
    V("lustre-throughput-1000", {f"{FSX}.per_unit_storage_throughput": 1000}),
    V("lustre-throughput-300", {f"{FSX}.per_unit_storage_throughput": 300}),
    V("lustre-throughput-scratch", {f"{FSX}.deployment_type": "SCRATCH_2", f"{FSX}.per_unit_storage_throughput": 200}),
    V("lustre-lz4", {f"{FSX}.data_compression": "LZ4"}),
    V("lustre-zstd", {f"{FSX}.data_compression": "ZSTD"}),
    V("lustre-import-export", {f"{FSX}.deployment_type": "SCRATCH_2", f"{FSX}.import_path": f"{S3}/in",
                               f"{FSX}.export_path": f"{S3}/out", f"{FSX}.auto_import_policy": "NEW_CHANGED"}),
    V("lustre-import-missing-bucket", {f"{FSX}.deployment_type": "SCRATCH_2",
                                       f"{FSX}.import_path": "s3://no-such-bucket-anywhere/in"}, scope=ACCOUNT),
    V("lustre-export-without-import", {f"{FSX}.export_path": f"{S3}/out"}),
    V("lustre-autoimport-without-import", {f"{FSX}.auto_import_policy": "NEW"}),
    V("lustre-autoimport-unknown", {f"{FSX}.deployment_type": "SCRATCH_2", f"{FSX}.import_path": f"{S3}/in",
                                    f"{FSX}.auto_import_policy": "ALL"}),
    V("lustre-import-not-s3", {f"{FSX}.import_path": "/data"}),
    V("lustre-chunk-1024", {f"{FSX}.deployment_type": "SCRATCH_2", f"{FSX}.import_path": f"{S3}/in",
                            f"{FSX}.imported_file_chunk_size": 1024}),
    V("lustre-chunk-0", {f"{FSX}.deployment_type": "SCRATCH_2", f"{FSX}.import_path": f"{S3}/in",
                         f"{FSX}.imported_file_chunk_size": 0}),
    V("lustre-chunk-512001", {f"{FSX}.deployment_type": "SCRATCH_2", f"{FSX}.import_path": f"{S3}/in",
                              f"{FSX}.imported_file_chunk_size": 512_001}),
    V("lustre-chunk-without-import", {f"{FSX}.imported_file_chunk_size": 1024}),
    V("lustre-dras", {f"{FSX}.data_repository_associations": [
        {"name": "datasets", "file_system_path": "/datasets", "data_repository_path": f"{S3}/datasets",
         "batch_import_metadata_on_create": True, "auto_import_policy": ["NEW", "CHANGED"],
         "imported_file_chunk_size": 2048},
        {"name": "ckpt", "file_system_path": "/checkpoints", "data_repository_path": f"{S3}/ckpt",
         "auto_export_policy": ["NEW", "CHANGED", "DELETED"]}]}),
    V("lustre-dras-8", {f"{FSX}.data_repository_associations": _dras(8)}),
    V("lustre-dras-9", {f"{FSX}.data_repository_associations": _dras(9)}),
    V("lustre-dra-and-import", {f"{FSX}.data_repository_associations": _dras(1), f"{FSX}.import_path": f"{S3}/x"}),
    V("lustre-dra-relative-path", {f"{FSX}.data_repository_associations": [
        {"name": "d", "file_system_path": "d", "data_repository_path": f"{S3}/d"}]}),
    V("lustre-dra-not-s3", {f"{FSX}.data_repository_associations": [
        {"name": "d", "file_system_path": "/d", "data_repository_path": "https://example.com/d"}]}),
    V("lustre-dra-chunk-0", {f"{FSX}.data_repository_associations": [
        {"name": "d", "file_system_path": "/d", "data_repository_path": f"{S3}/d", "imported_file_chunk_size": 0}]}),
    V("lustre-dra-event-unknown", {f"{FSX}.data_repository_associations": [
        {"name": "d", "file_system_path": "/d", "data_repository_path": f"{S3}/d", "auto_import_policy": ["ALL"]}]}),
    V("lustre-dra-duplicate", {f"{FSX}.data_repository_associations": [
        {"name": "d", "file_system_path": "/a", "data_repository_path": f"{S3}/a"},
        {"name": "d", "file_system_path": "/b", "data_repository_path": f"{S3}/b"}]}),
    V("lustre-existing", {FSX: {"name": "fsx", "mount_dir": "/fsx", "file_system_id": FSX_ID}}),
    V("lustre-existing-unknown", {FSX: {"name": "fsx", "mount_dir": "/fsx",
                                        "file_system_id": "fs-0aaaaaaaaaaaaaaaa"}}, scope=ACCOUNT),
    V("lustre-existing-short-id", {FSX: {"name": "fsx", "mount_dir": "/fsx", "file_system_id": "fs-0123abcd"}}),
    V("lustre-existing-with-capacity", {FSX: {"name": "fsx", "mount_dir": "/fsx", "file_system_id": FSX_ID,
                                              "storage_capacity_gib": 1200}}),
    V("lustre-existing-with-dra", {FSX: {"name": "fsx", "mount_dir": "/fsx", "file_system_id": FSX_ID,
                                         "data_repository_associations": _dras(1)}}),
    V("lustre-delete", {f"{FSX}.deletion_policy": "Delete"}),
    V("lustre-keep", {f"{FSX}.deletion_policy": "Keep"}),
    V("lustre-two-new", {"storage.lustre[1]": {"name": "fsx2", "mount_dir": "/fsx2"}}),
    V("lustre-new-and-existing", {"storage.lustre[1]": {"name": "data", "mount_dir": "/data",
                                                        "file_system_id": FSX_ID}}),
    # --- EFS ------------------------------------------------------------------------------------------
    V("efs-home", {"storage.efs": [{}]}),
    V("efs-bursting", {"storage.efs": [{"throughput_mode": "bursting"}]}),
    V("efs-provisioned", {"storage.efs": [{"throughput_mode": "provisioned", "provisioned_throughput": 128}]}),
    V("efs-provisioned-missing", {"storage.efs": [{"throughput_mode": "provisioned"}]}),
    V("efs-provisioned-0", {"storage.efs": [{"throughput_mode": "provisioned", "provisioned_throughput": 0}]}),
    V("efs-provisioned-2000", {"storage.efs": [{"throughput_mode": "provisioned", "provisioned_throughput": 2000}]}),
    V("efs-throughput-without-mode", {"storage.efs": [{"provisioned_throughput": 128}]}),
    V("efs-elastic", {"storage.efs": [{"throughput_mode": "elastic"}]}),
    V("efs-delete", {"storage.efs": [{"deletion_policy": "Delete"}]}),
    V("efs-existing", {"storage.efs": [{"file_system_id": lambda w: w.efs_id}]}),
    V("efs-existing-with-mode", {"storage.efs": [{"file_system_id": lambda w: w.efs_id,
                                                  "throughput_mode": "bursting"}]}),
    V("efs-existing-malformed", {"storage.efs": [{"file_system_id": "fs-1"}]}),
    V("efs-two-new", {"storage.efs": [{"name": "a", "mount_dir": "/a"}, {"name": "b", "mount_dir": "/b"}]}),
    # --- OpenZFS and EBS ------------------------------------------------------------------------------
    V("openzfs-home", {"storage.openzfs": [{"volume_id": OPENZFS_VOLUME_ID}]}),
    V("openzfs-named", {"storage.openzfs": [{"volume_id": OPENZFS_VOLUME_ID, "name": "shared",
                                             "mount_dir": "/shared"}]}),
    V("openzfs-malformed", {"storage.openzfs": [{"volume_id": "fsvol-1"}]}),
    V("ebs-gp3", {"storage.ebs": [{"name": "data", "mount_dir": "/data", "size_gib": 500}]}),
    V("ebs-default-size", {"storage.ebs": [{"name": "data", "mount_dir": "/data"}]}),
    V("ebs-gp3-0", {"storage.ebs": [{"name": "data", "mount_dir": "/data", "size_gib": 0}]}),
    V("ebs-gp3-16385", {"storage.ebs": [{"name": "data", "mount_dir": "/data", "size_gib": 16_385}]}),
    V("ebs-st1-100", {"storage.ebs": [{"name": "data", "mount_dir": "/data", "size_gib": 100, "volume_type": "st1"}]}),
    V("ebs-st1-500", {"storage.ebs": [{"name": "data", "mount_dir": "/data", "size_gib": 500, "volume_type": "st1"}]}),
    V("ebs-st1-no-size", {"storage.ebs": [{"name": "data", "mount_dir": "/data", "volume_type": "st1"}]}),
    V("ebs-sc1-400", {"storage.ebs": [{"name": "data", "mount_dir": "/data", "size_gib": 400, "volume_type": "sc1"}]}),
    V("ebs-io2-65536", {"storage.ebs": [{"name": "data", "mount_dir": "/data", "size_gib": 65_536,
                                         "volume_type": "io2"}]}),
    V("ebs-standard-2000", {"storage.ebs": [{"name": "data", "mount_dir": "/data", "size_gib": 2000,
                                             "volume_type": "standard"}]}),
    V("ebs-type-unknown", {"storage.ebs": [{"name": "data", "mount_dir": "/data", "volume_type": "gp4"}]}),
    V("ebs-existing", {"storage.ebs": [{"name": "data", "mount_dir": "/data", "volume_id": lambda w: w.ebs_volume_id}],
                       "head_node.subnet_id": private(0)}),
    V("ebs-existing-other-zone", {"storage.ebs": [{"name": "data", "mount_dir": "/data",
                                                   "volume_id": lambda w: w.ebs_volume_id}]}, scope=ACCOUNT),
    V("ebs-existing-malformed", {"storage.ebs": [{"name": "data", "mount_dir": "/data", "volume_id": "vol-1"}]}),
    V("ebs-existing-with-size", {"storage.ebs": [{"name": "data", "mount_dir": "/data", "size_gib": 10,
                                                  "volume_id": lambda w: w.ebs_volume_id}],
                                 "head_node.subnet_id": private(0)}),
    V("ebs-snapshot-policy", {"storage.ebs": [{"name": "data", "mount_dir": "/data", "size_gib": 100,
                                               "deletion_policy": "Snapshot"}]}),
    V("ebs-keep-policy", {"storage.ebs": [{"name": "data", "mount_dir": "/data", "size_gib": 100,
                                           "deletion_policy": "Keep"}]}),
    V("ebs-5", {"storage.ebs": [{"name": f"v{i}", "mount_dir": f"/v{i}", "size_gib": 10} for i in range(5)]}),
    V("ebs-6", {"storage.ebs": [{"name": f"v{i}", "mount_dir": f"/v{i}", "size_gib": 10} for i in range(6)]}),
    # --- storage names and mount dirs -----------------------------------------------------------------
    V("storage-name-30", {f"{FSX}.name": "n" * 30}),
    V("storage-name-31", {f"{FSX}.name": "n" * 31}),
    V("storage-name-default", {f"{FSX}.name": "default"}),
    V("storage-name-space", {f"{FSX}.name": "my fsx"}),
    V("storage-name-punctuation", {f"{FSX}.name": "fsx:train/01"}),
    V("storage-name-duplicate", {"storage.efs": [{"name": "fsx", "mount_dir": "/home"}]}),
    V("mount-dir-trailing-slash", {f"{FSX}.mount_dir": "/fsx/"}),
    V("mount-dir-dot-first", {f"{FSX}.mount_dir": "/.cache"}),
    V("mount-dir-double-slash", {f"{FSX}.mount_dir": "/fsx//x"}),
    V("mount-dir-dot-segment", {f"{FSX}.mount_dir": "/fsx/./x"}),
    V("mount-dir-dotdot", {f"{FSX}.mount_dir": "/fsx/../etc"}),
    V("mount-dir-space", {f"{FSX}.mount_dir": "/my data"}),
    V("mount-dir-relative", {f"{FSX}.mount_dir": "fsx"}),
    V("mount-dir-nested", {f"{FSX}.mount_dir": "/data/shared"}),
    V("mount-dir-etc", {f"{FSX}.mount_dir": "/etc"}),
    V("mount-dir-opt-slurm", {f"{FSX}.mount_dir": "/opt/slurm"}),
    V("mount-dir-home", {f"{FSX}.mount_dir": "/home"}),
    V("mount-dir-same", {"storage.efs": [{"name": "home", "mount_dir": "/fsx"}]}),
    # --- image and operating system -------------------------------------------------------------------
    V("os-alinux2023", {"os": "alinux2023"}),
    V("os-ubuntu2404", {"os": "ubuntu2404"}),
    V("os-rhel8", {"os": "rhel8"}),
    V("os-rhel9", {"os": "rhel9"}),
    V("os-rocky9", {"os": "rocky9"}),
    V("os-rocky8", {"os": "rocky8"}),
    V("os-rocky9-custom-ami", {"os": "rocky9", "image.custom_ami": lambda w: w.custom_ami}),
    V("os-alinux2", {"os": "alinux2"}),
    V("os-windows", {"os": "windows"}),
    V("custom-ami-id", {"image.custom_ami": lambda w: w.custom_ami}),
    V("custom-ami-name", {"image.custom_ami": CUSTOM_AMI_NAME}, scope=ACCOUNT),
    V("custom-ami-unknown-name", {"image.custom_ami": "nobody-built-this"}, scope=ACCOUNT),
    V("custom-ami-malformed-id", {"image.custom_ami": "ami-123"}),
    V("custom-ami-bad-name", {"image.custom_ami": "a?"}),
    V("custom-ami-arm-on-x86", {"image.custom_ami": ARM_AMI_NAME}, scope=ACCOUNT),
    V("custom-ami-small-root", {"image.custom_ami": lambda w: w.custom_ami, "head_node.root_volume_gb": 50},
      scope=ACCOUNT),
    # --- subnets and networking -----------------------------------------------------------------------
    V("subnet-malformed", {"subnet_id": "net-1"}),
    V("subnet-unknown", {"subnet_id": "subnet-0123456789abcdef0"}, scope=ACCOUNT),
    V("subnet-public-efa", {"subnet_id": public(1)}, scope=ACCOUNT),
    V("subnet-public-cpu-only", {**cpu_only("c5.4xlarge"), "subnet_id": public(1)}),
    V("public-head-private-queues", {"head_node.subnet_id": public(1), "subnet_id": private(1)}),
    V("public-head-queue-subnets", {"head_node.subnet_id": public(0), "subnet_id": None,
                                    "queues[0].subnet_ids": [private(1)], "queues[1].subnet_ids": [private(1)]}),
    V("multi-subnet-cpu-queue", {"queues[1].subnet_ids": [private(1), private(2)],
                                 "storage.lustre": [{"name": "fsx", "mount_dir": "/fsx", "file_system_id": FSX_ID}]}),
    V("multi-subnet-with-new-fsx", {"queues[1].subnet_ids": [private(1), private(2)]}),
    V("multi-subnet-efa", {"queues[0].subnet_ids": [private(1), private(2)], "storage.lustre": []}),
    V("multi-subnet-no-storage", {"queues[1].subnet_ids": [private(1), private(2)], "storage.lustre": []}),
    V("queue-subnet-malformed", {"queues[1].subnet_ids": ["subnet-1"]}),
    # --- SSH ------------------------------------------------------------------------------------------
    V("ssh-world", {"ssh.allowed_cidr": "0.0.0.0/0"}),
    V("ssh-ipv6-world", {"ssh.allowed_cidr": "::/0"}),
    V("ssh-ipv6-prefix", {"ssh.allowed_cidr": "2001:db8::/32"}),
    V("ssh-bare-address", {"ssh.allowed_cidr": "203.0.113.7"}),
    V("ssh-single-address", {"ssh.allowed_cidr": "203.0.113.7/32"}),
    V("ssh-mask-33", {"ssh.allowed_cidr": "10.0.0.0/33"}),
    V("ssh-prefix-list", {"ssh.allowed_cidr": "pl-0123456789abcdef0"}),
    V("ssh-default-cidr", {"ssh.allowed_cidr": None}),
    V("ssh-no-key", {"ssh.key_name": None}),
    V("ssh-unknown-key", {"ssh.key_name": "nobody"}, scope=ACCOUNT),
    # --- Slurm ----------------------------------------------------------------------------------------
    V("scaledown-minus-1", {"slurm.scaledown_idletime": -1}),
    V("scaledown-minus-2", {"slurm.scaledown_idletime": -2}),
    V("scaledown-60", {"slurm.scaledown_idletime": 60}),
    V("update-drain", {"slurm.queue_update_strategy": "DRAIN"}),
    V("update-terminate", {"slurm.queue_update_strategy": "TERMINATE"}),
    V("update-unknown", {"slurm.queue_update_strategy": "DRAIN_ALL"}),
    V("requeue-off", {"slurm.job_requeue": False}),
    V("slurm-settings", {"slurm.custom_settings": {"RequeueExit": "42", "MaxJobCount": "50000"}}),
    V("slurm-denied", {"slurm.custom_settings": {"SlurmctldHost": "evil"}}),
    V("slurm-denied-lowercase", {"slurm.custom_settings": {"suspendtime": "10"}}),
    V("slurm-jobrequeue", {"slurm.custom_settings": {"JobRequeue": "0"}}),
    V("slurm-accounting-key", {"slurm.custom_settings": {"AccountingStorageHost": "x"},
                               "slurm.accounting": accounting()}),
    V("slurm-accounting-key-no-db", {"slurm.custom_settings": {"AccountingStorageHost": "x"}}),
    V("node-settings", {f"{CR}.slurm_settings": {"Sockets": "2", "CoresPerSocket": "24"}}),
    V("node-settings-denied", {f"{CR}.slurm_settings": {"NodeName": "x"}}),
    V("node-settings-weight", {f"{CR}.slurm_settings": {"Weight": "10"}}),
    V("accounting", {"slurm.accounting": accounting()}),
    V("accounting-host-only", {"slurm.accounting": accounting("slurm-db.example.com")}),
    V("accounting-scheme", {"slurm.accounting": accounting("mysql://slurm-db.example.com:3306")}),
    V("accounting-leading-slash", {"slurm.accounting": accounting("/slurm-db.example.com:3306")}),
    V("accounting-password", {"slurm.accounting": {"uri": "db.example.com:3306", "user_name": "slurm",
                                                   "password_secret_arn": "hunter2"}}),
    V("accounting-unknown-secret", {"slurm.accounting": {
        "uri": "db.example.com:3306", "user_name": "slurm",
        "password_secret_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:nobody-AbCdEf"}},
      scope=ACCOUNT),
    # --- custom actions, node scripts, IAM ------------------------------------------------------------
    V("actions-s3", {f"{GPU}.custom_actions": {"on_node_configured": [{"script": f"{S3}/setup.sh",
                                                                        "args": ["-x", "a b"]}]},
                     "head_node.custom_actions": {"on_node_start": [{"script": f"{S3}/start.sh"}],
                                                  "on_node_updated": [{"script": f"{S3}/update.sh"}]}},
      scope=ACCOUNT),
    V("actions-every-event", {
        "head_node.custom_actions": {"on_node_start": [{"script": f"{S3}/start.sh", "args": ["--head"]}],
                                     "on_node_configured": [{"script": f"{S3}/setup.sh", "args": ["a", "b c"]}],
                                     "on_node_updated": [{"script": f"{S3}/update.sh", "args": ["--now"]}]},
        f"{GPU}.custom_actions": {"on_node_start": [{"script": f"{S3}/start.sh", "args": ["--gpu"]}]}},
      scope=ACCOUNT),
    V("actions-updated-on-queue", {f"{GPU}.custom_actions": {"on_node_updated": [
        {"script": f"{S3}/update.sh", "args": ["1"]}]}}),
    V("actions-relative", {f"{GPU}.custom_actions": {"on_node_start": [{"script": "setup.sh"}]}}),
    V("actions-sequence", {"queues[1].custom_actions": {"on_node_configured": [
        {"script": f"{S3}/a.sh"}, {"script": f"{S3}/b.sh", "args": ["1"]}]}}, scope=ACCOUNT),
    V("pyxis-off", {"pyxis.enabled": False}),
    V("pyxis-enroot-dir", {"pyxis.enroot_dir": "/scratch/containers"}),
    V("pyxis-enroot-on-fsx", {"pyxis.enroot_dir": "/fsx/enroot"}),
    V("docker-off", {"docker.install": False}),
    V("docker-with-custom-ami", {"image.custom_ami": lambda w: w.custom_ami, "docker.install": True}),
    V("scripts-bucket", {"scripts_bucket": "team-cluster-scripts"}),
    V("neuron-off", {f"{CR}.instance_type": "trn1.32xlarge", "neuron.install": False}),
    V("neuron-with-custom-ami", {f"{CR}.instance_type": "trn1.32xlarge", "image.custom_ami": lambda w: w.custom_ami,
                                 "neuron.install": True}),
    V("iam-none", {"head_node.iam.additional_policies": [], "queues[0].iam.additional_policies": []}),
    V("iam-managed", {"queues[0].iam.additional_policies": ["AmazonSSMManagedInstanceCore", "AmazonS3ReadOnlyAccess"]}),
    V("iam-arn", {"head_node.iam.additional_policies": ["arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess"]}),
    V("iam-unknown-policy", {"queues[0].iam.additional_policies": ["arn:aws:iam::123456789012:policy/nobody"]},
      scope=ACCOUNT),
    V("iam-malformed-arn", {"queues[0].iam.additional_policies": ["arn:aws:s3:::bucket"]}),
    V("iam-bad-name", {"queues[0].iam.additional_policies": ["not a policy"]}),
    V("gpu-health-off", {f"{GPU}.gpu_health_checks": False}),
    V("gpu-health-on-cpu", {"queues[1].gpu_health_checks": True}),
    # --- login nodes ----------------------------------------------------------------------------------
    V("login-pool", {"login_nodes": [{"name": "login", "instance_type": "c5.2xlarge"}]}),
    V("login-pool-public", {"login_nodes": [{"name": "login", "instance_type": "c5.2xlarge", "count": 2,
                                             "subnet_id": public(1)}]}),
    V("login-pool-zero", {"login_nodes": [{"name": "login", "instance_type": "c5.2xlarge", "count": 0}]}),
    V("login-pool-negative", {"login_nodes": [{"name": "login", "instance_type": "c5.2xlarge", "count": -1}]}),
    V("login-pool-name", {"login_nodes": [{"name": "Login_1", "instance_type": "c5.2xlarge"}]}),
    V("login-pool-arm", {"login_nodes": [{"name": "login", "instance_type": "m7g.large"}]}),
    V("login-pool-unknown-type", {"login_nodes": [{"name": "login", "instance_type": "c5.huge"}]}),
    V("login-pool-iam", {"login_nodes": [{"name": "login", "instance_type": "c5.2xlarge",
                                          "iam": {"additional_policies": ["AmazonS3ReadOnlyAccess"]}}]}),
    V("login-pool-subnet-malformed", {"login_nodes": [{"name": "login", "instance_type": "c5.2xlarge",
                                                       "subnet_id": "subnet-x"}]}),
    # --- monitoring, tags, volumes --------------------------------------------------------------------
    V("logs-off", {"monitoring.cloudwatch_logs": False, "monitoring.dashboard": False}),
    V("detailed-monitoring", {"monitoring.detailed_monitoring": True}),
    V("log-retention-17", {"monitoring.log_retention_days": 17}),
    V("log-retention-365", {"monitoring.log_retention_days": 365}),
    V("tags", {"tags": {"team": "ml", "cost-center": "1234"}}),
    V("tag-value-space", {"tags": {"team": "ml research"}}),
    V("tag-value-punctuation", {"tags": {"owner": "me@example.com", "path": "a/b:c=d+e_f.g-h"}}),
    V("tag-value-unicode", {"tags": {"team": "Forschung Ä"}}),
    V("tag-value-256", {"tags": {"note": "v" * 256}}),
    V("tag-value-257", {"tags": {"note": "v" * 257}}),
    V("tag-key-parallelcluster", {"tags": {"parallelcluster:x": "me"}}),
    V("tag-key-129", {"tags": {"k" * 129: "v"}}),
    V("head-root-45", {"head_node.root_volume_gb": 45}),
    V("head-root-40", {"head_node.root_volume_gb": 40}),
    V("head-root-0", {"head_node.root_volume_gb": 0}),
    V("head-root-16385", {"head_node.root_volume_gb": 16_385}),
    V("queue-root-45", {f"{GPU}.root_volume_gb": 45}),
    V("queue-root-44", {f"{GPU}.root_volume_gb": 44}),
    V("queue-root-0", {f"{GPU}.root_volume_gb": 0}),
    V("queue-root-16384", {f"{GPU}.root_volume_gb": 16_384}),
    V("queue-root-16385", {f"{GPU}.root_volume_gb": 16_385}),
]


@dataclass(frozen=True)
class Stricter:
    """A spec ParallelCluster's validation lets through and clusterkit refuses, and why the cluster would
    fail anyway. The differential test checks both halves: should ParallelCluster start refusing one of
    these, the entry moves to VARIANTS."""

    variant: Variant
    why: str


STRICTER: list[Stricter] = [
    Stricter(V("zone-without-p4de", {"subnet_id": private(0)}, scope=ACCOUNT),
             "the subnet's Availability Zone does not offer p4de.24xlarge: every launch there fails "
             "(ParallelCluster checks the region's offerings, not the zone's)"),
    Stricter(V("p5en-zone-without-it", {f"{CR}.instance_type": "p5en.48xlarge"}, scope=ACCOUNT),
             "the same for p5en.48xlarge"),
    Stricter(V("actions-s3-missing", {f"{GPU}.custom_actions": {"on_node_configured": [
        {"script": f"{S3}/no-such-script.sh"}]}}, scope=ACCOUNT),
             "a custom-action script that is not there fails every node's bootstrap (ParallelCluster only warns)"),
    Stricter(V("mount-dir-overlap", {"storage.efs": [{"name": "home", "mount_dir": "/fsx/home"}]}),
             "EFS mounted inside the Lustre mount: ParallelCluster 3.16's overlap check compares the storage "
             "names instead of the mount dirs (shared_storage_name_mount_dir_tuple_list), so it never fires"),
    Stricter(V("tag-key-aws", {"tags": {"aws:owner": "me"}}),
             "tag keys starting with 'aws:' are reserved by AWS: CloudFormation refuses the stack"),
    Stricter(V("tag-value-bang", {"tags": {"team": "ml!"}}),
             "AWS tag values hold letters, digits, spaces and _ . : / = + - @ only: EC2 refuses the tag"),
    Stricter(V("accounting-user-two-words", {"slurm.accounting": lambda w: {
        "uri": "db.example.com:3306", "user_name": "slurm SlurmUser=root", "password_secret_arn": w.secret_arn}}),
             "the database user is written into slurmdbd.conf, where a second word is a second setting"),
    Stricter(V("scripts-bucket-malformed", {"scripts_bucket": "Team_Scripts"}),
             "not an S3 bucket name: clusterkit's node scripts could not be uploaded"),
    Stricter(V("pyxis-enroot-etc", {"pyxis.enroot_dir": "/etc"}),
             "the enroot directory reaches a root node script that makes it writable by every user (mode 1777): "
             "/etc so, and every user is root"),
    Stricter(V("docker-on-alinux", {"os": "alinux2023", "docker.install": True}),
             "clusterkit's docker node script installs Docker's Ubuntu packages: every alinux2023 node would fail "
             "its configuration"),
    Stricter(V("pyxis-enroot-on-mount-point", {"pyxis.enroot_dir": "/fsx"}),
             "the same for the root of the shared file system"),
    Stricter(V("mount-dir-usr-local", {f"{FSX}.mount_dir": "/usr/local"}),
             "storage mounted inside a system directory hides what the image installed there (ParallelCluster "
             "reserves /usr itself only)"),
    Stricter(V("clusterkit-package-http", {"clusterkit.package": "http://example.com/clusterkit-0.1.0.tar.gz"}),
             "root on the head node would install a wheel fetched without TLS"),
    Stricter(V("slurm-value-comment", {"slurm.custom_settings": {"MaxJobCount": "50000 # enough"}}),
             "`#` starts a comment in slurm.conf: the setting is not what the spec says"),
]

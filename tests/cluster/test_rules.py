"""Every validation rule: a spec that breaks it gets a finding with the right level, path and message."""

from __future__ import annotations

import pytest
from tests.cluster.cluster_spec_helpers import RESERVATION, SUBNET, base_data, findings_of, with_fields

from clusterkit.findings import Level, has_errors

E, W, I = Level.ERROR, Level.WARNING, Level.INFO
CR = "queues[0].compute[0]"
FSX = "storage.lustre[0]"


def _queues(count: int) -> list[dict]:
    return [{"name": f"q{i}", "compute": [{"name": "c", "instance_type": "c5.large"}]} for i in range(count)]


def _computes(count: int) -> list[dict]:
    return [{"name": f"c{i}", "instance_type": "c5.large"} for i in range(count)]


def _dras(count: int) -> list[dict]:
    return [{"name": f"d{i}", "file_system_path": f"/d{i}", "data_repository_path": f"s3://b/d{i}"}
            for i in range(count)]


ACCOUNTING = {"uri": "db.example.com:3306", "user_name": "slurm",
              "password_secret_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:db-AbCdEf"}

CASES = [
    ("no-accounting", {}, Level.WARNING, "slurm.accounting", "no Slurm accounting database"),
    # names
    ("queue-name-regex", {"queues[0].name": "GPU_queue"}, E, "queues[0].name", "lower-case letter"),
    ("queue-name-long", {"queues[0].name": "q" * 26}, E, "queues[0].name", "at most 25"),
    ("queue-name-default", {"queues[0].name": "default"}, E, "queues[0].name", "reserved"),
    ("queue-name-duplicate", {"queues[1].name": "gpu"}, E, "queues[1].name", "duplicate queue name"),
    ("compute-name-regex", {f"{CR}.name": "9p4de"}, E, f"{CR}.name", "lower-case letter"),
    ("compute-name-long", {f"{CR}.name": "c" * 26}, E, f"{CR}.name", "at most 25"),
    ("compute-name-duplicate", {"queues[0].compute[1]": {"name": "p4de", "instance_type": "c5.large"}},
     E, "queues[0].compute[1].name", "duplicate compute resource name"),
    ("cluster-name-regex", {"name": "1cluster"}, E, "name", "start with a letter"),
    ("cluster-name-long", {"name": "c" * 61}, E, "name", "at most 60"),
    ("cluster-name-accounting", {"name": "c" * 41, "slurm.accounting": ACCOUNTING}, E, "name",
     "at most 40 allowed with Slurm accounting"),
    # counts
    ("too-many-queues", {"queues": _queues(51)}, E, "queues", "at most 50"),
    ("too-many-compute-per-queue", {"queues": [{"name": "q", "compute": _computes(51)}]}, E, "queues[0].compute",
     "at most 50 per queue"),
    ("too-many-compute-per-cluster", {"queues": [{"name": f"q{i}", "compute": _computes(26)} for i in range(2)]},
     E, "queues", "52 compute resources in the cluster"),
    ("no-queues", {"queues": []}, E, "queues", "at least one queue"),
    ("min-negative", {f"{CR}.min_count": -1}, E, f"{CR}.min_count", "0 or more"),
    ("max-zero", {f"{CR}.max_count": 0}, E, f"{CR}.max_count", "at least 1"),
    ("max-below-min", {f"{CR}.min_count": 3, f"{CR}.max_count": 2}, E, f"{CR}.max_count", "below min_count"),
    ("max-below-default-min", {f"{CR}.min_count": 11, f"{CR}.max_count": None}, E, f"{CR}.max_count",
     "max_count 10 is below min_count 11"),
    # EFA and placement
    ("efa-unsupported", {"queues[1].compute[0].efa": True}, E, "queues[1].compute[0].efa", "has no EFA"),
    ("efa-off", {f"{CR}.efa": False}, W, f"{CR}.efa", "supports EFA but it is turned off"),
    ("pg-id-and-name", {"queues[0].placement_group": {"id": "pg-1", "name": "pg-1"}}, E,
     "queues[0].placement_group", "both 'id' and 'name'"),
    ("pg-name-disabled", {f"{CR}.placement_group": {"enabled": False, "name": "pg-1"}}, E,
     f"{CR}.placement_group", "disabled but names"),
    ("pg-disabled-with-efa", {f"{CR}.placement_group": {"enabled": False}}, W, f"{CR}.placement_group.enabled",
     "EFA without a placement group"),
    ("pg-with-capacity-block", {"queues[0].capacity_type": "CAPACITY_BLOCK", f"{CR}.min_count": 2,
                                f"{CR}.capacity_reservation_id": RESERVATION,
                                "queues[0].placement_group": {"enabled": True}},
     W, "queues[0].placement_group.enabled", "insufficient-capacity"),
    ("efa-multi-az", {"queues[0].subnet_ids": [SUBNET, "subnet-0123456789abcdef1"]}, E, "queues[0].subnet_ids",
     "one Availability Zone"),
    # capacity
    ("capacity-type-unknown", {"queues[0].capacity_type": "SPOTTY"}, E, "queues[0].capacity_type",
     "unknown capacity type"),
    ("capacity-block-no-reservation", {"queues[0].capacity_type": "CAPACITY_BLOCK", f"{CR}.min_count": 2},
     E, f"{CR}.capacity_reservation_id", "needs the reservation id"),
    ("capacity-block-min-max", {"queues[0].capacity_type": "CAPACITY_BLOCK", f"{CR}.min_count": 1,
                                f"{CR}.capacity_reservation_id": RESERVATION},
     E, f"{CR}.min_count", "must be equal"),
    ("capacity-block-zero", {"queues[0].capacity_type": "CAPACITY_BLOCK", f"{CR}.min_count": 0,
                             f"{CR}.max_count": 1, f"{CR}.capacity_reservation_id": RESERVATION},
     E, f"{CR}.min_count", "above 0"),
    ("reservation-id-format", {f"{CR}.capacity_reservation_id": "cr-123"}, E, f"{CR}.capacity_reservation_id",
     "cr-<17 hex digits>"),
    # FSx for Lustre
    ("lustre-capacity-scratch2", {f"{FSX}.deployment_type": "SCRATCH_2", f"{FSX}.storage_capacity_gib": 1000},
     E, f"{FSX}.storage_capacity_gib", "1200 or n × 2400"),
    ("lustre-capacity-persistent2", {f"{FSX}.storage_capacity_gib": 3600}, E, f"{FSX}.storage_capacity_gib",
     "1200 or n × 2400"),
    ("lustre-capacity-scratch1", {f"{FSX}.deployment_type": "SCRATCH_1", f"{FSX}.storage_capacity_gib": 4800},
     E, f"{FSX}.storage_capacity_gib", "1200, 2400 or n × 3600"),
    ("lustre-deployment-unknown", {f"{FSX}.deployment_type": "PERSISTENT_3"}, E, f"{FSX}.deployment_type",
     "unknown FSx for Lustre deployment type"),
    ("lustre-throughput-scratch", {f"{FSX}.deployment_type": "SCRATCH_2", f"{FSX}.per_unit_storage_throughput": 200},
     E, f"{FSX}.per_unit_storage_throughput", "no per-unit throughput"),
    ("lustre-throughput-value", {f"{FSX}.per_unit_storage_throughput": 300}, E, f"{FSX}.per_unit_storage_throughput",
     "125, 250, 500, 1000"),
    ("lustre-throughput-persistent1", {f"{FSX}.deployment_type": "PERSISTENT_1",
                                       f"{FSX}.per_unit_storage_throughput": 125},
     E, f"{FSX}.per_unit_storage_throughput", "50, 100, 200"),
    ("lustre-compression", {f"{FSX}.data_compression": "ZSTD"}, E, f"{FSX}.data_compression", "only with LZ4"),
    ("lustre-export-without-import", {f"{FSX}.export_path": "s3://b/out"}, E, f"{FSX}.export_path",
     "needs import_path"),
    ("lustre-autoimport-without-import", {f"{FSX}.auto_import_policy": "NEW"}, E, f"{FSX}.auto_import_policy",
     "needs import_path"),
    ("lustre-chunk-without-import", {f"{FSX}.imported_file_chunk_size": 1024}, E,
     f"{FSX}.imported_file_chunk_size", "needs import_path"),
    ("lustre-import-not-s3", {f"{FSX}.import_path": "/data"}, E, f"{FSX}.import_path", "S3 URL"),
    ("lustre-too-many-dras", {f"{FSX}.data_repository_associations": _dras(9)}, E,
     f"{FSX}.data_repository_associations", "at most 8"),
    ("lustre-dra-and-import", {f"{FSX}.data_repository_associations": _dras(1), f"{FSX}.import_path": "s3://b/x"},
     E, f"{FSX}.import_path", "cannot be combined with data_repository_associations"),
    ("lustre-dra-path", {f"{FSX}.data_repository_associations": [
        {"name": "d", "file_system_path": "d", "data_repository_path": "s3://b/d"}]},
     W, f"{FSX}.data_repository_associations[0].file_system_path", "starts with '/'"),
    ("lustre-chunk-size", {f"{FSX}.import_path": "s3://b/in", f"{FSX}.imported_file_chunk_size": 512_001}, E,
     f"{FSX}.imported_file_chunk_size", "1 to 512,000 MiB"),
    ("lustre-with-multi-subnet-queue", {"queues[1].subnet_ids": [SUBNET, "subnet-0123456789abcdef1"]}, E,
     "queues[1].subnet_ids", "cannot reach the FSx for Lustre file system the cluster creates"),
    ("lustre-existing-id", {f"{FSX}.file_system_id": "fs-123"}, E, f"{FSX}.file_system_id", "fs-<17 characters>"),
    ("lustre-existing-with-params", {f"{FSX}.file_system_id": "fs-0123456789abcdef0",
                                     f"{FSX}.storage_capacity_gib": 1200},
     E, f"{FSX}.storage_capacity_gib", "only applies to a new file system"),
    # storage counts, names, mount dirs
    ("two-new-fsx", {"storage.lustre[1]": {"name": "fsx2", "mount_dir": "/fsx2"}}, E, "storage.lustre",
     "2 new FSx file systems; at most 1"),
    ("two-new-efs", {"storage.efs": [{"name": "a", "mount_dir": "/a"}, {"name": "b", "mount_dir": "/b"}]}, E,
     "storage.efs", "2 new EFS file systems"),
    ("too-many-existing-efs", {"storage.efs": [{"name": f"e{i}", "mount_dir": f"/e{i}",
                                                "file_system_id": "fs-0123abcd"} for i in range(21)]},
     E, "storage.efs", "21 existing EFS file systems; at most 20"),
    ("too-many-existing-fsx", {"storage.lustre": [{"name": f"f{i}", "mount_dir": f"/f{i}",
                                                   "file_system_id": "fs-0123456789abcdef0"} for i in range(21)]},
     E, "storage.lustre", "21 existing FSx"),
    ("too-many-ebs", {"storage.ebs": [{"name": f"v{i}", "mount_dir": f"/v{i}", "size_gib": 10} for i in range(6)]},
     E, "storage.ebs", "6 EBS volumes; at most 5"),
    ("storage-name-long", {f"{FSX}.name": "n" * 31}, E, f"{FSX}.name", "at most 30"),
    ("storage-name-default", {f"{FSX}.name": "default"}, E, f"{FSX}.name", "reserved"),
    ("storage-name-duplicate", {"storage.efs": [{"name": "fsx", "mount_dir": "/home"}]}, E, "storage.efs[0].name",
     "duplicate storage name"),
    ("mount-dir-system", {f"{FSX}.mount_dir": "/etc"}, E, f"{FSX}.mount_dir", "system directory"),
    ("mount-dir-slurm", {f"{FSX}.mount_dir": "/opt/slurm"}, E, f"{FSX}.mount_dir", "system directory"),
    ("mount-dir-usr-local", {f"{FSX}.mount_dir": "/usr/local"}, E, f"{FSX}.mount_dir", "inside the system directory"),
    ("mount-dir-relative", {f"{FSX}.mount_dir": "fsx"}, W, f"{FSX}.mount_dir", "relative mount_dir is mounted at /fsx"),
    ("mount-dir-space", {f"{FSX}.mount_dir": "/my data"}, W, f"{FSX}.mount_dir", "with a space breaks"),
    ("mount-dir-trailing-slash", {f"{FSX}.mount_dir": "/fsx/"}, E, f"{FSX}.mount_dir", "trailing '/'"),
    ("mount-dir-hidden", {f"{FSX}.mount_dir": "/.cache"}, E, f"{FSX}.mount_dir", "'.' or '..' parts"),
    ("mount-dir-dotdot", {f"{FSX}.mount_dir": "/fsx/../etc"}, E, f"{FSX}.mount_dir", "'.' or '..' parts"),
    ("mount-dir-duplicate", {"storage.efs": [{"name": "home", "mount_dir": "/fsx"}]}, E, "storage.efs[0].mount_dir",
     "already the mount_dir"),
    ("mount-dir-overlap", {"storage.efs": [{"name": "home", "mount_dir": "/fsx/home"}]}, E,
     "storage.efs[0].mount_dir", "overlaps /fsx"),
    ("efs-id", {"storage.efs": [{"file_system_id": "fs-1"}]}, E, "storage.efs[0].file_system_id", "EFS ids"),
    ("efs-throughput-mode", {"storage.efs": [{"throughput_mode": "elastic"}]}, E, "storage.efs[0].throughput_mode",
     "unknown EFS throughput mode"),
    ("openzfs-volume-id", {"storage.openzfs": [{"volume_id": "fsvol-1"}]}, E, "storage.openzfs[0].volume_id",
     "fsvol-"),
    ("ebs-volume-type", {"storage.ebs": [{"name": "d", "mount_dir": "/d", "volume_type": "gp4"}]}, E,
     "storage.ebs[0].volume_type", "unknown EBS volume type"),
    ("deletion-policy", {f"{FSX}.deletion_policy": "Keep"}, E, f"{FSX}.deletion_policy", "unknown deletion policy"),
    # cluster-wide
    ("os-alinux2", {"os": "alinux2"}, E, "os", "dropped in ParallelCluster 3.16"),
    ("os-unknown", {"os": "windows"}, E, "os", "does not support"),
    ("region", {"region": "mars-1"}, E, "region", "not an AWS region"),
    ("subnet-format", {"subnet_id": "net-1"}, E, "subnet_id", "subnet-<8 or 17"),
    ("subnet-missing", {"subnet_id": None, "network": "existing"}, W, "subnet_id", "placeholder"),
    ("subnet-missing-network-open", {"subnet_id": None}, I, "subnet_id", "a network of clusterkit's own"),
    ("network-create-with-subnet", {"network": "create"}, E, "subnet_id", "network: create makes"),
    ("network-unknown", {"network": "vpc"}, E, "network", "network is one of create, existing"),
    ("security-group-format", {"head_node.additional_security_groups": ["db-client"]}, E,
     "head_node.additional_security_groups[0]", "sg-<8 or 17"),
    ("clusterkit-package-option", {"clusterkit.package": "--index-url=https://evil"}, E, "clusterkit.package",
     "one requirement of the package index"),
    ("clusterkit-package-two-words", {"clusterkit.package": "clusterkit torch"}, E, "clusterkit.package",
     "one requirement of the package index"),
    ("clusterkit-package-http", {"clusterkit.package": "http://example.com/clusterkit.whl"}, E, "clusterkit.package",
     "nor an https:// URL"),
    ("clusterkit-venv-path", {"storage.lustre[0].mount_dir": "/fsx data"}, I, "clusterkit.install",
     "installs clusterkit into /home/clusterkit/venv-"),
    ("accounting-create", {"slurm.accounting": "create"}, I, "slurm.accounting", "placeholders for the database"),
    ("accounting-create-and-uri", {"slurm.accounting": {"create": True, "uri": "db:3306"}}, E,
     "slurm.accounting.uri", "makes its own database"),
    ("accounting-incomplete", {"slurm.accounting": {"uri": "db:3306"}}, E, "slurm.accounting.user_name",
     "needs user_name, password_secret_arn"),
    ("accounting-create-name-41", {"slurm.accounting": "create", "name": "c" * 41}, E, "name", "at most 40"),
    ("scaledown", {"slurm.scaledown_idletime": -2}, E, "slurm.scaledown_idletime", "-1 (never) or more"),
    ("queue-update-strategy", {"slurm.queue_update_strategy": "DRAIN_ALL"}, E, "slurm.queue_update_strategy",
     "unknown queue update strategy"),
    ("custom-slurm-denied", {"slurm.custom_settings": {"SlurmctldHost": "x"}}, E,
     "slurm.custom_settings.SlurmctldHost", "manages SlurmctldHost itself"),
    ("custom-slurm-accounting-denied", {"slurm.custom_settings": {"AccountingStorageHost": "x"},
                                        "slurm.accounting": ACCOUNTING},
     E, "slurm.custom_settings.AccountingStorageHost", "manages"),
    ("password-not-secret", {"slurm.accounting": {**ACCOUNTING, "password_secret_arn": "hunter2"}}, E,
     "slurm.accounting.password_secret_arn", "Secrets Manager"),
    ("ssh-world", {"ssh.allowed_cidr": "0.0.0.0/0"}, W, "ssh.allowed_cidr", "whole internet"),
    ("ssh-cidr-invalid", {"ssh.allowed_cidr": "10.0.0.0/99"}, E, "ssh.allowed_cidr", "not an IPv4 CIDR"),
    ("ssh-ipv6-world", {"ssh.allowed_cidr": "::/0"}, E, "ssh.allowed_cidr", "not an IPv4 CIDR"),
    ("ssh-no-mask", {"ssh.allowed_cidr": "203.0.113.7"}, E, "ssh.allowed_cidr", "with a mask"),
    ("ssh-no-key", {"ssh.key_name": None}, W, "ssh.key_name", "no SSH key pair"),
    ("instance-type-typo", {f"{CR}.instance_type": "p4de.24xlrge"}, E, f"{CR}.instance_type",
     "does not exist in EC2"),
    ("instance-type-unknown", {"queues[1].compute[0].instance_type": "c9.huge"}, E,
     "queues[1].compute[0].instance_type", "does not exist in EC2"),
    ("instance-region", {"region": "eu-west-1"}, E, f"{CR}.instance_type",
     "p4de.24xlarge is not offered in eu-west-1 (it is offered in ap-northeast-1, ap-southeast-1, eu-central-1, "
     "il-central-1, us-east-1, us-west-2"),
    ("region-not-parallelcluster", {"region": "ap-southeast-4", f"{CR}.instance_type": "c5.4xlarge"}, E, "region",
     "ParallelCluster 3.16 does not support ap-southeast-4"),
    ("efa-m6i", {"queues[1].compute[0]": {"name": "m", "instance_type": "m6i.large", "efa": True}}, E,
     "queues[1].compute[0].efa", "m6i.large has no EFA"),
    ("arm-queue-x86-head", {"queues[1].compute[0].instance_type": "c7g.4xlarge"}, E,
     "queues[1].compute[0].instance_type", "c7g.4xlarge is arm64 but the head node (c5.9xlarge) is x86_64"),
    ("resource-group-arn", {f"{CR}.capacity_reservation_resource_group_arn": "odcr"}, E,
     f"{CR}.capacity_reservation_resource_group_arn", "resource group ARN"),
    ("rocky-needs-ami", {"os": "rocky9"}, E, "image.custom_ami", "publishes no rocky9 image"),
    ("ami-id", {"image.custom_ami": "ami-123"}, E, "image.custom_ami", "ami-<17 characters>"),
    ("ami-name", {"image.custom_ami": "my-neuron-ami"}, Level.INFO, "image.custom_ami", "looked up by name at create"),
    ("efs-provisioned", {"storage.efs": [{"throughput_mode": "provisioned"}]}, E,
     "storage.efs[0].provisioned_throughput", "needs provisioned_throughput"),
    ("efs-provisioned-range", {"storage.efs": [{"throughput_mode": "provisioned", "provisioned_throughput": 0}]}, E,
     "storage.efs[0].provisioned_throughput", "1 to 1024 MiB/s"),
    ("ebs-st1-small", {"storage.ebs": [{"name": "d", "mount_dir": "/d", "volume_type": "st1", "size_gib": 100}]}, E,
     "storage.ebs[0].size_gib", "st1 volumes are 500 to 16,384 GiB"),
    ("ebs-st1-default", {"storage.ebs": [{"name": "d", "mount_dir": "/d", "volume_type": "st1"}]}, E,
     "storage.ebs[0].size_gib", "no size_gib gives a default st1 volume of 40 GiB"),
    ("accounting-scheme", {"slurm.accounting": {**ACCOUNTING, "uri": "mysql://db.example.com:3306"}}, E,
     "slurm.accounting.uri", "host:port (no scheme"),
    ("accounting-user", {"slurm.accounting": {**ACCOUNTING, "user_name": "slurm SlurmUser=root"}}, E,
     "slurm.accounting.user_name", "one word"),
    ("slurm-hidden-setting", {"slurm.custom_settings": {"SchedulerParameters": "x SlurmctldHost=evil"}}, E,
     "slurm.custom_settings.SchedulerParameters", "hides a second `Key=value`"),
    ("slurm-newline", {"slurm.custom_settings": {"MaxJobCount": "1\nSlurmctldHost=evil"}}, E,
     "slurm.custom_settings.MaxJobCount", "control character U+000A"),
    ("slurm-comment", {"slurm.custom_settings": {"MaxJobCount": "1 # max"}}, E, "slurm.custom_settings.MaxJobCount",
     "starts a comment"),
    ("slurm-bare-space", {f"{CR}.slurm_settings": {"Features": "a b"}}, E, f"{CR}.slurm_settings.Features",
     "space outside double quotes"),
    ("node-slurm-denied", {f"{CR}.slurm_settings": {"NodeName": "x"}}, E, f"{CR}.slurm_settings.NodeName",
     "at compute resource level"),
    ("control-character", {"tags": {"team": "ml\u2028x"}}, E, "tags.team", "U+2028"),
    ("huge-value", {"queues[0].custom_actions": {"on_node_start": [{"script": "s3://b/x.sh",
                                                                    "args": ["x" * 100_000]}]}}, E,
     "queues[0].custom_actions.on_node_start[0].args[0]", "100,000 characters"),
    ("enroot-dir-shell", {"pyxis.enroot_dir": "/scratch/$(reboot)"}, E, "pyxis.enroot_dir", "through a shell"),
    ("enroot-dir-dotdot", {"pyxis.enroot_dir": "/scratch/../etc"}, E, "pyxis.enroot_dir", "'..' parts"),
    ("iam-policy", {"queues[0].iam.additional_policies": ["arn:aws:s3:::bucket"]}, E,
     "queues[0].iam.additional_policies[0]", "not an IAM policy ARN"),
    ("login-pool-count", {"login_nodes": [{"name": "login", "instance_type": "c5.large", "count": -1}]}, E,
     "login_nodes[0].count", "0 or more"),
    ("scripts-bucket", {"scripts_bucket": "My_Bucket"}, E, "scripts_bucket", "not an S3 bucket name"),
    ("queue-on-node-updated", {"queues[0].custom_actions": {"on_node_updated": [{"script": "s3://b/u.sh"}]}}, E,
     "queues[0].custom_actions.on_node_updated", "head node only"),
    ("queue-without-compute", {"queues[1].compute": []}, W, "queues[1].compute", "never runs a job"),
    ("instance-type-malformed", {"head_node.instance_type": "banana"}, E, "head_node.instance_type",
     "not an EC2 instance type"),
    ("script-not-url", {"queues[0].custom_actions": {"on_node_start": [{"script": "/home/me/x.sh"}]}}, E,
     "queues[0].custom_actions.on_node_start[0].script", "s3:// or https://"),
    ("enroot-on-shared", {"pyxis.enroot_dir": "/fsx/enroot"}, W, "pyxis.enroot_dir", "shared storage"),
    ("enroot-on-mount-point", {"pyxis.enroot_dir": "/fsx"}, E, "pyxis.enroot_dir", "is the mount point /fsx"),
    ("enroot-in-system-dir", {"pyxis.enroot_dir": "/usr/local/enroot"}, E, "pyxis.enroot_dir",
     "inside the system directory /usr"),
    ("docker-not-on-ubuntu", {"os": "alinux2023", "docker.install": True}, E, "docker.install",
     "installs Docker's Ubuntu packages"),
    ("docker-off", {"docker.install": False}, I, "docker.install", "runtime: docker jobs are refused"),
    ("docker-custom-ami", {"image.custom_ami": "ami-0123456789abcdef0"}, I, "docker.install",
     "the custom AMI must bring it"),
    ("log-retention", {"monitoring.log_retention_days": 17}, E, "monitoring.log_retention_days", "not 17 days"),
    ("tag-value", {"tags": {"team": "ml!"}}, E, "tags.team", "letters, digits, spaces"),
    ("tag-key-reserved", {"tags": {"aws:owner": "me"}}, E, "tags.aws:owner", "may not start with 'aws:'"),
    ("root-volume-small", {"head_node.root_volume_gb": 40}, E, "head_node.root_volume_gb",
     "smaller than the image's (45 GiB"),
    ("root-volume-large", {"queues[0].root_volume_gb": 16_385}, E, "queues[0].root_volume_gb",
     "gp3 volumes are 1 to 16,384 GiB"),
]


def test_false_refusals_are_gone() -> None:
    """What ParallelCluster and AWS accept: tag values with spaces, a mount dir with a space (a warning)."""
    data = with_fields(base_data(), {"tags": {"team": "ml research"}, "storage.lustre[0].mount_dir": "/my data"})
    assert not has_errors(findings_of(data))


def test_base_spec_is_clean() -> None:
    clean = with_fields(base_data(), {"slurm.accounting": ACCOUNTING})
    assert [f for f in findings_of(clean) if f.level is not Level.INFO] == []


@pytest.mark.parametrize(("changes", "level", "path", "fragment"), [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_rule(changes: dict, level: Level, path: str, fragment: str) -> None:
    findings = findings_of(with_fields(base_data(), changes))
    matching = [f for f in findings if f.path == path and fragment in f.message]
    assert matching, f"no finding at {path} with {fragment!r}; got: {[str(f) for f in findings]}"
    assert matching[0].level is level
    assert matching[0].fix, "every finding says how to fix it"


def test_all_findings_are_reported_together() -> None:
    data = with_fields(base_data(), {"queues[0].name": "default", "os": "alinux2",
                                     "storage.lustre[0].mount_dir": "/etc"})
    paths = {f.path for f in findings_of(data) if f.level is Level.ERROR}
    assert {"queues[0].name", "os", "storage.lustre[0].mount_dir"} <= paths


def test_errors_come_before_warnings() -> None:
    data = with_fields(base_data(), {"ssh.allowed_cidr": "0.0.0.0/0", "os": "alinux2"})
    levels = [f.level for f in findings_of(data)]
    assert levels == sorted(levels, key=[Level.ERROR, Level.WARNING, Level.INFO].index)
    assert has_errors(findings_of(data))

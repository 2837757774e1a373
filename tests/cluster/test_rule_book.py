"""The cluster rule book: every topic's rules run, and findings come out in the book's order."""

from __future__ import annotations

import inspect
import json
import pkgutil
from importlib import import_module
from pathlib import Path

import pytest
import yaml
from tests.cluster.cluster_spec_helpers import SUBNET, base_data, with_fields

from clusterkit.cli import main
from clusterkit.cluster import validators

TOPICS = sorted(info.name for info in pkgutil.iter_modules(validators.__path__) if info.name != "common")


def _rules_of(topic: str) -> set[str]:
    """The rules a topic module defines: its public functions (helpers are private or in `common`)."""
    module = import_module(f"{validators.__name__}.{topic}")
    return {f"{topic}.{name}" for name, function in inspect.getmembers(module, inspect.isfunction)
            if function.__module__ == module.__name__ and not name.startswith("_")}


def test_every_rule_of_every_topic_is_in_the_book_once() -> None:
    listed = [f"{function.__module__.rsplit('.', 1)[1]}.{function.__name__}" for function in validators.RULES]
    assert len(listed) == len(set(listed))
    assert sorted(listed) == sorted(name for topic in TOPICS for name in _rules_of(topic))


# One error from each of several topics, among them rules whose place in the book is not their module's
# (managed storage subnets after the mount directories, IAM policies after pyxis, root volumes last).
BROKEN = {
    "name": "1bad",
    "ssh.key_name": "me\x9b",
    "ssh.allowed_cidr": "10.0.0.0",
    "queues[1].compute[0].instance_type": "c5.nope",
    "queues[1].subnet_ids": [SUBNET, "subnet-x"],
    "storage.lustre[0].storage_capacity_gib": 1000,
    "storage.efs": [{"name": "inner", "mount_dir": "/fsx/inner"}],
    "slurm.custom_settings": {"SlurmUser": "x"},
    "pyxis": {"enabled": True, "enroot_dir": "/etc"},
    "queues[0].iam": {"additional_policies": ["bad policy"]},
    "scripts_bucket": "Bad_Bucket",
    "monitoring.log_retention_days": 2,
    "tags": {"aws:x": "y"},
    "head_node.root_volume_gb": 10,
}
IN_BOOK_ORDER = [
    ("cluster.single-line", "ssh.key_name"),
    ("cluster.cluster-name", "name"),
    ("cluster.instance-types", "queues[1].compute[0].instance_type"),
    ("cluster.lustre-settings", "storage.lustre[0].storage_capacity_gib"),
    ("cluster.mount-dirs", "storage.efs[0].mount_dir"),
    ("cluster.managed-storage-subnets", "queues[1].subnet_ids"),
    ("cluster.subnets", "queues[1].subnet_ids[1]"),
    ("cluster.ssh-access", "ssh.allowed_cidr"),
    ("cluster.slurm-settings", "slurm.custom_settings.SlurmUser"),
    ("cluster.pyxis", "pyxis.enroot_dir"),
    ("cluster.iam-policies", "queues[0].iam.additional_policies[0]"),
    ("cluster.scripts-bucket", "scripts_bucket"),
    ("cluster.monitoring", "monitoring.log_retention_days"),
    ("cluster.tags", "tags.aws:x"),
    ("cluster.volume-sizes", "head_node.root_volume_gb"),
]


def test_errors_come_out_in_the_book_order(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(with_fields(base_data(), BROKEN)))
    assert main(["validate", str(spec), "--output", "json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [(f["rule"], f["path"]) for f in findings if f["level"] == "error"] == IN_BOOK_ORDER

"""Hostile values in every text field of a cluster spec: refused with a finding, or harmless.

Every string field of the spec (names, paths, ids, custom actions and their arguments, Slurm settings
(keys and values), tags, the enroot directory, ...) gets each hostile value: line breaks, `$(...)`,
backticks, quotes, `;`, `%x`, U+2028, 100 KB. Either validation refuses the spec with an error naming
that field, or clusterkit renders it, and then every node script clusterkit ships that the config runs
is executed as ParallelCluster would run it (its Args, its cfn_* environment; real bash, fake commands
on PATH), and the canary file it would have to create never appears.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.cluster_spec_helpers import SUBNET, set_field, spec_fields
from tests.cluster.node_script_runner import make_node, run_script

from clusterkit.cluster import load_spec_data, render_config, validate
from clusterkit.cluster.node_scripts import uploads
from clusterkit.findings import CONTROL_RE, Level

CANARY = "/tmp/clusterkit-canary-{token}"


def hostile_values(canary: str) -> list[str]:
    touch = f"touch {canary}"
    return [
        f"x\n{touch}", f"x\r{touch}", f"$({touch})", f"`{touch}`", f"x'; {touch}; '", f'x"; {touch}; "',
        f"x;{touch}", "%x_%j", f"x\u2028{touch}", f"x\u2029{touch}", "x" * 100_000,
        f"/scratch/$({touch})", f"--role head --enroot-dir /$({touch})", f"a SlurmctldHost=evil {touch}",
    ]


def full_spec(existing_storage: bool = False) -> dict[str, Any]:
    """A valid spec in which every field exists: with new storage and a capacity reservation, or with
    existing storage and a reservation group (those fields exclude each other)."""
    script = {"script": "s3://team-scripts/setup.sh", "args": ["--flag", "value"]}
    actions = {"on_node_start": [script], "on_node_configured": [script], "on_node_updated": [script]}
    group = "arn:aws:resource-groups:us-east-1:123456789012:group/odcr"
    reservation = ({"capacity_reservation_resource_group_arn": group}
                   if existing_storage else {"capacity_reservation_id": "cr-0123456789abcdef0"})
    if existing_storage:
        storage = {"lustre": [{"name": "fsx", "mount_dir": "/fsx", "file_system_id": "fs-0123456789abcdef0"}],
                   "efs": [{"name": "home", "mount_dir": "/home", "file_system_id": "fs-01234567"}],
                   "ebs": [{"name": "data", "mount_dir": "/data", "volume_id": "vol-0123456789abcdef0"}]}
    else:
        storage = {"lustre": [{"name": "fsx", "mount_dir": "/fsx", "deployment_type": "PERSISTENT_2",
                               "data_compression": "LZ4", "import_path": "s3://data/in",
                               "export_path": "s3://data/out", "auto_import_policy": "NEW",
                               "deletion_policy": "Retain"}],
                   "efs": [{"name": "home", "mount_dir": "/home", "throughput_mode": "provisioned",
                            "provisioned_throughput": 128, "deletion_policy": "Retain"}],
                   "ebs": [{"name": "data", "mount_dir": "/data", "volume_type": "gp3", "size_gib": 100,
                            "deletion_policy": "Retain"}]}
    storage["openzfs"] = [{"volume_id": "fsvol-0123456789abcdef0", "name": "shared", "mount_dir": "/shared"}]
    spec = {
        "name": "hostile", "region": "us-east-1", "os": "ubuntu2204", "subnet_id": SUBNET,
        "image": {"custom_ami": "ami-0123456789abcdef0"}, "scripts_bucket": "team-scripts",
        "network": "existing",
        "head_node": {"instance_type": "c5.9xlarge", "subnet_id": SUBNET, "custom_actions": actions,
                      "additional_security_groups": ["sg-0123456789abcdef0"],
                      "iam": {"additional_policies": ["AmazonSSMManagedInstanceCore"]}},
        "login_nodes": [{"name": "login", "instance_type": "c5.2xlarge", "subnet_id": SUBNET,
                         "iam": {"additional_policies": ["AmazonSSMManagedInstanceCore"]}}],
        "ssh": {"key_name": "me", "allowed_cidr": "10.1.0.0/16"},
        "queues": [{"name": "gpu", "capacity_type": "ONDEMAND", "subnet_ids": [SUBNET],
                    "placement_group": {"name": "train-pg"}, "custom_actions": {**actions, "on_node_updated": []},
                    "iam": {"additional_policies": ["AmazonSSMManagedInstanceCore"]},
                    "compute": [{"name": "trn1", "instance_type": "trn1.32xlarge", "max_count": 2, **reservation,
                                 "placement_group": {"id": "train-pg"}, "slurm_settings": {"Sockets": "2"}}]}],
        "storage": storage,
        "pyxis": {"enabled": True, "enroot_dir": "/scratch/enroot"},
        "neuron": {"install": True},
        "slurm": {"queue_update_strategy": "DRAIN", "custom_settings": {"RequeueExit": "42"},
                  "accounting": {"uri": "db.example.com:3306", "user_name": "slurm",
                                 "password_secret_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:db-x"}},
        "clusterkit": {"install": True, "package": "clusterkit==0.1.0"},
        "tags": {"team": "ml"},
    }
    return spec


def base_for(path: str) -> dict[str, Any]:
    """The first full spec that has `path` (DRAs need a Lustre without import/export paths)."""
    if "data_repository_associations" in path:
        data = full_spec()
        fsx = data["storage"]["lustre"][0]
        for key in ("import_path", "export_path", "auto_import_policy"):
            del fsx[key]
        fsx["data_repository_associations"] = [
            {"name": "d", "file_system_path": "/d", "data_repository_path": "s3://data/d",
             "auto_import_policy": ["NEW"], "auto_export_policy": ["NEW"]}]
        return data
    if path.startswith("queues[].custom_actions.on_node_updated"):
        data = full_spec()  # refused whatever it holds: on_node_updated runs on the head node only
        data["queues"][0]["custom_actions"]["on_node_updated"] = [{"script": "s3://team-scripts/u.sh", "args": ["1"]}]
        return data
    existing = any(part in path for part in ("file_system_id", "volume_id", "resource_group")) and "openzfs" not in path
    return full_spec(existing_storage=existing)


def _string_fields() -> list[str]:
    """Every spec field that holds text (or a list or map of text), from the dataclasses' own hints."""
    from clusterkit.cluster.spec import ClusterSpec

    def hint_of(path: str) -> Any:
        cls: Any = ClusterSpec
        for step in path.replace("[]", "").split("."):
            hint = typing.get_type_hints(cls)[step]
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            hint = args[0] if typing.get_origin(hint) in (typing.Union, __import__("types").UnionType) else hint
            cls = typing.get_args(hint)[0] if typing.get_origin(hint) is list else hint
        return cls

    return [path for path in spec_fields() if hint_of(path) is str or typing.get_origin(hint_of(path)) is dict]


STRING_FIELDS = _string_fields()


def _with(data: dict[str, Any], path: str, value: str, as_key: bool) -> dict[str, Any]:
    """`data` with every place `path` names (first list items) holding `value`; for a map, as a key or a value."""
    concrete = path.replace("[]", "[0]")
    target: Any = data
    for step in concrete.replace("[0]", ".0").split("."):
        target = target[int(step)] if step.isdigit() else target.get(step) if isinstance(target, dict) else None
    if isinstance(target, dict):
        return set_field(data, concrete, {value: "1"} if as_key else {"Key1": value})
    return set_field(data, concrete, value)


def _run_node_scripts(config: dict[str, Any], tmp_path: Path) -> int:
    """Run every clusterkit script the config runs, in order, on a fresh scratch node per node role (the agent's
    script finds the virtualenv the one before it installed); how many ran."""
    from clusterkit.cluster.node_scripts import node_script

    ran = 0
    for event_holder in _custom_actions(config):
        node = make_node(tmp_path / f"node-{len(list(tmp_path.iterdir()))}")
        for event, action in event_holder.items():
            for step in action.get("Sequence", [action]):
                url = step["Script"]
                if url not in uploads(config):
                    continue  # the spec's own script: not clusterkit's to run
                name = url.rsplit("/", 1)[1]
                result = run_script(node, node_script(name).path, list(step.get("Args", [])), event=event, url=url)
                assert result.returncode == 0, result.stderr
                ran += 1
    return ran


def _custom_actions(config: dict[str, Any]) -> list[dict[str, Any]]:
    holders = [config["HeadNode"].get("CustomActions", {})]
    holders += [queue.get("CustomActions", {}) for queue in config["Scheduling"]["SlurmQueues"]]
    return holders


@pytest.mark.parametrize("path", ["storage.lustre[].file_system_id", "storage.lustre[].import_path",
                                  "storage.lustre[].data_repository_associations[].name"])
def test_the_full_specs_are_valid(path: str) -> None:
    spec, findings = load_spec_data(base_for(path))
    assert spec is not None, findings
    assert not [f for f in validate(spec) if f.level is Level.ERROR]


def test_every_text_field_is_tested() -> None:
    assert len(STRING_FIELDS) >= 60 and "pyxis.enroot_dir" in STRING_FIELDS and "slurm.custom_settings" in STRING_FIELDS


@pytest.mark.parametrize("path", STRING_FIELDS)
def test_a_hostile_value_is_refused_or_harmless(path: str, tmp_path: Path) -> None:
    canary = Path(CANARY.format(token=tmp_path.name))
    canary.unlink(missing_ok=True)
    for value in hostile_values(str(canary)):
        for as_key in ((False, True) if path.endswith(("custom_settings", "slurm_settings", "tags")) else (False,)):
            data = _with(base_for(path), path, value, as_key)
            spec, findings = load_spec_data(data)
            findings = findings + (validate(spec) if spec is not None else [])
            errors = [f for f in findings if f.level is Level.ERROR]
            if errors:
                assert all(f.path and f.message and f.fix for f in errors)
                assert not any(re.search(CONTROL_RE, str(f)) for f in findings)  # every finding one line
                continue
            assert spec is not None
            # pyxis on head and queue, neuron, clusterkit and its agent on the head node
            assert _run_node_scripts(render_config(spec), tmp_path) == 5
            assert not canary.exists(), f"{path} = {value[:60]!r} ran a command"


def test_the_canary_would_be_seen(tmp_path: Path) -> None:
    """The check can fail: a script that does evaluate its argument creates the canary."""
    canary = Path(CANARY.format(token=tmp_path.name))
    node = make_node(tmp_path / "node")
    unsafe = tmp_path / "unsafe.sh"
    unsafe.write_text('#!/bin/bash\neval "echo $1"\n')
    unsafe.chmod(0o755)
    run_script(node, unsafe, [f"$(touch {canary})"])
    assert canary.exists()
    canary.unlink()


def test_every_hostile_value_in_the_enroot_dir_is_refused() -> None:
    """The enroot directory reaches a root script and enroot's shell-expanded config: only plain paths pass."""
    for value in hostile_values("/tmp/x"):
        spec, _ = load_spec_data(set_field(full_spec(), "pyxis.enroot_dir", value))
        paths = {f.path for f in validate(spec) if f.level is Level.ERROR} if spec else {"pyxis.enroot_dir"}
        assert "pyxis.enroot_dir" in paths, value[:40]


def test_a_newline_in_a_slurm_setting_is_refused() -> None:
    spec, _ = load_spec_data(set_field(full_spec(), "slurm.custom_settings", {"MaxJobCount": "1\nSlurmctldHost=x"}))
    (error,) = [f for f in validate(spec) if f.level is Level.ERROR and "U+000A" in f.message]
    assert error.path == "slurm.custom_settings.MaxJobCount"
    assert error.value == "1\\u000aSlurmctldHost=x"  # shown escaped, on one line


@pytest.mark.parametrize("path", ["network", "slurm.accounting"])
def test_every_hostile_value_in_a_short_form_choice_is_refused(path: str) -> None:
    """`network` and `slurm.accounting` take a word (create, existing / create, none): nothing else passes."""
    for value in hostile_values("/tmp/x") + ["CREATE", "create ", " none"]:
        spec, findings = load_spec_data(set_field(full_spec(), path, value))
        errors = [f for f in findings + (validate(spec) if spec else []) if f.level is Level.ERROR and f.path == path]
        assert errors and all(f.fix and not re.search(CONTROL_RE, str(f)) for f in errors), value[:40]

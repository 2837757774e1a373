"""`clusterkit validate` and `create-cluster --provider aws --dry-run`, through the CLI's own entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.cluster.cluster_spec_helpers import SUBNET, base_data, set_field

from clusterkit.cli import main
from clusterkit.cluster import load_spec_data, render_config
from clusterkit.errors import ClusterkitError


def _run(argv: list[str]) -> int:
    """The CLI, raising its errors (--debug) so that tests see them whole."""
    return main([*argv, "--debug"])


def _write_spec(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_dry_run_of_preset_writes_a_config_that_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "cluster.yaml"
    code = _run(["create-cluster", "--preset", "p4de", "--name", "train", "--dry-run", "--subnet-id", SUBNET,
                 "--key-name", "me", "--region", "us-west-2", "--output-config", str(out)])
    assert code == 0
    config = yaml.safe_load(out.read_text())
    assert config["Region"] == "us-west-2"
    assert config["HeadNode"]["Networking"]["SubnetId"] == SUBNET
    assert config["HeadNode"]["Ssh"]["KeyName"] == "me"
    assert config["Scheduling"]["SlurmQueues"][0]["ComputeResources"][0]["InstanceType"] == "p4de.24xlarge"
    printed = capsys.readouterr().out
    assert "32× A100 80 GB" in printed and "1600 Gbps" in printed and "2025-06-05" in printed
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.yaml"]  # no temporary file left behind


def test_dry_run_prints_the_config_when_no_file_is_given(capsys: pytest.CaptureFixture) -> None:
    assert _run(["create-cluster", "--preset", "g5", "--name", "dev", "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert yaml.safe_load(captured.out)["HeadNode"]["InstanceType"] == "c5.2xlarge"
    assert "placeholder" in captured.err  # findings and summary go to stderr, the YAML alone to stdout


def test_bad_spec_exits_nonzero_names_the_field_and_writes_nothing(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    spec = _write_spec(tmp_path, set_field(base_data(), "queues[0].compute[0].max_count", 0))
    out = tmp_path / "cluster.yaml"
    code = _run(["create-cluster", "--file", str(spec), "--name", "train", "--dry-run", "--output-config", str(out)])
    assert code == 1
    assert "queues[0].compute[0].max_count" in capsys.readouterr().err
    assert not out.exists()


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = _write_spec(tmp_path, base_data())
    assert _run(["create-cluster", "--file", str(spec), "--name", "train", "--dry-run", "--output", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"config", "config_text", "config_file", "summary", "findings", "files", "actions"} <= set(result)
    expected = render_config(load_spec_data(set_field(base_data(), "name", "train"))[0])
    assert result["config"] == expected
    assert result["summary"]["max_nodes"] == 12 and result["summary"]["price_table_date"] == "2025-06-05"


def test_json_output_of_a_bad_spec(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = _write_spec(tmp_path, set_field(base_data(), "os", "alinux2"))
    assert _run(["create-cluster", "--file", str(spec), "--name", "t", "--dry-run", "-o", "json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["config"] is None
    assert any(f["path"] == "os" and f["level"] == "error" for f in result["findings"])


def test_without_dry_run_it_goes_to_aws_and_says_when_there_are_no_credentials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No keys, files or instance metadata: botocore fails while signing, before anything is sent.
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ClusterkitError, match="no AWS credentials found"):
        _run(["create-cluster", "--preset", "p4de", "--name", "train"])


def test_name_is_required_and_exactly_one_source() -> None:
    with pytest.raises(SystemExit):
        _run(["create-cluster", "--preset", "p4de", "--dry-run"])
    with pytest.raises(ClusterkitError, match="either a preset or a spec file"):
        _run(["create-cluster", "--preset", "p4de", "--file", "x.yaml", "--name", "a", "--dry-run"])
    with pytest.raises(ClusterkitError, match="unknown preset 'p4e'"):
        _run(["create-cluster", "--preset", "p4e", "--name", "a", "--dry-run"])


def test_validate_verb(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    good = _write_spec(tmp_path, base_data())
    assert _run(["validate", str(good)]) == 0
    assert "valid" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(set_field(base_data(), "queues[0].compute[0].instanc_type", "x")))
    assert _run(["validate", str(bad), "--output", "json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["valid"] is False
    assert result["findings"][0]["path"] == "queues[0].compute[0].instanc_type"
    assert "did you mean 'instance_type'" in result["findings"][0]["fix"]


def test_cli_module_does_not_import_heavy_packages() -> None:
    code = ("import sys, clusterkit.cli.cluster_config; "
            "heavy = [m for m in ('yaml', 'jinja2', 'boto3', 'pcluster', 'clusterkit.cluster') if m in sys.modules]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("kind", ["directory", "fifo", "device"])
def test_output_config_onto_something_not_a_regular_file_is_refused(tmp_path: Path, kind: str,
                                                                     capsys: pytest.CaptureFixture) -> None:
    target = tmp_path / "target"
    if kind == "directory":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target = Path("/dev/null")
    before = target.stat()
    code = main(["create-cluster", "--preset", "g5", "--name", "dev", "--dry-run", "--output-config", str(target)])
    assert code == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: will not write") and "not a regular file" in error and "\n" not in error
    after = target.stat()
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)  # nothing replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == (["target"] if kind != "device" else [])


@pytest.mark.parametrize(("value", "level", "words"), [
    ("180", "warning", "may take up to 600 s; BatchStartTimeout=180"),
    ("ten", "error", "BatchStartTimeout is a whole number of seconds"),
])
def test_validate_warns_when_a_gpu_health_check_has_no_room(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                            value: str, level: str, words: str) -> None:
    spec = _write_spec(tmp_path, set_field(base_data(), "slurm.custom_settings", {"BatchStartTimeout": value}))
    assert _run(["validate", str(spec), "--output", "json"]) == (1 if level == "error" else 0)
    (finding,) = [f for f in json.loads(capsys.readouterr().out)["findings"]
                  if f["rule"] == "cluster.gpu-health-check-room"]
    assert finding["level"] == level and finding["path"] == "slurm.custom_settings.BatchStartTimeout"
    assert words in finding["message"] and "720" in finding["fix"]


@pytest.mark.parametrize("changes", [{"slurm.custom_settings": {"BatchStartTimeout": "720"}},
                                     {"slurm.custom_settings": {"BatchStartTimeout": "180"},
                                      "queues[0].gpu_health_checks": False}])
def test_validate_is_quiet_when_the_health_check_has_room_or_is_off(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                    changes: dict) -> None:
    data = base_data()
    for path, value in changes.items():
        data = set_field(data, path, value)
    assert _run(["validate", str(_write_spec(tmp_path, data)), "--output", "json"]) == 0
    assert not [f for f in json.loads(capsys.readouterr().out)["findings"]
                if f["rule"] == "cluster.gpu-health-check-room"]


# The 2026 training instances: EFA interfaces (EC2's table), ranks per node (GPUs, or NeuronCores at the
# default logical size), and whether the job rules hold version floors of the family (stack_versions.py).
NEW_TRAINING_PRESETS = {"p5e": (32, 8, True), "p5en": (16, 8, True), "p6-b200": (8, 8, True), "trn2": (16, 64, False)}


@pytest.mark.parametrize("name", sorted(NEW_TRAINING_PRESETS))
def test_the_2026_training_presets_render_validate_and_dry_run(name: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    from clusterkit.catalog import resolve_instance_type
    from clusterkit.cluster import preset, validate
    from clusterkit.findings import Level
    from clusterkit.stack_versions import FLOORS

    efa, ranks, floors = NEW_TRAINING_PRESETS[name]
    facts = resolve_instance_type(name)
    assert facts is not None and facts.efa_interfaces == efa and facts.processes_per_node == ranks
    family = facts.name.split(".")[0]
    assert any(family in floor.families for floor in FLOORS) is floors
    spec = preset(name)
    assert spec.region in facts.regions  # the preset's region offers it
    assert [f for f in validate(spec) if f.level is Level.ERROR] == []
    out = tmp_path / "cluster.yaml"
    assert _run(["create-cluster", "--preset", name, "--name", "train", "--dry-run", "--subnet-id", SUBNET,
                 "--output-config", str(out)]) == 0
    config = yaml.safe_load(out.read_text())
    assert config["Region"] == spec.region
    (compute,) = config["Scheduling"]["SlurmQueues"][0]["ComputeResources"]
    assert compute["InstanceType"] == facts.name and compute["Efa"] == {"Enabled": True}
    assert compute["Networking"] == {"PlacementGroup": {"Enabled": True}}
    gpu = facts.accelerator == "gpu"
    assert ("HealthChecks" in config["Scheduling"]["SlurmQueues"][0]) is gpu
    assert ({"BatchStartTimeout": 720} in config["Scheduling"]["SlurmSettings"]["CustomSlurmSettings"]) is gpu
    assert ("neuron.sh" in str(config["Scheduling"]["SlurmQueues"][0].get("CustomActions"))) is not gpu
    printed = capsys.readouterr().out  # 8 nodes at most, each 3200 Gbps
    assert f"accelerators (at most): {8 * facts.accelerator_count}×" in printed and "25600 Gbps" in printed


def test_p6e_gb200_is_refused_for_what_it_needs_not_as_unknown(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = _write_spec(tmp_path, set_field(base_data(), "queues[0].compute[0].instance_type", "p6e-gb200.36xlarge"))
    assert _run(["validate", str(spec), "--output", "json"]) == 1
    (finding,) = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "cluster.instance-types"]
    assert finding["path"] == "queues[0].compute[0].instance_type" and finding["level"] == "error"
    assert "does not exist" not in finding["message"]
    assert "Capacity Blocks" in finding["message"] and "arm64" in finding["message"] and "IMEX" in finding["message"]
    assert "p6-b200" in finding["fix"]

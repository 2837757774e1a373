"""The command line as a user meets it: fast help, one-line errors, clear prerequisites."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.cli import main
from clusterkit.providers.local import cluster as local_cluster

HEAVY_MODULES = ("boto3", "botocore", "submitit", "jinja2", "yaml", "torch", "pcluster", "matplotlib")


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True,
                          env=env)


def test_help_imports_no_heavy_module():
    code = ("import sys; from clusterkit.cli import build_parser; build_parser(); "
            f"print([m for m in {HEAVY_MODULES!r} if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running `code`."""
    script = f"import sys, io, contextlib\n{code}\nprint(' '.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(result.stdout.split())


def test_every_verb_is_mapped_to_the_module_that_registers_it():
    import argparse
    import importlib

    from clusterkit.cli import COMMAND_MODULES, common_options

    for module, verbs in COMMAND_MODULES.items():
        subparsers = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(subparsers, common_options())
        assert tuple(subparsers.choices) == verbs, module


@pytest.mark.parametrize(("argv", "group"), [
    (["validate", "spec.yaml"], "clusterkit.cli.cluster_config"),
    (["create-cluster", "--name", "x", "--dry-run"], "clusterkit.cli.clusters"),
    (["status", "12"], "clusterkit.cli.jobs"),
    (["timeline", "12"], "clusterkit.cli.timeline"),
])
def test_a_command_line_with_a_verb_builds_only_that_verb_group(argv, group):
    loaded = loaded_after(f"from clusterkit.cli import build_parser\nbuild_parser({argv!r}).parse_args({argv!r})")
    groups = {f"clusterkit.cli.{name}" for name in ("clusters", "cluster_config", "jobs", "stack", "local", "goodput",
                                                    "timeline")}
    assert loaded & groups == {group}


def test_help_and_unknown_verbs_still_see_every_verb():
    for argv in ([], ["--help"], ["valdate", "x"]):
        result = run_cli(*argv)
        assert "create-cluster" in result.stdout + result.stderr and "nccl-test" in result.stdout + result.stderr


def test_validate_and_dry_run_load_no_provider_or_heavy_module_they_do_not_need(tmp_path):
    silent = "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n    "
    spec = str(Path(__file__).resolve().parents[1] / "cluster-configs" / "p4de.yaml")
    validate = loaded_after(f"from clusterkit.cli import main\n{silent}main(['validate', {spec!r}])")
    assert not {m for m in validate if m.startswith(("clusterkit.providers", "clusterkit.jobs"))}
    assert validate & set(HEAVY_MODULES) == {"yaml"}
    dry_run = loaded_after(f"from clusterkit.cli import main\n{silent}main(['create-cluster', '--preset', 'p4de', "
                           f"'--name', 'b', '--dry-run', '--output-config', {str(tmp_path / 'c.yaml')!r}])")
    assert "clusterkit.providers.local" not in dry_run and "clusterkit.jobs" not in dry_run
    # A dry run asks no account and reaches no head node: no resolving, Slurm commands or SSH transport load,
    # and what only a mistake (difflib), a saved record (json) or an upload (tempfile via boto3) needs stays out.
    assert not dry_run & {"clusterkit.providers.aws.resolve", "clusterkit.providers.aws.cloudformation",
                          "clusterkit.slurm", "clusterkit.transport", "subprocess", "logging", "difflib", "json",
                          "tempfile"}
    assert dry_run & set(HEAVY_MODULES) == {"yaml"}


def test_help_lists_the_verbs():
    result = run_cli("--help")
    assert result.returncode == 0
    for verb in ("create-cluster", "describe-cluster", "list-clusters", "delete-cluster", "local"):
        assert verb in result.stdout


def test_unknown_cluster_is_one_line_error_without_traceback():
    result = run_cli("describe-cluster", "nosuch")
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "no cluster named 'nosuch'" in result.stderr and "Traceback" not in result.stderr


def test_debug_shows_the_traceback():
    result = run_cli("describe-cluster", "nosuch", "--debug")
    assert result.returncode == 1 and "Traceback" in result.stderr


def test_invalid_cluster_name_names_the_value_and_the_fix():
    result = run_cli("create-cluster", "--provider", "local", "--name", "9; rm -rf /")
    assert result.returncode == 1
    assert "invalid cluster name '9; rm -rf /'" in result.stderr and "start with a letter" in result.stderr


def test_list_clusters_shows_every_registered_cluster(tmp_path):
    from clusterkit import registry
    from clusterkit.providers.local.cluster import LocalCluster
    from clusterkit.providers.local.config import LocalClusterConfig

    env = dict(os.environ, CLUSTERKIT_HOME=str(tmp_path))
    assert json.loads(run_cli("list-clusters", "--output", "json", env=env).stdout) == []
    saved = os.environ["CLUSTERKIT_HOME"]
    os.environ["CLUSTERKIT_HOME"] = str(tmp_path)
    try:  # a record whose daemons are not running: a stopped cluster
        registry.save(LocalCluster.from_config(LocalClusterConfig("idle", 2, 2, 0, 4000, 24000, "host")).record)
    finally:
        os.environ["CLUSTERKIT_HOME"] = saved
    listed = json.loads(run_cli("list-clusters", "--output", "json", env=env).stdout)
    assert [(c["name"], c["provider"], c["status"], len(c["nodes"])) for c in listed] == [
        ("idle", "local", "stopped", 2)]
    table = run_cli("list-clusters", env=env).stdout.splitlines()
    assert table[0].split() == ["NAME", "PROVIDER", "STATUS", "NODES", "CREATED"] and table[1].split()[:4] == [
        "idle", "local", "stopped", "2"]


def test_dry_run_shows_files_and_daemons_and_writes_nothing(tmp_path):
    env = dict(os.environ, CLUSTERKIT_HOME=str(tmp_path))
    result = run_cli("create-cluster", "--name", "dry", "--nodes", "3", "--dry-run", "--output", "json", env=env)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    slurm_conf = next(text for path, text in plan["files"].items() if path.endswith("slurm.conf"))
    assert "NodeName=n[1-3]" in slurm_conf
    assert sum("slurmd -D" in command for command in plan["actions"]) == 3
    assert list(tmp_path.iterdir()) == []


def test_without_root_it_says_what_it_needs(monkeypatch, capsys):
    monkeypatch.setattr(local_cluster.os, "geteuid", lambda: 1000)
    assert main(["create-cluster", "--provider", "local", "--name", "noroot"]) == 1
    err = capsys.readouterr().err
    assert "runs munged, slurmdbd, slurmctld and slurmd as root" in err and "run clusterkit as root" in err


def test_missing_slurm_names_the_install_command(monkeypatch, capsys):
    monkeypatch.setattr(local_cluster.os, "geteuid", lambda: 0)
    monkeypatch.setattr(local_cluster.shutil, "which", lambda program: None if "slurm" in program else "/bin/x")
    assert main(["create-cluster", "--provider", "local", "--name", "noslurm"]) == 1
    err = capsys.readouterr().err
    assert "missing programs for a local Slurm cluster: slurmdbd, slurmctld, slurmd" in err
    assert "apt-get install -y --no-install-recommends slurm-wlm munge slurmdbd mariadb-server" in err


@pytest.mark.parametrize("argv", [["crash-node", "nosuch", "n1"], ["start-node", "nosuch", "n1"]])
def test_fault_injection_on_unknown_cluster_is_clear(argv):
    result = run_cli("local", *argv)
    assert result.returncode == 1 and "no cluster named 'nosuch'" in result.stderr


def test_jobs_on_an_aws_cluster_say_where_to_run_them(tmp_path):
    from clusterkit import registry

    env = dict(os.environ, CLUSTERKIT_HOME=str(tmp_path))
    os.environ["CLUSTERKIT_HOME"], saved = str(tmp_path), os.environ["CLUSTERKIT_HOME"]
    try:
        registry.save(registry.ClusterRecord("train", "aws", "2026-11-29T00:00:00+00:00",
                                             {"region": "us-east-1", "stack_id": "x", "config_file": "x"}))
    finally:
        os.environ["CLUSTERKIT_HOME"] = saved
    for argv in (["status", "1"], ["nccl-test", "--nodes", "2", "--cluster", "train"]):
        result = run_cli(*argv, env=env)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert "submitted from its head node" in result.stderr and "--cluster host" in result.stderr


def test_a_damaged_cluster_record_is_one_clear_line(tmp_path):
    (tmp_path / "clusters" / "broken").mkdir(parents=True)
    (tmp_path / "clusters" / "broken" / "cluster.json").write_text("{not json")
    result = run_cli("describe-cluster", "broken", env=dict(os.environ, CLUSTERKIT_HOME=str(tmp_path)))
    assert result.returncode == 1 and result.stderr.startswith("error: the record of cluster 'broken'")

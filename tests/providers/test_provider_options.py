"""Each provider declares its options once; every option given to the wrong provider is refused with a fix,
through the CLI and the Python API alike, from those declarations."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from clusterkit.errors import ClusterkitError
from clusterkit.providers import PROVIDERS, provider_named
from clusterkit.providers.plan import NEUTRAL, ClusterRequest

# Every provider-specific create-cluster flag, a value for it, and the provider that takes it.
FLAGS = [
    (["--preset", "p4de"], "aws"), (["--file", "spec.yaml"], "aws"), (["--region", "us-east-1"], "aws"),
    (["--subnet-id", "subnet-1"], "aws"), (["--head-subnet-id", "subnet-1"], "aws"),
    (["--key-name", "k"], "aws"), (["--custom-ami", "ami-1"], "aws"), (["--identity-file", "/nope"], "aws"),
    (["--output-config", "c.yaml"], "aws"), (["--output-prerequisites", "p.yaml"], "aws"),
    (["--account-dry-run"], "aws"),
    (["--nodes", "2"], "local"), (["--cpus-per-node", "4"], "local"), (["--gpus-per-node", "1"], "local"),
    (["--ssh"], "local"), (["--timings", "parallelcluster"], "local"), (["--replace-nodes"], "local"),
    (["--no-replace-nodes"], "local"), (["--boot-delay", "5"], "local"), (["--replacement", "hyperpod"], "local"),
    (["--slurm", "24.11"], "local"),
    (["--execution-role", "arn:aws:iam::123456789012:role/x"], "hyperpod"),
]
OTHER = {"aws": "local", "local": "aws", "hyperpod": "aws"}


def run_cli(*args: str, home: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True,
                          env=dict(os.environ, CLUSTERKIT_HOME=home))


@pytest.mark.parametrize(("flag", "owner"), FLAGS, ids=[flag[0] for flag, _ in FLAGS])
def test_the_cli_refuses_another_providers_flag(tmp_path, flag: list[str], owner: str) -> None:
    wrong = OTHER[owner]
    dry_run = [] if flag == ["--account-dry-run"] else ["--dry-run"]
    result = run_cli("create-cluster", "--name", "x", "--provider", wrong, *flag, *dry_run, home=str(tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    declared = flag[0].replace("--no-", "--")  # a negative flag is refused by the option's name
    assert f"{declared} is an option of provider {owner}, not {wrong}" in result.stderr
    assert f"drop it, or use --provider {owner}" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_drift_of_head_subnet_and_identity_file_to_a_local_cluster_is_refused(tmp_path) -> None:
    # Both once passed a local dry run silently while --region was refused.
    result = run_cli("create-cluster", "--provider", "local", "--name", "x", "--head-subnet-id", "subnet-1",
                     "--identity-file", "/nope", "--dry-run", home=str(tmp_path))
    assert result.returncode == 1
    assert "--head-subnet-id is an option of provider aws, not local" in result.stderr


def _non_default(name: str) -> object:
    default = next(f.default for f in dataclasses.fields(ClusterRequest) if f.name == name)
    return {bool: True, int: 7, str: "x"}[type(default)] if default is not None else "x"


def _wrong_provider_lacks(field: str, owner: str) -> bool:
    return field not in {option.field for option in provider_named(OTHER[owner]).options}


DECLARED = [(option.field, name) for name in ("aws", "local", "hyperpod") for option in provider_named(name).options
            if option.field in {f.name for f in dataclasses.fields(ClusterRequest)}
            and _wrong_provider_lacks(option.field, name)]


@pytest.mark.parametrize(("field", "owner"), DECLARED, ids=[field for field, _ in DECLARED])
def test_the_python_api_refuses_another_providers_field(field: str, owner: str) -> None:
    wrong = OTHER[owner]
    request = ClusterRequest(name="x", provider=wrong, **{field: _non_default(field)})
    with pytest.raises(ClusterkitError) as raised:
        provider_named(wrong).plan(request)
    assert f"is an option of provider {owner}, not {wrong}" in raised.value.message
    assert raised.value.fix == f"drop it, or use --provider {owner}"


def test_every_request_field_is_declared_and_a_flag_means_one_field_everywhere() -> None:
    # hyperpod takes aws's spec options (a preset or spec file, region, subnet): a field may have several owners.
    owners: dict[str, list[str]] = {}
    flags: dict[str, set[str]] = {}
    for name in PROVIDERS:
        for option in provider_named(name).options:
            owners.setdefault(option.field, []).append(name)
            flags.setdefault(option.flag, set()).add(option.field)
    fields = [f.name for f in dataclasses.fields(ClusterRequest) if f.name not in NEUTRAL]
    assert [field for field in fields if field not in owners] == []
    assert {flag: fields for flag, fields in flags.items() if len(fields) > 1} == {}
    assert owners["execution_role"] == ["hyperpod"] and owners["preset"] == ["aws", "hyperpod"]


def test_hyperpod_refuses_what_only_parallelcluster_takes(tmp_path) -> None:
    result = run_cli("create-cluster", "--name", "x", "--provider", "hyperpod", "--preset", "p5", "--key-name", "k",
                     "--dry-run", home=str(tmp_path))
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "--key-name is an option of provider aws, not hyperpod" in result.stderr


@pytest.mark.parametrize(("flag", "said"), [
    (["--timings", "prod"], "--timings 'prod' is not a set of timings (use one of: test, parallelcluster)"),
    (["--boot-delay", "-3"], "--boot-delay -3 is out of range (give the seconds a replacement node takes to boot"),
    (["--replacement", "hyperpod", "--no-replace-nodes"],
     "--replacement hyperpod with --no-replace-nodes: nothing would replace nodes (drop one of them)"),
])
def test_a_bad_timing_is_one_line_naming_it_and_the_fix(tmp_path, flag: list[str], said: str) -> None:
    result = run_cli("create-cluster", "--provider", "local", "--name", "x", *flag, "--dry-run", home=str(tmp_path))
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and said in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_dry_run_shows_the_timings_it_would_write(tmp_path) -> None:
    result = run_cli("create-cluster", "--provider", "local", "--name", "x", "--timings", "parallelcluster",
                     "--boot-delay", "12", "--dry-run", "--output", "json", home=str(tmp_path))
    plan = json.loads(result.stdout)
    assert plan["details"]["timings"] == {"name": "parallelcluster", "SlurmdTimeout": 180, "MessageTimeout": 60,
                                          "cred_expire": 70, "replace_nodes": True, "replace_loop_s": 60.0,
                                          "boot_delay_s": 12.0, "replacement": "clustermgtd"}
    conf = next(text for path, text in plan["files"].items() if path.endswith("slurm.conf"))
    assert "SlurmdTimeout=180" in conf.splitlines()


@pytest.mark.parametrize("value", ["23.02", "24.11\n", "$(reboot)", "host\u2028", "../../etc"])
def test_a_slurm_the_local_provider_does_not_run_is_one_line_naming_it_and_the_choices(tmp_path, value: str) -> None:
    result = run_cli("create-cluster", "--provider", "local", "--name", "x", "--slurm", value, "--dry-run",
                     home=str(tmp_path))
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "is not a Slurm the local provider runs (use one of: host, 24.11" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_slurm_comes_from_the_flag_else_the_environment_else_the_host(tmp_path) -> None:
    def planned(*flag: str, env: str | None = None) -> str:
        environ = {key: value for key, value in os.environ.items() if key != "CLUSTERKIT_LOCAL_SLURM"}
        environ |= {"CLUSTERKIT_HOME": str(tmp_path)} | ({"CLUSTERKIT_LOCAL_SLURM": env} if env else {})
        result = subprocess.run([sys.executable, "-m", "clusterkit", "create-cluster", "--provider", "local",
                                 "--name", "x", *flag, "--dry-run", "--output", "json"],
                                capture_output=True, text=True, env=environ)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["details"]["slurm"]

    assert planned() == "host"
    assert planned(env="24.11") == "24.11"
    assert planned("--slurm", "host", env="24.11") == "host"
    assert planned("--slurm", "24.11") == "24.11"
    environ = dict(os.environ, CLUSTERKIT_HOME=str(tmp_path), CLUSTERKIT_LOCAL_SLURM="23.02")
    refused = subprocess.run([sys.executable, "-m", "clusterkit", "create-cluster", "--provider", "local", "--name",
                              "x", "--dry-run"], capture_output=True, text=True, env=environ)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "$CLUSTERKIT_LOCAL_SLURM '23.02' is not a Slurm the local provider runs" in refused.stderr


def test_a_dry_run_on_a_slurm_root_shows_its_launcher_and_runs_every_daemon_of_slurm_from_it(tmp_path) -> None:
    result = run_cli("create-cluster", "--provider", "local", "--name", "x", "--slurm", "24.11", "--nodes", "2",
                     "--dry-run", "--output", "json", home=str(tmp_path))
    plan = json.loads(result.stdout)
    launcher = next(path for path in plan["files"] if path.endswith("/bin/slurm-root"))
    assert "root=/opt/clusterkit/slurm/24.11" in plan["files"][launcher].splitlines()
    actions = plan["actions"]
    for daemon in ("munged", "slurmdbd", "slurmctld"):
        assert any(f"{launcher} {daemon} " in action for action in actions), (daemon, actions)
    slurmd = [action for action in actions if " slurmd -D -N " in action]
    assert len(slurmd) == 2 and all("mount --rbind" in action and "/opt/clusterkit/slurm/24.11/usr" in action
                                    for action in slurmd)
    assert not any("slurm-root" in action for action in actions if action.startswith("mariadbd"))  # the host's

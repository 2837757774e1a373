"""An AWS cluster's Slurm is its head node's, over SSH: the public address, else SSM Session Manager; the
image's user; the key given at create or the key pair's file in ~/.ssh; a host key trusted on first use and kept
for that cluster alone. Jobs there use the clusterkit the head node installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit import registry
from clusterkit.errors import ClusterkitError
from clusterkit.providers import open_cluster
from clusterkit.providers.aws.ssh import head_node_target, key_file, os_user

from .test_cli_aws import backend, create  # noqa: F401 (the fixture)

DESCRIBED = {"headNode": {"instanceId": "i-0123456789abcdef0", "publicIpAddress": "203.0.113.7",
                          "privateIpAddress": "10.0.0.10"}}


def test_a_public_head_node_is_reached_at_its_address_with_the_key_pairs_file(tmp_path: Path) -> None:
    (tmp_path / "me.pem").write_text("key")
    target = head_node_target(DESCRIBED, region="us-east-1", os_name="ubuntu2204", key_name="me",
                              identity_file=None, known_hosts_file=str(tmp_path / "known_hosts"), ssh_dir=tmp_path)
    assert (target.host, target.user, target.identity_file) == ("203.0.113.7", "ubuntu", str(tmp_path / "me.pem"))
    assert target.options == ("StrictHostKeyChecking=accept-new",)
    assert target.known_hosts_file == str(tmp_path / "known_hosts")


def test_a_private_head_node_is_reached_through_session_manager(tmp_path: Path) -> None:
    described = {"headNode": {"instanceId": "i-0123456789abcdef0", "privateIpAddress": "10.0.0.10"}}
    target = head_node_target(described, region="eu-west-1", os_name="rocky9", key_name=None, identity_file=None,
                              known_hosts_file=str(tmp_path / "known_hosts"), ssh_dir=tmp_path)
    assert (target.host, target.user, target.identity_file) == ("i-0123456789abcdef0", "rocky", None)
    proxy = next(option for option in target.options if option.startswith("ProxyCommand="))
    assert proxy == ("ProxyCommand=aws ssm start-session --target i-0123456789abcdef0 --region eu-west-1 "
                     "--document-name AWS-StartSSHSession --parameters portNumber=%p")


def test_no_head_node_yet_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ClusterkitError) as raised:
        head_node_target({"headNode": {}}, region="us-east-1", os_name="ubuntu2204", key_name=None,
                         identity_file=None, known_hosts_file=str(tmp_path / "k"))
    assert "no head node" in raised.value.message and "describe-cluster" in raised.value.fix


def test_keys_and_users(tmp_path: Path) -> None:
    assert key_file("me", "/keys/given", tmp_path) == "/keys/given"
    assert key_file("me", None, tmp_path) is None  # no file: the agent and ~/.ssh/config
    (tmp_path / "me").write_text("key")
    assert key_file("me", None, tmp_path) == str(tmp_path / "me")
    assert [os_user(name) for name in ("alinux2023", "ubuntu2404", "rhel9", "rocky8")] == [
        "ec2-user", "ubuntu", "ec2-user", "rocky"]


def test_a_created_cluster_runs_slurm_on_its_head_node_with_the_installed_clusterkit(
        backend, capsys: pytest.CaptureFixture) -> None:  # noqa: ANN001, F811
    from clusterkit import __version__

    backend.head_node["publicIpAddress"] = "203.0.113.7"
    code, _, err = create(capsys, "--identity-file", "/keys/train.pem")
    assert code == 0, err
    cluster = open_cluster("train")
    transport = cluster.slurm().transport
    assert transport.remote and transport.target.destination == "ubuntu@203.0.113.7"
    argv = transport.ssh_argv("sinfo")
    # In double quotes, as ssh wants a path that may hold a space (tests/test_remote_ssh.py tries it on an sshd).
    assert 'IdentityFile="/keys/train.pem"' in argv
    assert f'UserKnownHostsFile="{registry.cluster_dir("train") / "known_hosts"}"' in argv
    assert registry.load("train").details["ssh"]["host"] == "203.0.113.7"  # kept: no describe next time
    assert cluster.python() == f"/fsx/clusterkit/venv-{__version__}/bin/python"
    assert cluster.runs_dir() == "/fsx/clusterkit-runs/ubuntu"


HEAD_NODE_SLURM = {  # what the head node of a preset cluster answers, as Slurm 24 prints it
    ("scontrol", "show", "config"): "AccountingStorageType   = accounting_storage/slurmdbd\nJobRequeue = 1\n",
    ("sinfo", "-h", "-o", "%P|%D|%G|%c"): "train*|4|gpu:8|96\ncpu|4|(null)|16\n",
    ("srun", "--help"): "Usage: srun [OPTIONS...]\n      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH\n"
                        "      --container-env=NAME[,NAME...]\n",
}


def test_a_supervised_job_on_that_cluster_passes_its_preflight_and_runs_the_installed_supervisor(
        backend, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch,  # noqa: ANN001, F811
        tmp_path: Path) -> None:
    import subprocess

    from clusterkit.jobs.plan import plan_job
    from clusterkit.jobs.spec import job_from_dict
    from clusterkit.transport import SshTransport

    backend.head_node["publicIpAddress"] = "203.0.113.7"
    assert create(capsys)[0] == 0
    asked: list[list[str]] = []

    def head_node(self: SshTransport, argv: list[str], **_: object) -> subprocess.CompletedProcess[bytes]:
        asked.append(argv)
        answer = HEAD_NODE_SLURM.get(tuple(argv))
        if answer is not None:
            return subprocess.CompletedProcess(argv, 0, answer.encode(), b"")
        # Directories may be made, the image file is there, the installed venv runs and has clusterkit.
        if argv[0] in ("sh", "/bin/sh", "test"):
            return subprocess.CompletedProcess(argv, 0, b"", b"")
        return subprocess.CompletedProcess(argv, 127, b"", f"{argv[0]}: not faked".encode())

    monkeypatch.setattr(SshTransport, "run", head_node)
    python = open_cluster("train").python()
    (tmp_path / "train.py").write_text("print('train')\n")
    spec = job_from_dict({"name": "llama", "partition": "train", "nodes": 2, "exclusive": True, "launcher": "torchrun",
                          "command": {"script": "train.py"}, "checkpoint_dir": "/fsx/checkpoints/llama",
                          "container": {"runtime": "pyxis", "image": "/fsx/images/pytorch.sqsh", "mounts": ["/fsx"]},
                          "supervise": True})  # no interpreter named: the cluster's installed one
    plan = plan_job(spec, cluster="train", source=tmp_path, sync=["train.py"])
    assert [str(f) for f in plan.findings if f.level.value in ("error", "warning")] == []
    assert plan.workdir.startswith("/fsx/clusterkit-runs/ubuntu/")
    assert python.startswith("/fsx/") and python != "python3"
    assert f"{python} -m clusterkit" in plan.script or f"{python}' -m clusterkit" in plan.script, plan.script
    assert ["scontrol", "show", "config"] in asked
    assert any(argv[0] == "/bin/sh" and python in argv for argv in asked)  # the preflight ran that interpreter


def test_without_credentials_the_head_node_is_one_line_naming_both_ways_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("pcluster", reason="aws-parallelcluster (the `validate` extra) is not installed")
    from clusterkit.cli import main

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path / "home"))
    registry.save(registry.ClusterRecord("train", "aws", "2026-11-30T00:00:00+00:00",
                                         {"region": "us-east-1", "stack_id": "x", "config_file": "x"}))
    assert main(["status", "1", "--cluster", "train"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: jobs on cluster 'train' are submitted from its head node")
    assert "Unable to locate credentials" in err and "aws configure" in err and "--cluster host" in err

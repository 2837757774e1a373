"""Jobs on a HyperPod cluster from elsewhere: its Slurm is the controller's, over SSH through SSM Session Manager at
HyperPod's `sagemaker-cluster:CLUSTERID_GROUP-INSTANCEID` target, the controller found in ListClusterNodes. moto's
ListClusterNodes names nodes after their group (no instance ids), so its answers come from a fake at the boto3 level
that checks each request against botocore's model; every part of the target is checked before it reaches ssh."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterkit import registry
from clusterkit.cli import main
from clusterkit.errors import ClusterkitError, MissingDependency
from clusterkit.providers import open_cluster
from clusterkit.providers.aws.ssh import check_ssm_client, head_node_target
from clusterkit.providers.hyperpod import cluster as hyperpod_module
from clusterkit.providers.hyperpod.model import problems
from clusterkit.providers.hyperpod.plan import HyperPodClusterState

ARN = "arn:aws:sagemaker:us-east-1:123456789012:cluster/abcd1234efgh"
CONTROLLER = "i-0123456789abcdef0"
TARGET = f"sagemaker-cluster:abcd1234efgh_controller-{CONTROLLER}"
PROXY = (f"aws ssm start-session --target {TARGET} --region us-east-1 --document-name AWS-StartSSHSession "
         "--parameters portNumber=%p")
REQUEST = {"ClusterName": "hp", "InstanceGroups": [
    {"InstanceGroupName": "controller", "InstanceType": "ml.m5.8xlarge", "InstanceCount": 1,
     "SlurmConfig": {"NodeType": "Controller"}},
    {"InstanceGroupName": "train-p5-48xl", "InstanceType": "ml.p5.48xlarge", "InstanceCount": 2,
     "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["train"]}}]}
PARAMETERS = {"controller_group": "controller", "clusterkit": {"venv": "/fsx/clusterkit/venv-9.9.9", "package": "x"},
              "lustre": {"file_system_id": "fs-0123456789abcdef0", "dns_name": "", "mount_name": "",
                         "mount_dir": "/fsx"}}


def node(instance_id: str, group: str, status: str = "Running") -> dict[str, Any]:
    return {"InstanceGroupName": group, "InstanceId": instance_id, "InstanceType": "ml.m5.8xlarge",
            "LaunchTime": 1764806400, "InstanceStatus": {"Status": status}}


def tools(directory: Path, *names: str) -> str:
    """A directory holding executables `names` (stand-ins; nothing runs them here), for PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = directory / name
        path.write_text("#!/bin/sh\nexit 1\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(directory)


@pytest.fixture
def hyperpod(aws_env, tmp_path, monkeypatch) -> Iterator[dict[str, Any]]:
    """A registered HyperPod cluster `hp` whose ListClusterNodes answers `world["nodes"]` (two pages), the AWS CLI
    and the Session Manager plugin on PATH."""
    import boto3
    from botocore.awsrequest import AWSResponse
    from moto import mock_aws

    from clusterkit.providers.aws.access import Aws

    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", tools(tmp_path / "bin", "aws", "session-manager-plugin") + os.pathsep
                       + os.environ["PATH"])
    request_file = tmp_path / "request.json"
    request_file.write_text(json.dumps(REQUEST))
    state = HyperPodClusterState(region="us-east-1", request_file=str(request_file), cluster_arn=ARN)
    registry.save(registry.ClusterRecord("hp", "hyperpod", "2026-12-04T00:00:00+00:00", state))
    (registry.cluster_dir("hp") / "clusterkit-lifecycle.json").write_text(json.dumps(PARAMETERS))
    world: dict[str, Any] = {"sent": [], "tmp": tmp_path, "request_file": request_file, "nodes": [
        # A group whose name holds the controller's is listed too (InstanceGroupNameContains), and first.
        node("i-0000000000000aaaa", "controller-spare"),
        node(CONTROLLER, "controller")]}
    with mock_aws():
        aws = Aws("us-east-1", boto3.Session(region_name="us-east-1"))
        monkeypatch.setattr(hyperpod_module, "Aws", lambda region: aws)
        sagemaker = aws.client("sagemaker")

        def list_nodes(params: dict[str, Any], **_: Any):  # noqa: ANN202
            params = json.loads(params["body"])
            assert problems("ListClusterNodes", params) == [], problems("ListClusterNodes", params)
            world["sent"].append(params)
            nodes = world["nodes"]
            page = ({"ClusterNodeSummaries": nodes[1:]} if "NextToken" in params
                    else {"ClusterNodeSummaries": nodes[:1], "NextToken": "page2"})
            return AWSResponse("https://stub", 200, {}, None), {**page, "ResponseMetadata": {"HTTPStatusCode": 200}}

        sagemaker.meta.events.register("before-call.sagemaker.ListClusterNodes", list_nodes)
        sagemaker.meta.events.register("before-call.sagemaker.DescribeCluster", lambda **_: (
            AWSResponse("https://stub", 200, {}, None),
            {"ClusterArn": ARN, "ClusterName": "hp", "ClusterStatus": "InService", "InstanceGroups": [],
             "ResponseMetadata": {"HTTPStatusCode": 200}}))
        yield world


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_controller_is_reached_over_ssh_through_its_ssm_target(hyperpod) -> None:
    transport = open_cluster("hp").slurm().transport
    target = transport.target
    assert transport.remote and (target.host, target.user) == (CONTROLLER, "ubuntu")
    assert target.options == (f"ProxyCommand={PROXY}", "StrictHostKeyChecking=accept-new")
    assert target.known_hosts_file == str(registry.cluster_dir("hp") / "known_hosts")
    argv = transport.ssh_argv("sinfo")
    assert argv[argv.index("--") + 1:] == [f"ubuntu@{CONTROLLER}", "sinfo"]
    assert f"ProxyCommand={PROXY}" in argv and "StrictHostKeyChecking=yes" in argv  # a kept key is insisted on
    # Both pages asked for the controller group by name; the group whose name only holds it was passed over.
    assert hyperpod["sent"] == [{"ClusterName": "hp", "InstanceGroupNameContains": "controller"},
                                {"ClusterName": "hp", "InstanceGroupNameContains": "controller",
                                 "NextToken": "page2"}]


def test_runs_go_on_the_file_system_and_jobs_use_the_installed_clusterkit(hyperpod) -> None:
    cluster = open_cluster("hp")
    assert cluster.runs_dir() == "/fsx/clusterkit-runs/ubuntu"
    assert cluster.python() == "/fsx/clusterkit/venv-9.9.9/bin/python"
    (registry.cluster_dir("hp") / "clusterkit-lifecycle.json").write_text(json.dumps({"lustre": None}))
    with pytest.raises(ClusterkitError) as raised:
        cluster.runs_dir()
    assert "mounts no FSx for Lustre file system" in raised.value.message and "--cluster host" in raised.value.fix
    assert cluster.python() == "python3"


def test_describe_shows_how_the_controller_is_reached(hyperpod, capsys) -> None:
    code, out, err = run(capsys, "describe-cluster", "hp", "--output", "json")
    assert code == 0, err
    assert json.loads(out)["controller"] == {
        "instance_id": CONTROLLER, "ssh": f"ubuntu@{CONTROLLER}", "ssm_target": TARGET, "proxy_command": PROXY,
        "identity_file": None, "known_hosts_file": str(registry.cluster_dir("hp") / "known_hosts")}
    code, out, _ = run(capsys, "describe-cluster", "hp")
    assert code == 0 and f"ssm_target={TARGET}" in out and f"proxy_command={PROXY}" in out


def test_a_key_given_at_create_is_the_one_offered(hyperpod) -> None:
    record = registry.load("hp")
    registry.save(registry.ClusterRecord("hp", "hyperpod", record.created,
                                         {**record.details, "identity_file": "/keys/my key.pem"}))
    argv = open_cluster("hp").slurm().transport.ssh_argv("true")
    assert 'IdentityFile="/keys/my key.pem"' in argv and "IdentitiesOnly=yes" in argv


HOSTILE = ["i-0123456789abcdef0\nProxyCommand=touch /tmp/pwned", "i-$(touch /tmp/pwned)", "i-0123456789abcdef0'",
           'i-"0123456789abcdef0"', "i-0123456789abcdef0\u2028", "i-0123456789abcdef0\x9b", "%h%p",
           "i-0123456789abcdef0 -oProxyCommand=x", "i-" + "a" * 100_000, ""]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_hostile_instance_id_never_reaches_ssh(hyperpod, capsys, hostile: str) -> None:
    hyperpod["nodes"][1]["InstanceId"] = hostile
    with pytest.raises(ClusterkitError) as raised:
        open_cluster("hp").slurm()
    assert "the controller's instance id" in raised.value.message and "ClusterNodeId pattern" in raised.value.message
    assert "\n" not in str(raised.value) and "\u2028" not in str(raised.value) and len(str(raised.value)) < 800
    code, out, err = run(capsys, "status", "1", "--cluster", "hp")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "submitted through its controller, which clusterkit cannot reach" in err and "--cluster host" in err


@pytest.mark.parametrize(("where", "value", "shape"), [
    ("arn", "arn:aws:sagemaker:us-east-1:123456789012:cluster/abcd1234efgh;reboot", "ClusterArn"),
    ("arn", "arn:aws:sagemaker:us-east-1:123456789012:cluster/$(id)", "ClusterArn"),
    ("group", "controller$(touch /tmp/pwned)", "ClusterInstanceGroupName"),
    ("group", "ctl\nx", "ClusterInstanceGroupName"),
    ("group", "c" * 64, "ClusterInstanceGroupName"),
    ("region", "us-east-1 --profile x", "region"),
    ("region", "us-east-1\u2028", "region"),
])
def test_a_hostile_record_never_reaches_ssh(hyperpod, where: str, value: str, shape: str) -> None:
    record = registry.load("hp")
    details = dict(record.details)
    if where == "group":
        request = json.loads(hyperpod["request_file"].read_text())
        request["InstanceGroups"][0]["InstanceGroupName"] = value
        hyperpod["request_file"].write_text(json.dumps(request))
        hyperpod["nodes"][1]["InstanceGroupName"] = value
    else:
        details["cluster_arn" if where == "arn" else "region"] = value
    registry.save(registry.ClusterRecord("hp", "hyperpod", record.created, details))
    with pytest.raises(ClusterkitError) as raised:
        open_cluster("hp").slurm()
    message = str(raised.value)
    assert (shape in message if shape != "region" else "is not an AWS region" in message), message
    assert "\n" not in message and "\u2028" not in message


@pytest.mark.parametrize(("status", "group", "said"), [
    ("Pending", "controller", "the controller node is 'Pending', not Running"),
    ("Running", "elsewhere", "lists no node of the controller group 'controller'"),
])
def test_no_running_controller_is_one_line_saying_what_to_wait_for(hyperpod, capsys, status: str, group: str,
                                                                   said: str) -> None:
    hyperpod["nodes"][1].update(InstanceGroupName=group, InstanceStatus={"Status": status})
    code, out, err = run(capsys, "status", "1", "--cluster", "hp")
    assert code == 1 and err.count("\n") == 1 and said in err and "describe-cluster" in err
    code, out, _ = run(capsys, "describe-cluster", "hp", "--output", "json")
    assert code == 0 and said in json.loads(out)["controller"]["unreachable"]


@pytest.mark.parametrize(("present", "named"), [((), "the AWS CLI (aws)"),
                                                (("aws",), "the Session Manager plugin (session-manager-plugin)")])
def test_without_the_aws_cli_or_its_plugin_one_line_says_what_to_install(hyperpod, capsys, monkeypatch,
                                                                        present: tuple[str, ...], named: str) -> None:
    monkeypatch.setenv("PATH", tools(hyperpod["tmp"] / "only", *present))
    with pytest.raises(MissingDependency) as raised:
        open_cluster("hp").slurm()
    assert raised.value.message.startswith(f"{named} is not installed") and "install" in raised.value.fix
    code, out, err = run(capsys, "status", "1", "--cluster", "hp")
    assert code == 1 and err.count("\n") == 1 and named in err


def test_a_parallelcluster_head_node_through_ssm_needs_the_same_tools(tmp_path, monkeypatch) -> None:
    private = head_node_target({"headNode": {"instanceId": CONTROLLER}}, region="us-east-1", os_name="ubuntu2204",
                               key_name=None, identity_file=None, known_hosts_file=str(tmp_path / "k"))
    public = head_node_target({"headNode": {"instanceId": CONTROLLER, "publicIpAddress": "203.0.113.7"}},
                              region="us-east-1", os_name="ubuntu2204", key_name=None, identity_file=None,
                              known_hosts_file=str(tmp_path / "k"))
    monkeypatch.setenv("PATH", tools(tmp_path / "none"))
    check_ssm_client(public)  # no SSM, no need
    with pytest.raises(MissingDependency, match="the AWS CLI"):
        check_ssm_client(private)


def test_the_create_dry_run_says_how_the_controller_will_be_reached(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path / "home"))
    args = ("create-cluster", "--provider", "hyperpod", "--preset", "p5", "--name", "train", "--execution-role",
            "arn:aws:iam::111122223333:role/hyperpod", "--identity-file", "/keys/train.pem", "--dry-run")
    code, out, err = run(capsys, *args, "--output", "json")
    assert code == 0, err
    access = json.loads(out)["details"]["controller_access"]
    planned = "sagemaker-cluster:CLUSTERID_controller-INSTANCEID"
    assert access == {"ssh": "ubuntu@INSTANCEID", "ssm_target": planned, "identity_file": "/keys/train.pem",
                      "proxy_command": f"aws ssm start-session --target {planned} --region us-east-1 "
                                       "--document-name AWS-StartSSHSession --parameters portNumber=%p"}
    code, out, err = run(capsys, *args)
    assert code == 0 and "submit jobs from here through the controller: ssh ubuntu@INSTANCEID" in err
    code, out, err = run(capsys, *args[:-2], "/keys/k\n$(touch /tmp/pwned).pem", "--dry-run")
    assert code == 1 and "identity_file: holds the control character U+000A" in err


# A stand-in for `aws ssm start-session`: it checks the arguments ssh's ProxyCommand gives it, records them, and joins
# its standard input and output to the local cluster's sshd, as Session Manager joins them to the node's port 22.
FAKE_SSM = '''#!{python}
import socket, sys, threading
expected = ["ssm", "start-session", "--target", {target!r}, "--region", "us-east-1",
            "--document-name", "AWS-StartSSHSession", "--parameters", "portNumber=22"]
with open({log!r}, "a") as log:
    log.write(repr(sys.argv[1:]) + "\\n")
if sys.argv[1:] != expected:
    sys.exit("not the start-session clusterkit should ask for")
peer = socket.create_connection(("127.0.0.1", {port}))

def back():
    while data := peer.recv(65536):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

reader = threading.Thread(target=back, daemon=True)
reader.start()
while data := sys.stdin.buffer.read1(65536):
    peer.sendall(data)
peer.shutdown(socket.SHUT_WR)
reader.join()
'''


@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_answers_through_the_proxy_command_on_a_real_sshd(hyperpod, local_cluster, monkeypatch) -> None:
    """The whole path but SSM itself: ssh runs the ProxyCommand clusterkit built, which reaches a real sshd (the
    local cluster's) and its Slurm; the host key is kept under the controller's instance id."""
    import subprocess
    import sys

    from clusterkit.providers.hyperpod import controller as controller_module
    from clusterkit.transport import read_bytes, write_bytes

    local = local_cluster.ssh_target()
    log = hyperpod["tmp"] / "ssm.log"
    fake = hyperpod["tmp"] / "ssm-bin" / "aws"
    fake.parent.mkdir()
    fake.write_text(FAKE_SSM.format(python=sys.executable, target=TARGET, log=str(log), port=local.port))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", tools(fake.parent, "session-manager-plugin") + os.pathsep + os.environ["PATH"])
    monkeypatch.setattr(controller_module, "CONTROLLER_USER", local.user)  # the local sshd's user, not ubuntu
    record = registry.load("hp")
    registry.save(registry.ClusterRecord("hp", "hyperpod", record.created,
                                         {**record.details, "identity_file": local.identity_file}))
    slurm = open_cluster("hp").slurm()
    try:
        assert slurm.ping()
        partitions = slurm.run("sinfo", "-h", "-o", "%P|%D").stdout.split()
        assert partitions and partitions == local_cluster.slurm().run("sinfo", "-h", "-o", "%P|%D").stdout.split()
        there = f"/tmp/ck-hp-{os.getpid()}/probe"
        write_bytes(slurm.transport, there, b"through ssm\n")
        assert read_bytes(slurm.transport, there) == b"through ssm\n"
        slurm.transport.run(["rm", "-rf", "--", os.path.dirname(there)])
    finally:
        slurm.transport.close()
    assert log.read_text().splitlines()[0] == repr(["ssm", "start-session", "--target", TARGET, "--region",
                                                    "us-east-1", "--document-name", "AWS-StartSSHSession",
                                                    "--parameters", "portNumber=22"])
    # Trusted on first use, under the controller's instance id, in the cluster's own file (hashed or not).
    known = subprocess.run(["ssh-keygen", "-F", CONTROLLER, "-f", str(registry.cluster_dir("hp") / "known_hosts")],
                           capture_output=True, text=True)
    assert known.returncode == 0 and "ssh-ed25519" in known.stdout


KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIF1b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"


def _dry_run(capsys, tmp_path: Path, key: Path) -> tuple[int, dict[str, Any], str]:
    code, out, err = run(capsys, "create-cluster", "--provider", "hyperpod", "--preset", "p5", "--name", "train",
                         "--execution-role", "arn:aws:iam::111122223333:role/hyperpod", "--identity-file", str(key),
                         "--dry-run", "--output", "json")
    return code, json.loads(out), err


def test_the_public_key_beside_the_identity_file_goes_to_the_lifecycle_without_its_comment(tmp_path, monkeypatch,
                                                                                         capsys) -> None:
    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path / "home"))
    key = tmp_path / "my key"
    key.write_text("private")
    key.with_name("my key.pub").write_text(f"{KEY} me@laptop; $(touch /tmp/pwned)\n")
    code, shown, err = _dry_run(capsys, tmp_path, key)
    assert code == 0, err
    (parameters,) = [json.loads(text) for path, text in shown["files"].items()
                     if path.endswith("clusterkit-lifecycle.json")]
    assert parameters["authorized_keys"] == [KEY]

    key.with_name("my key.pub").write_text("command=\"touch /tmp/pwned\" " + KEY + "\n")
    code, shown, _ = _dry_run(capsys, tmp_path, key)
    (finding,) = [f for f in shown["findings"] if f["path"] == "identity_file"]
    assert code == 1 and finding["level"] == "error" and "does not hold an OpenSSH public key" in finding["message"]

    key.with_name("my key.pub").unlink()
    code, shown, _ = _dry_run(capsys, tmp_path, key)
    (finding,) = [f for f in shown["findings"] if f["path"] == "identity_file"]
    assert code == 0 and finding["level"] == "warning" and "ssh-keygen -y -f" in finding["fix"]
    (parameters,) = [json.loads(text) for path, text in shown["files"].items()
                     if path.endswith("clusterkit-lifecycle.json")]
    assert parameters["authorized_keys"] == []


def test_a_lost_request_file_is_one_line(hyperpod, capsys) -> None:
    hyperpod["request_file"].unlink()
    code, out, err = run(capsys, "status", "1", "--cluster", "hp")
    assert code == 1 and err.count("\n") == 1 and "CreateCluster request" in err and "cannot be read" in err
    assert hyperpod["sent"] == []

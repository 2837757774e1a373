"""clusterkit's HyperPod lifecycle script, run as HyperPod runs it (root, no arguments, from the directory it copied
the lifecycle prefix into) on a scratch node with a realistic resource_config.json: real bash and Python, fake
commands that record what they were asked. A second run changes nothing; hostile values change nothing at all."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cluster.node_script_runner import Node, make_node
from tests.tools import shellcheck

from clusterkit.cluster import node_scripts
from clusterkit.cluster.spec import ClusterSpec, LustreSpec, StorageSpec
from clusterkit.cluster.presets import preset
from clusterkit.providers.hyperpod.request import PARAMETERS_FILE, lifecycle_files, lifecycle_parameters

CONTROLLER, TRAIN_1, TRAIN_2, LOGIN = "10.1.0.10", "10.1.0.21", "10.1.0.22", "10.1.0.5"
DNS = "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com"
MOUNT_NAME = "abcdefgh"
# What HyperPod writes on every node: its groups, and each instance's addresses (the agent's and the customer's).
RESOURCE_CONFIG = {
    "ClusterConfig": {"ClusterArn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/abcd1234efgh",
                      "ClusterName": "hp"},
    "InstanceGroups": [
        {"Name": "controller", "InstanceType": "ml.c5.9xlarge", "Instances": [
            {"InstanceName": "controller-1", "AgentIpAddress": "172.16.0.10", "CustomerIpAddress": CONTROLLER,
             "InstanceId": "i-0aaaaaaaaaaaaaaa1"}]},
        {"Name": "login-users", "InstanceType": "ml.m5.4xlarge", "Instances": [
            {"InstanceName": "login-users-1", "AgentIpAddress": "172.16.0.5", "CustomerIpAddress": LOGIN,
             "InstanceId": "i-0aaaaaaaaaaaaaaa5"}]},
        {"Name": "train-p5-48xl", "InstanceType": "ml.p5.48xlarge", "Instances": [
            {"InstanceName": f"train-p5-48xl-{n}", "AgentIpAddress": f"172.16.0.2{n}", "CustomerIpAddress": address,
             "InstanceId": f"i-0bbbbbbbbbbbbbbb{n}"} for n, address in ((1, TRAIN_1), (2, TRAIN_2))]},
    ],
}
FAKES = ("mount", "chown", "hostname", "mysql")
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIF1b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"


def _spec() -> ClusterSpec:
    spec = preset("p5")
    spec.name = "hp"
    spec.storage = StorageSpec(lustre=[LustreSpec(file_system_id="fs-0123456789abcdef0")])
    spec.login_nodes = []
    return spec


def parameters() -> dict:
    """The plan's parameters, with the file system's names filled in as preparing the plan does."""
    found = lifecycle_parameters(_spec())
    found["login_groups"] = ["login-users"]
    found["lustre"].update(dns_name=DNS, mount_name=MOUNT_NAME)
    return found


def hyperpod_node(tmp_path: Path, address: str, params: dict | None = None, nvme: bool = False,
                  enroot: bool = True) -> tuple[Node, Path]:
    """A node of the cluster and the directory HyperPod copied the lifecycle set into."""
    node = make_node(tmp_path, os_release="ID=ubuntu\nVERSION_CODENAME=jammy\n")
    shutil.rmtree(node.root / "opt/parallelcluster")
    config = node.root / "opt/ml/config/resource_config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps(RESOURCE_CONFIG))
    (node.root / "etc/fstab").write_text("LABEL=cloudimg-rootfs / ext4 defaults 0 1\n")
    slurm_conf = node.root / "opt/slurm/etc/slurm.conf"  # as HyperPod's agent writes it, naming the controller
    slurm_conf.parent.mkdir(parents=True)
    slurm_conf.write_text(f"ClusterName=hp\nSlurmctldHost=ip-10-1-0-10({CONTROLLER})\ninclude accounting.conf\n")
    mounted = tmp_path / "mounted"
    mounted.write_text(f"{node.root}/opt/dlami/nvme\n" if nvme else "")
    for name in (*FAKES, "mountpoint", "python3", *(("enroot",) if enroot else ())):
        fake = node.bin / name
        if fake.is_symlink() or fake.exists():
            fake.unlink()
        record = f'IFS=$\'\\x1f\'; printf \'%s\\n\' "{name}$IFS$*" >> "{node.log}"\n'
        body = {
            "hostname": f'{record}echo "{address} 172.16.0.99"\n',
            "mount": f'{record}printf "%s\\n" "${{@: -1}}" >> "{mounted}"\n',
            "mountpoint": f'grep -qxF -- "${{@: -1}}" "{mounted}"\n',
            "mysql": f'{record}cat >> "{tmp_path}/mysql.stdin"\n',
            # Real Python for the script's own reading of JSON; the virtualenv steps as the node-script fake does.
            "python3": f'if [ "$1" = -I ]; then exec {sys.executable} "$@"; fi\n{record}'
                       'if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && '
                       'echo "home = /usr/bin" > "$3/pyvenv.cfg"; fi\n',
        }.get(name, record)
        fake.write_text("#!/bin/bash\n" + body)
        fake.chmod(0o755)
    for tool in ("awk", "od"):
        if not (node.bin / tool).exists():
            (node.bin / tool).symlink_to(shutil.which(tool))
    lifecycle = tmp_path / "lifecycle"
    lifecycle.mkdir()
    for name, data in lifecycle_files(params or parameters()).items():
        (lifecycle / name).write_bytes(data)
        (lifecycle / name).chmod(0o755 if name == "on_create.sh" else 0o644)  # S3 keeps no modes
    return node, lifecycle


def run_on_create(node: Node, lifecycle: Path, *args: str, wait: int = 60) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(node.bin), "HOME": str(node.root / "root"), "CLUSTERKIT_NODE_ROOT": str(node.root),
           "CLUSTERKIT_SLURM_CONF_WAIT": str(wait)}
    return subprocess.run([str(lifecycle / "on_create.sh"), *args], env=env, capture_output=True, text=True,
                          timeout=60, cwd=lifecycle)


def tree(root: Path) -> dict[str, tuple[int, bytes | None]]:
    return {str(path.relative_to(root)): (path.lstat().st_mode, path.read_bytes() if path.is_file() else None)
            for path in sorted(root.rglob("*"))}


def test_shellcheck_has_nothing_to_say() -> None:
    assert shellcheck([node_scripts.lifecycle_scripts()["on_create.sh"]]) == {"on_create.sh": []}


def test_the_script_holds_the_one_list_of_system_directories() -> None:
    text = node_scripts.lifecycle_scripts()["on_create.sh"].read_text()
    for name, listed in (("system_trees", node_scripts.SYSTEM_TREES), ("system_dirs", node_scripts.SYSTEM_DIRS)):
        (found,) = re.findall(rf"^{name}=\(([^)]*)\)", text, re.MULTILINE)
        assert found.split() == list(listed)


def test_the_controller_mounts_fsx_keeps_accounting_starts_slurmctld_and_installs_clusterkit(tmp_path) -> None:
    node, lifecycle = hyperpod_node(tmp_path, CONTROLLER)
    result = run_on_create(node, lifecycle)
    assert result.returncode == 0, result.stderr
    root, calls = node.root, node.calls()
    entry = f"{DNS}@tcp:/{MOUNT_NAME} /fsx lustre defaults,noatime,flock,_netdev 0 0"
    assert (root / "etc/fstab").read_text().splitlines()[-1] == entry
    assert ["mount", "-t", "lustre", "-o", "noatime,flock", "--", f"{DNS}@tcp:/{MOUNT_NAME}", f"{root}/fsx"] in calls
    dbd = root / "opt/slurm/etc/slurmdbd.conf"
    assert dbd.stat().st_mode & 0o777 == 0o600 and ["chown", "slurm:slurm", str(dbd)] in calls
    password = re.search(r"^StoragePass=([0-9a-f]{48})$", dbd.read_text(), re.MULTILINE)[1]
    assert f"IDENTIFIED BY '{password}'" in (tmp_path / "mysql.stdin").read_text()
    assert f"AccountingStorageHost={CONTROLLER}" in (root / "opt/slurm/etc/accounting.conf").read_text()
    started = [call for call in calls if call[0] == "systemctl"]
    assert started == [["systemctl", "enable", "--now", name] for name in ("mariadb", "slurmdbd", "slurmctld")] + [
        ["systemctl", "daemon-reload"], ["systemctl", "enable", "--now", "clusterkit-agent.service"]]
    venv = json.loads((lifecycle / PARAMETERS_FILE).read_text())["clusterkit"]["venv"]
    assert venv.startswith("/fsx/clusterkit/venv-") and ["python3", "-m", "venv", f"{root}{venv}"] in calls
    # The cluster agent runs from that virtualenv (on HyperPod it asks for a gone node's replacement).
    unit = (root / "etc/systemd/system/clusterkit-agent.service").read_text()
    assert f"ExecStart={venv}/bin/python -m clusterkit.resilience.agent" in unit and "After=slurmctld.service" in unit
    # The controller has no NVMe: enroot's data on the root volume.
    assert "ENROOT_DATA_PATH /var/enroot/data/user-$(id -u)" in (root / "etc/enroot/enroot.conf").read_text()
    assert (root / "var/enroot/data").stat().st_mode & 0o7777 == 0o1777
    assert "node of group controller (controller)" in result.stdout

    before, calls_before = tree(root), len(calls)
    again = run_on_create(node, lifecycle)
    assert again.returncode == 0, again.stderr
    assert tree(root) == before  # the same password, fstab line, configs and virtualenv
    later = node.calls()[calls_before:]
    assert not [call for call in later if call[0] in ("mount", "mysql", "chown")]
    # Python only for the agent script's check that the virtualenv's clusterkit has the agent: nothing installed.
    assert [call for call in later if call[0] == "python3"] == [["python3", "-c", "import clusterkit.resilience.agent"]]


def test_a_compute_node_mounts_fsx_starts_slurmd_against_the_controller_and_uses_nvme(tmp_path) -> None:
    node, lifecycle = hyperpod_node(tmp_path, TRAIN_2, nvme=True)
    result = run_on_create(node, lifecycle)
    assert result.returncode == 0, result.stderr
    root, calls = node.root, node.calls()
    drop_in = root / "etc/systemd/system/slurmd.service.d/clusterkit-conf-server.conf"
    assert drop_in.read_text() == f"[Service]\nEnvironment=SLURMD_OPTIONS=--conf-server={CONTROLLER}\n"
    assert [c for c in calls if c[0] == "systemctl"] == [["systemctl", "daemon-reload"], ["systemctl", "enable",
                                                         "slurmd"], ["systemctl", "restart", "slurmd"]]
    assert "ENROOT_DATA_PATH /opt/dlami/nvme/enroot/data/user-$(id -u)" in (root / "etc/enroot/enroot.conf").read_text()
    assert not (root / "opt/slurm/etc/slurmdbd.conf").exists() and not (root / "fsx/clusterkit").exists()
    assert not [c for c in calls if c[0] in ("mysql", "python3")]
    before = tree(root)
    assert run_on_create(node, lifecycle).returncode == 0 and tree(root) == before


def test_a_login_node_runs_slurmd_too_and_an_image_without_enroot_is_left_alone(tmp_path) -> None:
    node, lifecycle = hyperpod_node(tmp_path, LOGIN, enroot=False)
    result = run_on_create(node, lifecycle)
    assert result.returncode == 0, result.stderr
    assert "node of group login-users (login)" in result.stdout
    assert not (node.root / "etc/enroot").exists()


def _with(path: str, value: object) -> dict:
    params = parameters()
    target = params
    *parents, last = path.split(".")
    for part in parents:
        target = target[part]
    target[last] = value
    return params


@pytest.mark.parametrize(("params", "said"), [
    (_with("lustre.mount_dir", "/fsx; touch /tmp/pwned"), "lustre mount_dir must be an absolute path"),
    (_with("lustre.mount_dir", "/etc"), "lustre mount_dir /etc is or holds the system directory /etc"),
    (_with("lustre.mount_dir", "/opt"), "holds the system directory /opt/amazon"),
    (_with("lustre.mount_dir", "/fsx/../etc"), "must not hold empty, . or .. segments"),
    (_with("lustre.dns_name", "$(touch /tmp/pwned).fsx.us-east-1.amazonaws.com"), "must be an FSx file system's"),
    (_with("lustre.mount_name", "a b"), "mount_name must be 1-8 letters"),
    (_with("lustre.mount_name", "abc\ntouch /tmp/pwned"), "is not one line of text"),
    (_with("clusterkit.venv", "/usr/local/clusterkit"), "must be on the shared file system"),
    (_with("clusterkit.package", "clusterkit; touch /tmp/pwned"), "not a requirement clusterkit writes"),
    (_with("enroot_dir", "/var/lib/enroot"), "is inside the system directory /var/lib"),
    (_with("controller_group", "\u2028"), "is not one line of text"),
    (_with("controller_group", "nobody"), "the controller group has no instance"),
    (_with("authorized_keys", [f"{KEY}\ntouch /tmp/pwned"]), "is not one line of text"),
    (_with("authorized_keys", ["ssh-ed25519 AAAA$(touch /tmp/pwned)"]), "not an OpenSSH public key's type and base64"),
    (_with("authorized_keys", [f"{KEY} me@laptop"]), "not an OpenSSH public key's type and base64"),
    (_with("authorized_keys", [f"{KEY}|touch"]), "not an OpenSSH public key's type and base64"),
    (_with("authorized_keys", [f"command=\"touch /tmp/pwned\" {KEY}"]), "not an OpenSSH public key's type"),
    (_with("authorized_keys", ["ssh-ed25519 " + "A" * 9000]), "not an OpenSSH public key's type and base64"),
    (_with("authorized_keys", KEY), "the lifecycle files cannot be read: TypeError"),
])
def test_hostile_values_are_refused_with_nothing_done(tmp_path, params: dict, said: str) -> None:
    node, lifecycle = hyperpod_node(tmp_path, CONTROLLER, params=params)
    before = tree(node.root)
    result = run_on_create(node, lifecycle)
    assert result.returncode != 0 and said in result.stderr, result.stderr
    assert result.stderr.startswith("on_create.sh: ") and result.stderr.count("\n") == 1
    assert tree(node.root) == before and [c[0] for c in node.calls()] == ["hostname"]


def test_arguments_and_a_stranger_node_are_refused_with_nothing_done(tmp_path) -> None:
    node, lifecycle = hyperpod_node(tmp_path, CONTROLLER)
    before = tree(node.root)
    result = run_on_create(node, lifecycle, "--role", "controller")
    assert result.returncode == 2 and "takes no arguments" in result.stderr and node.calls() == []
    (node.root / "opt/ml/config/resource_config.json").write_text('{"InstanceGroups": [{"Name": "x"}]}')
    result = run_on_create(node, lifecycle)
    assert result.returncode == 2 and result.stderr == \
        "on_create.sh: the lifecycle files cannot be read: KeyError \"'Instances'\"\n"
    before = tree(node.root)
    stranger, stranger_lifecycle = hyperpod_node(tmp_path / "other", "10.9.9.9")
    result = run_on_create(stranger, stranger_lifecycle)
    assert result.returncode == 2 and "no instance group" in result.stderr
    assert tree(node.root) == before


def test_slurm_starts_only_once_hyperpods_slurm_conf_names_the_controller(tmp_path) -> None:
    node, lifecycle = hyperpod_node(tmp_path, TRAIN_1)
    (node.root / "opt/slurm/etc/slurm.conf").write_text("SlurmctldHost=ip-10-1-0-100(10.1.0.100)\n")
    result = run_on_create(node, lifecycle, wait=0)
    assert result.returncode == 2, result.stderr
    assert result.stderr == ("on_create.sh: /opt/slurm/etc/slurm.conf does not name the controller 10.1.0.10 "
                             "after 0 s\n")
    assert not [call for call in node.calls() if call[0] == "systemctl"]


def test_the_key_given_at_create_is_authorized_for_ubuntu_on_the_controller_and_login_nodes_only(tmp_path) -> None:
    params = _with("authorized_keys", [KEY])
    for address, authorized in ((CONTROLLER, True), (LOGIN, True), (TRAIN_1, False)):
        node, lifecycle = hyperpod_node(tmp_path / address, address, params=params)
        (node.root / "home/ubuntu").mkdir(parents=True)
        result = run_on_create(node, lifecycle)
        assert result.returncode == 0, result.stderr
        keys = node.root / "home/ubuntu/.ssh/authorized_keys"
        if not authorized:
            assert not (node.root / "home/ubuntu/.ssh").exists()
            continue
        assert keys.read_text() == f"{KEY} clusterkit\n" and keys.stat().st_mode & 0o777 == 0o600
        assert (node.root / "home/ubuntu/.ssh").stat().st_mode & 0o777 == 0o700
        assert ["chown", "ubuntu:ubuntu", str(keys)] in node.calls() and "authorized a public key" in result.stdout
        before, calls_before = tree(node.root), len(node.calls())
        assert run_on_create(node, lifecycle).returncode == 0 and tree(node.root) == before  # a second run: nothing
        assert not [call for call in node.calls()[calls_before:] if call[0] == "chown"]


def test_a_key_already_there_is_kept_and_a_linked_ssh_directory_is_refused_with_nothing_done(tmp_path) -> None:
    node, lifecycle = hyperpod_node(tmp_path, CONTROLLER, params=_with("authorized_keys", [KEY]))
    ssh_dir = node.root / "home/ubuntu/.ssh"
    ssh_dir.mkdir(parents=True)
    (ssh_dir / "authorized_keys").write_text(f"{KEY} me@laptop\n")
    assert run_on_create(node, lifecycle).returncode == 0
    assert (ssh_dir / "authorized_keys").read_text() == f"{KEY} me@laptop\n"

    linked, linked_lifecycle = hyperpod_node(tmp_path / "linked", CONTROLLER, params=_with("authorized_keys", [KEY]))
    (linked.root / "home/ubuntu").mkdir(parents=True)
    (linked.root / "home/ubuntu/.ssh").symlink_to(linked.root / "root")
    before = tree(linked.root)
    result = run_on_create(linked, linked_lifecycle)
    assert result.returncode == 2 and "/home/ubuntu/.ssh or its authorized_keys is a symbolic link" in result.stderr
    assert tree(linked.root) == before and [c[0] for c in linked.calls()] == ["hostname"]

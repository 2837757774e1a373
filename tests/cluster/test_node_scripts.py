"""clusterkit's node scripts: lint-clean, and doing on a node exactly what they say, run as ParallelCluster runs
them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from tests.cluster.node_script_runner import Node, make_node, run_script, shipped
from tests.tools import shellcheck

from clusterkit.cluster import preset, render_config
from clusterkit.cluster.node_scripts import (DOCKER_VERSION, NEURON_PACKAGES, NEURON_SDK,
                                             NVIDIA_CONTAINER_TOOLKIT_VERSION, node_script, uploads)

SCRIPTS = ("pyxis-enroot.sh", "neuron.sh", "clusterkit-venv.sh", "clusterkit-agent.sh", "docker.sh")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_shellcheck_has_nothing_to_say() -> None:
    findings = shellcheck([shipped(name) for name in SCRIPTS])
    assert findings == {name: [] for name in SCRIPTS}


def test_pyxis_on_the_head_node(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    result = run_script(node, shipped("pyxis-enroot.sh"), ["--role", "head", "--enroot-dir", "/var/enroot"])
    assert result.returncode == 0, result.stderr
    conf = (node.root / "etc/enroot/enroot.conf").read_text().splitlines()
    assert "ENROOT_DATA_PATH /var/enroot/data/user-$(id -u)" in conf
    assert "ENROOT_CACHE_PATH /var/enroot/cache/group-$(id -g)" in conf
    assert "ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)" in conf
    assert "ENROOT_MOUNT_HOME n" in conf  # ParallelCluster's other settings stay
    assert not any(line.startswith("ENROOT_DATA_PATH /tmp") for line in conf)  # the example's paths do not
    assert _mode(node.root / "var/enroot/data") == 0o1777 and _mode(node.root / "run/pyxis") == 0o1777
    assert (node.root / "opt/slurm/etc/plugstack.conf").read_text().startswith("include ")
    assert "spank_pyxis.so" in (node.root / "opt/slurm/etc/plugstack.conf.d/pyxis.conf").read_text()
    assert node.calls() == [["scontrol", "reconfigure"]]


def test_pyxis_on_a_compute_node(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    result = run_script(node, shipped("pyxis-enroot.sh"), ["--role", "compute", "--enroot-dir", "/scratch/enroot"])
    assert result.returncode == 0, result.stderr
    assert "ENROOT_DATA_PATH /scratch/enroot/data/user-$(id -u)" in (node.root / "etc/enroot/enroot.conf").read_text()
    assert not (node.root / "opt/slurm/etc/plugstack.conf").exists()  # the head node's job, on shared /opt/slurm
    path_unit = (node.root / "etc/systemd/system/slurmd.service.d/clusterkit-enroot-path.conf").read_text()
    assert path_unit.startswith("[Service]\nEnvironment=PATH=/opt/slurm/sbin:")
    assert node.calls() == [["systemctl", "daemon-reload"], ["systemctl", "try-restart", "slurmd"]]


@pytest.mark.parametrize("args", [
    ["--role", "head"],
    ["--role", "login", "--enroot-dir", "/var/enroot"],
    ["--role", "head", "--enroot-dir", "var/enroot"],
    ["--role", "head", "--enroot-dir", "/scratch/../etc"],
    ["--role", "head", "--enroot-dir", "/scratch//x"],
    ["--role", "head", "--enroot-dir", "/scratch/$(id)"],
    ["--role", "head", "--enroot-dir", "/scratch/x\ntouch /tmp/pwned"],
    ["--role", "head", "--enroot-dir", "/scratch", "--extra"],
    ["--role"],
])
def test_pyxis_refuses_bad_arguments_and_changes_nothing(tmp_path: Path, args: list[str]) -> None:
    node = make_node(tmp_path)
    result = run_script(node, shipped("pyxis-enroot.sh"), args)
    assert result.returncode == 2 and result.stderr.startswith("pyxis-enroot.sh: ")
    assert not (node.root / "etc/enroot").exists() and node.calls() == []


def test_pyxis_needs_parallelclusters_examples(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    (node.root / "opt/parallelcluster/examples/pyxis/pyxis.conf").unlink()
    result = run_script(node, shipped("pyxis-enroot.sh"), ["--role", "head", "--enroot-dir", "/var/enroot"])
    assert result.returncode == 2 and "no ParallelCluster >= 3.11 pyxis/enroot" in result.stderr


def _neuron_args() -> list[str]:
    return [word for package, version in NEURON_PACKAGES.items() for word in (f"--{package}", version)]


def test_neuron_on_ubuntu_installs_the_pinned_packages_from_the_signed_repository(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    result = run_script(node, shipped("neuron.sh"), _neuron_args())
    assert result.returncode == 0, result.stderr
    assert (node.root / "etc/apt/sources.list.d/neuron.list").read_text() == (
        "deb [signed-by=/usr/share/keyrings/neuron.gpg] https://apt.repos.neuron.amazonaws.com jammy main\n")
    calls = node.calls()
    assert ["apt-get", "install", "-y", "linux-headers-6.8.0-1021-aws", "aws-neuronx-dkms=2.26.5.0",
            "aws-neuronx-runtime-lib=2.30.51.0", "aws-neuronx-collectives=2.30.59.0",
            "aws-neuronx-tools=2.28.23.0"] in calls
    assert ["apt-mark", "hold", "aws-neuronx-dkms", "aws-neuronx-runtime-lib", "aws-neuronx-collectives",
            "aws-neuronx-tools"] in calls
    assert calls[-1] == ["modprobe", "neuron"]
    assert (node.root / "etc/profile.d/neuron.sh").read_text() == "export PATH=/opt/aws/neuron/bin:$PATH\n"


def test_neuron_on_a_yum_system(tmp_path: Path) -> None:
    node = make_node(tmp_path, apt=False, os_release="ID=amzn\nVERSION_ID=2023\n")
    result = run_script(node, shipped("neuron.sh"), _neuron_args())
    assert result.returncode == 0, result.stderr
    assert "gpgcheck=1" in (node.root / "etc/yum.repos.d/neuron.repo").read_text()
    assert ["dnf", "install", "-y", "kernel-devel-6.8.0-1021-aws", "aws-neuronx-dkms-2.26.5.0",
            "aws-neuronx-runtime-lib-2.30.51.0", "aws-neuronx-collectives-2.30.59.0",
            "aws-neuronx-tools-2.28.23.0"] in node.calls()


@pytest.mark.parametrize("args", [
    ["--dkms", "2.26.5.0"],
    ["--dkms", "2.26.5.0; reboot", "--runtime", "1.0", "--collectives", "1.0", "--tools", "1.0"],
    ["--dkms", "$(id)", "--runtime", "1.0", "--collectives", "1.0", "--tools", "1.0"],
    ["--kernel", "x"],
])
def test_neuron_refuses_bad_arguments(tmp_path: Path, args: list[str]) -> None:
    node = make_node(tmp_path)
    result = run_script(node, shipped("neuron.sh"), args)
    assert result.returncode == 2 and result.stderr.startswith("neuron.sh: ") and node.calls() == []


JAMMY = 'NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\n'
DOCKER_PACKAGE = f"5:{DOCKER_VERSION}-1~ubuntu.22.04~jammy"


def test_docker_on_a_gpu_node_installs_the_pinned_engine_and_nvidia_toolkit(tmp_path: Path) -> None:
    node = make_node(tmp_path, os_release=JAMMY)
    args = ["--docker", DOCKER_VERSION, "--nvidia-container-toolkit", NVIDIA_CONTAINER_TOOLKIT_VERSION]
    result = run_script(node, shipped("docker.sh"), args)
    assert result.returncode == 0, result.stderr
    assert (node.root / "etc/apt/sources.list.d/docker.list").read_text() == (
        "deb [arch=amd64 signed-by=/etc/apt/keyrings/docker.gpg] https://download.docker.com/linux/ubuntu jammy "
        "stable\n")
    assert (node.root / "etc/apt/sources.list.d/nvidia-container-toolkit.list").read_text() == (
        "deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.gpg] "
        "https://nvidia.github.io/libnvidia-container/stable/deb/amd64 /\n")
    toolkit = f"{NVIDIA_CONTAINER_TOOLKIT_VERSION}-1"
    calls = node.calls()
    assert ["apt-get", "install", "-y", f"docker-ce={DOCKER_PACKAGE}", f"docker-ce-cli={DOCKER_PACKAGE}",
            "containerd.io", f"nvidia-container-toolkit={toolkit}", f"nvidia-container-toolkit-base={toolkit}",
            f"libnvidia-container-tools={toolkit}", f"libnvidia-container1={toolkit}"] in calls
    assert ["apt-mark", "hold", "docker-ce", "docker-ce-cli", "nvidia-container-toolkit",
            "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"] in calls
    # The runtime is registered before docker restarts (daemon.json is read at start).
    assert calls.index(["nvidia-ctk", "runtime", "configure", "--runtime=docker"]) < calls.index(
        ["systemctl", "restart", "docker"])
    assert calls[-1] == ["usermod", "-aG", "docker", "ubuntu"]


def test_docker_on_a_node_without_gpus_installs_no_toolkit(tmp_path: Path) -> None:
    node = make_node(tmp_path, os_release=JAMMY)
    result = run_script(node, shipped("docker.sh"), ["--docker", DOCKER_VERSION])
    assert result.returncode == 0, result.stderr
    assert not (node.root / "etc/apt/sources.list.d/nvidia-container-toolkit.list").exists()
    calls = node.calls()
    assert ["apt-get", "install", "-y", f"docker-ce={DOCKER_PACKAGE}", f"docker-ce-cli={DOCKER_PACKAGE}",
            "containerd.io"] in calls
    assert not any(call[0] == "nvidia-ctk" for call in calls)


@pytest.mark.parametrize("args", [
    [],
    ["--docker"],
    ["--docker", "28.5"],
    ["--docker", "28.5.2; reboot"],
    ["--docker", "$(id)"],
    ["--docker", DOCKER_VERSION, "--nvidia-container-toolkit", "1.18.2-1\ntouch /tmp/pwned"],
    ["--docker", DOCKER_VERSION, "--extra", "x"],
])
def test_docker_refuses_bad_arguments_and_changes_nothing(tmp_path: Path, args: list[str]) -> None:
    node = make_node(tmp_path, os_release=JAMMY)
    result = run_script(node, shipped("docker.sh"), args)
    assert result.returncode == 2 and result.stderr.startswith("docker.sh: ") and node.calls() == []
    assert not (node.root / "etc/apt/sources.list.d").exists()


def test_docker_refuses_a_node_that_is_not_ubuntu(tmp_path: Path) -> None:
    node = make_node(tmp_path, apt=False, os_release="ID=amzn\nVERSION_ID=2023\n")
    result = run_script(node, shipped("docker.sh"), ["--docker", DOCKER_VERSION])
    assert result.returncode == 2 and "Ubuntu nodes only" in result.stderr and node.calls() == []


def test_the_node_packages_are_the_container_recipes_neuron_release() -> None:
    """The node's Neuron runtime, collectives and tools are the release the Neuron images are built from."""
    from clusterkit.stack.recipes import NEURON_DEFAULTS

    assert NEURON_SDK == "2.28.0"
    assert (NEURON_PACKAGES["runtime"], NEURON_PACKAGES["collectives"], NEURON_PACKAGES["tools"]) == (
        NEURON_DEFAULTS["neuron_runtime"], NEURON_DEFAULTS["neuron_collectives"], NEURON_DEFAULTS["neuron_tools"])


def test_uploads_are_exactly_the_shipped_scripts_a_config_runs() -> None:
    config = render_config(preset("trn1"))
    found = uploads(config)
    assert sorted(script.name for script in found.values()) == ["clusterkit-agent.sh", "clusterkit-venv.sh",
                                                                "docker.sh", "neuron.sh", "pyxis-enroot.sh"]
    for url, script in found.items():
        assert url == script.url("clusterkit-000000000000-us-east-1") and f"sha256-{script.sha256}" in url
    # A URL naming another hash is not one of this clusterkit's scripts: nothing to upload for it.
    stale = node_script("neuron.sh").url("b").replace(node_script("neuron.sh").sha256, "0" * 64)
    assert uploads({"HeadNode": {"CustomActions": {"OnNodeStart": {"Script": stale}}}}) == {}


VENV = "/fsx/clusterkit/venv-test"


def test_clusterkit_venv_installs_once_and_checks_the_import(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    args = ["--venv", VENV, "--package", "clusterkit==0.1.0"]
    result = run_script(node, shipped("clusterkit-venv.sh"), args)
    assert result.returncode == 0, result.stderr
    target = str(node.root) + VENV
    calls = node.calls()
    assert ["python3", "-m", "venv", target] in calls
    assert ["python3", "-m", "pip", "install", "--quiet", "--no-cache-dir", "--disable-pip-version-check",
            "clusterkit==0.1.0"] in calls
    assert calls[-1] == ["python3", "-c", "import clusterkit.resilience.supervisor"]
    assert (node.root / VENV.lstrip("/") / ".clusterkit-installed").read_text() == "clusterkit==0.1.0\n"
    # A second run (a node rebooted, the action run again) finds it installed and does nothing.
    again = run_script(node, shipped("clusterkit-venv.sh"), args)
    assert again.returncode == 0 and node.calls() == calls


@pytest.mark.parametrize("args", [
    ["--venv", "fsx/venv", "--package", "clusterkit"],
    ["--venv", "/fsx/../etc", "--package", "clusterkit"],
    ["--venv", "/fsx/$(id)", "--package", "clusterkit"],
    ["--venv", "/fsx/venv\ntouch /tmp/pwned", "--package", "clusterkit"],
    ["--venv", VENV, "--package", "-e ."],
    ["--venv", VENV, "--package", "clusterkit; touch /tmp/pwned"],
    ["--venv", VENV, "--package", "clusterkit\n--index-url=http://evil"],
    ["--venv", VENV],
    ["--venv", VENV, "--package", "clusterkit", "--extra"],
])
def test_clusterkit_venv_refuses_bad_arguments_and_changes_nothing(tmp_path: Path, args: list[str]) -> None:
    node = make_node(tmp_path)
    result = run_script(node, shipped("clusterkit-venv.sh"), args)
    assert result.returncode == 2 and result.stderr.startswith("clusterkit-venv.sh: ")
    assert node.calls() == [] and not (node.root / "fsx").exists()


def test_clusterkit_venv_replaces_a_broken_virtualenv_but_never_other_files(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    data = node.root / "fsx/data"
    data.mkdir(parents=True)
    (data / "checkpoint.pt").write_text("weights")
    refused = run_script(node, shipped("clusterkit-venv.sh"), ["--venv", "/fsx/data", "--package", "clusterkit"])
    assert refused.returncode == 2 and "is not a virtualenv" in refused.stderr
    assert (data / "checkpoint.pt").read_text() == "weights" and node.calls() == []
    half_done = node.root / VENV.lstrip("/")  # a venv whose install was cut short: no marker
    half_done.mkdir(parents=True)
    (half_done / "pyvenv.cfg").write_text("home = /usr/bin\n")
    result = run_script(node, shipped("clusterkit-venv.sh"), ["--venv", VENV, "--package", "clusterkit"])
    assert result.returncode == 0, result.stderr
    assert (half_done / ".clusterkit-installed").read_text() == "clusterkit\n"


AGENT_UNIT = "etc/systemd/system/clusterkit-agent.service"


def _installed_venv(tmp_path: Path) -> Node:
    """A scratch head node where clusterkit-venv.sh ran first, as in the head node's OnNodeConfigured sequence."""
    node = make_node(tmp_path)
    result = run_script(node, shipped("clusterkit-venv.sh"), ["--venv", VENV, "--package", "clusterkit==0.1.0"])
    assert result.returncode == 0, result.stderr
    node.log.unlink()
    return node


def test_clusterkit_agent_runs_as_a_service_from_the_virtualenv(tmp_path: Path) -> None:
    node = _installed_venv(tmp_path)
    result = run_script(node, shipped("clusterkit-agent.sh"), ["--venv", VENV])
    assert result.returncode == 0, result.stderr
    unit = node.root / AGENT_UNIT
    assert unit.read_text() == (
        "[Unit]\n"
        "Description=clusterkit agent: marks a silent batch host of a clusterkit job DOWN and releases its job\n"
        "After=slurmctld.service\n"
        "\n"
        "[Service]\n"
        "Environment=PATH=/opt/slurm/bin:/opt/slurm/sbin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
        f"ExecStart={VENV}/bin/python -m clusterkit.resilience.agent --log /var/log/clusterkit/agent.jsonl\n"
        "LogsDirectory=clusterkit\n"
        "Restart=always\n"
        "RestartSec=5\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n")
    assert _mode(unit) == 0o644 and unit.stat().st_uid == os.geteuid()  # root's on the node
    assert not (node.root / "etc/systemd/system/clusterkit-agent.service.clusterkit-new").exists()
    calls = [["python3", "-c", "import clusterkit.resilience.agent"], ["systemctl", "daemon-reload"],
             ["systemctl", "enable", "--now", "clusterkit-agent.service"]]
    assert node.calls() == calls
    # A second run (the action run again) writes the same unit; enabling a running service changes nothing.
    again = run_script(node, shipped("clusterkit-agent.sh"), ["--venv", VENV])
    assert again.returncode == 0, again.stderr
    assert node.calls() == calls + calls and (node.root / AGENT_UNIT).read_text() == unit.read_text()


@pytest.mark.parametrize("args", [
    [],
    ["--venv"],
    ["--venv", "fsx/clusterkit/venv-test"],
    ["--venv", "/fsx/clusterkit/../../etc"],
    ["--venv", "/fsx//clusterkit/venv-test"],
    ["--venv", "/fsx/$(id)"],
    ["--venv", "/fsx/%n"],  # a systemd specifier in ExecStart
    ["--venv", "/fsx/venv --log /etc/passwd"],
    ["--venv", "/fsx/venv\nExecStartPre=/bin/sh -c id"],
    ["--venv", VENV, "--extra"],
])
def test_clusterkit_agent_refuses_bad_arguments_and_changes_nothing(tmp_path: Path, args: list[str]) -> None:
    node = _installed_venv(tmp_path)
    result = run_script(node, shipped("clusterkit-agent.sh"), args)
    assert result.returncode == 2 and result.stderr.startswith("clusterkit-agent.sh: ") and result.stderr.count(
        "\n") == 1, result.stderr
    assert node.calls() == [] and not (node.root / AGENT_UNIT).exists()


def _break(node: Node, how: str) -> None:
    venv = node.root / VENV.lstrip("/")
    if how == "missing":
        (node.root / "fsx").rename(node.root / "fsx-elsewhere")
    elif how == "unfinished":  # clusterkit-venv.sh was cut short before its marker
        (venv / ".clusterkit-installed").unlink()
    elif how == "marker-symlink":
        (venv / ".clusterkit-installed").unlink()
        (venv / ".clusterkit-installed").symlink_to(venv / "pyvenv.cfg")
    elif how == "no-python":
        (venv / "bin/python").unlink()
    elif how == "venv-writable":
        venv.chmod(0o777)
    elif how == "bin-writable":
        (venv / "bin").chmod(0o777)
    elif how == "parent-writable":
        venv.parent.chmod(0o777)
    elif how == "venv-symlink":  # a root virtualenv elsewhere, linked in
        venv.rename(node.root / "fsx/real-venv")
        venv.symlink_to(node.root / "fsx/real-venv")
    elif how == "parent-symlink":
        venv.parent.rename(node.root / "fsx/real-clusterkit")
        venv.parent.symlink_to(node.root / "fsx/real-clusterkit")


NOT_FINISHED = f"{VENV} is not a virtualenv clusterkit-venv.sh finished (root's): run clusterkit-venv.sh --venv"
UNTRUSTED_ON_THE_WAY = "is missing, a symlink, or a directory root does not own or others may change: not running"


@pytest.mark.parametrize(("how", "fragment"), [
    ("missing", f"/fsx {UNTRUSTED_ON_THE_WAY}"), ("unfinished", NOT_FINISHED), ("marker-symlink", NOT_FINISHED),
    ("no-python", NOT_FINISHED), ("venv-writable", NOT_FINISHED), ("bin-writable", NOT_FINISHED),
    ("parent-writable", f"/fsx/clusterkit {UNTRUSTED_ON_THE_WAY}"), ("venv-symlink", NOT_FINISHED),
    ("parent-symlink", f"/fsx/clusterkit {UNTRUSTED_ON_THE_WAY}"),
])
def test_clusterkit_agent_runs_only_the_virtualenv_clusterkit_venv_finished(tmp_path: Path, how: str,
                                                                            fragment: str) -> None:
    """Root's service runs DIR/bin/python: a virtualenv someone else may change, or one linked in, is refused."""
    node = _installed_venv(tmp_path)
    _break(node, how)
    result = run_script(node, shipped("clusterkit-agent.sh"), ["--venv", VENV])
    assert result.returncode == 2 and result.stderr.startswith(f"clusterkit-agent.sh: {fragment}"), result.stderr
    assert node.calls() == [] and not (node.root / AGENT_UNIT).exists()


def test_clusterkit_agent_refuses_a_clusterkit_without_the_agent(tmp_path: Path) -> None:
    """An older clusterkit.package has no clusterkit.resilience.agent: the service would fail on every restart."""
    node = _installed_venv(tmp_path)
    python = node.root / VENV.lstrip("/") / "bin/python"
    python.write_text("#!/bin/bash\nexit 1\n")
    result = run_script(node, shipped("clusterkit-agent.sh"), ["--venv", VENV])
    assert result.returncode == 2
    assert result.stderr.endswith("has no clusterkit.resilience.agent: install a clusterkit that has it\n")
    assert node.calls() == [] and not (node.root / AGENT_UNIT).exists()

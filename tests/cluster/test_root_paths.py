"""No path from a cluster spec reaches a root node script or a mount unless it is safe (issue 27).

The rule: a directory a root node script creates (enroot's, made writable by every user; clusterkit's
virtualenv, replaced when it is one) is a directory of its own: never a system directory
(`node_scripts.SYSTEM_TREES` and everything below them, `SYSTEM_DIRS`), never one that holds a system
directory (`/`, `/opt`, `/var`), never a mount point (the spec's storage, `/scratch`, `/home`) nor one that
holds a mount point. Storage is never mounted on a system directory either. `validate` refuses such paths
offline; the node scripts refuse the same paths on their own (run by hand), and on the node they also
refuse a symlink or a directory someone else may change on the way, and an existing directory they did
not make. Also here: what root's pip installs (`clusterkit.package`) and what lands in slurm.conf.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.cluster.cluster_spec_helpers import base_data, set_field, with_fields
from tests.cluster.node_script_runner import Node, make_node, run_script, shipped

from clusterkit.cli import main
from clusterkit.cluster import node_scripts

# Refused offline and by both scripts on their own: system directories, what lies inside them, what holds them.
SYSTEM_PATHS = [
    "/etc", "/etc/enroot", "/usr", "/usr/local", "/usr/local/enroot", "/var", "/var/lib", "/var/lib/enroot",
    "/var/tmp/enroot", "/var/log/enroot", "/var/run/enroot", "/var/spool/enroot", "/opt", "/opt/slurm",
    "/opt/slurm/etc", "/opt/parallelcluster", "/opt/parallelcluster/shared/enroot", "/opt/amazon/efa",
    "/opt/aws/neuron", "/opt/intel", "/tmp", "/tmp/enroot", "/proc", "/sys/fs", "/dev", "/dev/shm/enroot", "/boot",
    "/root", "/root/enroot", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/run", "/run/enroot", "/mnt",
    "/media", "/srv",
]
# ParallelCluster's own mount points: refused offline and by the scripts by name.
NODE_MOUNT_POINTS = ["/home", "/scratch"]
# Paths that would normalise to a system directory: refused before anything compares them.
UNNORMALISED = ["/", "//etc", "/etc/", "/usr//local", "/./etc", "/scratch/../etc", "/scratch/./enroot"]
# Directories of their own: enroot's data may live there (under /home and /fsx with a warning: shared storage).
ALLOWED = ["/scratch/enroot", "/scratch/containers", "/var/enroot", "/opt/enroot", "/local/enroot",
           "/mnt/nvme/enroot", "/home/enroot", "/fsx/enroot"]


def _spec_file(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _validate(tmp_path: Path, data: dict, capsys: pytest.CaptureFixture) -> tuple[int, list[str]]:
    """`clusterkit validate` on the spec: its exit code and its error lines."""
    code = main(["validate", str(_spec_file(tmp_path, data))])
    captured = capsys.readouterr()
    return code, [line for line in (captured.out + captured.err).splitlines() if line.startswith("error:")]


def _refused(tmp_path: Path, data: dict, field: str, capsys: pytest.CaptureFixture) -> str:
    code, errors = _validate(tmp_path, data, capsys)
    mine = [line for line in errors if line.startswith(f"error: {field}: ")]
    assert code == 1 and mine, errors
    assert "(fix: " in mine[0]
    return mine[0]


def _tree(root: Path) -> dict[str, tuple[int, bool]]:
    """Every path of a scratch node with its mode and whether it is a symlink: what "nothing changed" compares."""
    return {str(path.relative_to(root)): (path.lstat().st_mode, path.is_symlink()) for path in root.rglob("*")}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _pyxis(node: Node, enroot_dir: str) -> subprocess.CompletedProcess[str]:
    return run_script(node, shipped("pyxis-enroot.sh"), ["--role", "compute", "--enroot-dir", enroot_dir])


def _venv(node: Node, venv: str, package: str = "clusterkit==0.1.0") -> subprocess.CompletedProcess[str]:
    return run_script(node, shipped("clusterkit-venv.sh"), ["--venv", venv, "--package", package])


def _agent(node: Node, venv: str) -> subprocess.CompletedProcess[str]:
    return run_script(node, shipped("clusterkit-agent.sh"), ["--venv", venv])


def _refused_by_script(node: Node, result: subprocess.CompletedProcess[str], name: str,
                       before: dict[str, tuple[int, bool]]) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"{name}: ") and result.stderr.count("\n") == 1, result.stderr
    assert _tree(node.root) == before and node.calls() == []


def _as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: files of another user, a mount")


# --- the case, end to end ------------------------------------------------------------------------


def test_enroot_dir_etc_is_refused_by_the_cli_and_the_script_leaves_etc_alone(tmp_path: Path) -> None:
    spec = _spec_file(tmp_path, set_field(base_data(), "pyxis.enroot_dir", "/etc"))
    result = subprocess.run([sys.executable, "-m", "clusterkit", "validate", str(spec)], capture_output=True,
                            text=True)
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr
    (line,) = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error:")]
    assert line.startswith("error: pyxis.enroot_dir: /etc is a system directory") and "(fix: use a directory" in line
    dry_run = subprocess.run([sys.executable, "-m", "clusterkit", "create-cluster", "--file", str(spec), "--name",
                              "t", "--dry-run", "--output-config", str(tmp_path / "c.yaml")],
                             capture_output=True, text=True)
    assert dry_run.returncode == 1 and not (tmp_path / "c.yaml").exists()
    node = make_node(tmp_path / "node")
    (node.root / "etc").chmod(0o755)
    before = _tree(node.root)
    _refused_by_script(node, _pyxis(node, "/etc"), "pyxis-enroot.sh", before)
    assert _mode(node.root / "etc") == 0o755


# --- offline: validate ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SYSTEM_PATHS + NODE_MOUNT_POINTS + UNNORMALISED)
def test_validate_refuses_an_enroot_dir_that_is_not_its_own(path: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    line = _refused(tmp_path, set_field(base_data(), "pyxis.enroot_dir", path), "pyxis.enroot_dir", capsys)
    assert path in line or "'.' or '..' parts" in line


@pytest.mark.parametrize(("path", "mounts"), [
    ("/fsx", {}), ("/data", {"storage.ebs": [{"name": "data", "mount_dir": "/data/shared", "size_gib": 100}]}),
    ("/shared", {"storage.efs": [{"name": "home", "mount_dir": "shared"}]}),  # a relative mount_dir is /shared
])
def test_validate_refuses_an_enroot_dir_that_is_or_holds_the_specs_mount_point(
        path: str, mounts: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data = with_fields(base_data(), {"pyxis.enroot_dir": path, **mounts})
    line = _refused(tmp_path, data, "pyxis.enroot_dir", capsys)
    assert "the mount point" in line


@pytest.mark.parametrize("path", ALLOWED)
def test_validate_takes_a_directory_of_its_own(path: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code, errors = _validate(tmp_path, set_field(base_data(), "pyxis.enroot_dir", path), capsys)
    assert code == 0 and errors == []


@pytest.mark.parametrize("path", ["/home/enroot", "/fsx/enroot"])
def test_an_enroot_dir_on_shared_storage_is_a_warning(path: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    assert main(["validate", str(_spec_file(tmp_path, set_field(base_data(), "pyxis.enroot_dir", path)))]) == 0
    captured = capsys.readouterr()
    assert "warning: pyxis.enroot_dir: enroot data on shared storage" in captured.out + captured.err


@pytest.mark.parametrize("mount_dir", ["/usr/local", "/var/lib", "/var/lib/data", "/opt/slurm/etc", "/etc/data",
                                       "/tmp/data", "/lib32", "/opt/amazon", "/opt/parallelcluster/shared/x", "/var",
                                       "/opt", "/run/data", "/root/data"])
def test_storage_is_never_mounted_in_a_system_directory(mount_dir: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    """A mount_dir reaches a mount and, through clusterkit's virtualenv below it, a root script."""
    line = _refused(tmp_path, set_field(base_data(), "storage.lustre[0].mount_dir", mount_dir),
                    "storage.lustre[0].mount_dir", capsys)
    assert f"{mount_dir} " in line and "system directory" in line


@pytest.mark.parametrize("mount_dir", ["/home", "/fsx", "/data/shared", "/mnt/data", "/opt/data", "/var/data"])
def test_storage_may_be_mounted_outside_them(mount_dir: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code, errors = _validate(tmp_path, set_field(base_data(), "storage.lustre[0].mount_dir", mount_dir), capsys)
    assert code == 0 and errors == []


# --- the node scripts, on their own ------------------------------------------------------------------------


def _shell_list(script: str, name: str) -> list[str]:
    text = node_scripts.node_script(script).path.read_text()
    (found,) = re.findall(rf"^{name}=\(([^)]*)\)", text, re.MULTILINE)
    return found.split()


@pytest.mark.parametrize("script", ["pyxis-enroot.sh", "clusterkit-venv.sh", "clusterkit-agent.sh"])
def test_the_scripts_hold_the_one_list(script: str) -> None:
    assert _shell_list(script, "system_trees") == list(node_scripts.SYSTEM_TREES)
    assert _shell_list(script, "system_dirs") == list(node_scripts.SYSTEM_DIRS)
    assert _shell_list(script, "node_mount_points") == list(node_scripts.NODE_MOUNT_POINTS)


@pytest.mark.parametrize("path", SYSTEM_PATHS + NODE_MOUNT_POINTS + UNNORMALISED)
def test_pyxis_script_refuses_them_by_hand_and_changes_nothing(path: str, tmp_path: Path) -> None:
    node = make_node(tmp_path)
    for system in ("etc", "usr/local", "var/lib", "opt/slurm/etc", "home", "scratch"):
        (node.root / system).mkdir(parents=True, exist_ok=True)
    before = _tree(node.root)
    _refused_by_script(node, _pyxis(node, path), "pyxis-enroot.sh", before)


@pytest.mark.parametrize("path", SYSTEM_PATHS + NODE_MOUNT_POINTS + UNNORMALISED + ["/usr/local/clusterkit/venv"])
def test_venv_script_refuses_them_by_hand_and_changes_nothing(path: str, tmp_path: Path) -> None:
    node = make_node(tmp_path)
    before = _tree(node.root)
    _refused_by_script(node, _venv(node, path), "clusterkit-venv.sh", before)


@pytest.mark.parametrize("path", SYSTEM_PATHS + NODE_MOUNT_POINTS + UNNORMALISED + ["/usr/local/clusterkit/venv"])
def test_agent_script_refuses_them_by_hand_and_changes_nothing(path: str, tmp_path: Path) -> None:
    node = make_node(tmp_path)
    before = _tree(node.root)
    _refused_by_script(node, _agent(node, path), "clusterkit-agent.sh", before)


@pytest.mark.parametrize("path", ALLOWED)
def test_pyxis_script_makes_a_directory_of_its_own_and_takes_it_again(path: str, tmp_path: Path) -> None:
    node = make_node(tmp_path)
    for _ in range(2):  # a second run (a node configured again) takes what the first one made
        result = _pyxis(node, path)
        assert result.returncode == 0, result.stderr
    made = node.root / path.lstrip("/")
    assert [_mode(made), _mode(made / "data"), _mode(made / "cache")] == [0o1777] * 3
    assert _mode(made.parent) == 0o755


def test_pyxis_script_takes_parallelclusters_sticky_scratch(tmp_path: Path) -> None:
    """ParallelCluster mounts the instance store on /scratch with mode 1777: others cannot replace root's entries."""
    node = make_node(tmp_path)
    (node.root / "scratch").mkdir(mode=0o1777)
    (node.root / "scratch").chmod(0o1777)
    result = _pyxis(node, "/scratch/enroot")
    assert result.returncode == 0, result.stderr
    assert _mode(node.root / "scratch/enroot") == 0o1777


def _plant(node: Node, setup: str) -> None:
    """A node where someone prepared a path before the script runs."""
    root = node.root
    (root / "etc").chmod(0o755)
    if setup == "symlink-target":
        (root / "scratch").mkdir(mode=0o1777)
        (root / "scratch/enroot").symlink_to(root / "etc")
    elif setup == "symlink-data":
        (root / "scratch/enroot").mkdir(parents=True)
        (root / "scratch/enroot").chmod(0o1777)
        (root / "scratch/enroot/data").symlink_to(root / "etc")
    elif setup == "symlink-parent":
        (root / "scratch").symlink_to(root / "etc")
    elif setup == "existing-755":
        (root / "scratch/enroot").mkdir(parents=True)
        (root / "scratch/enroot").chmod(0o755)
    elif setup == "parent-writable":
        (root / "scratch").mkdir()
        (root / "scratch").chmod(0o777)  # not sticky: anyone may replace what is in it
    elif setup == "parent-group-writable":
        (root / "scratch").mkdir()
        (root / "scratch").chmod(0o775)


@pytest.mark.parametrize("setup", ["symlink-target", "symlink-data", "symlink-parent", "existing-755",
                                   "parent-writable", "parent-group-writable"])
def test_pyxis_script_refuses_what_someone_else_prepared(setup: str, tmp_path: Path) -> None:
    node = make_node(tmp_path)
    _plant(node, setup)
    before = _tree(node.root)
    _refused_by_script(node, _pyxis(node, "/scratch/enroot"), "pyxis-enroot.sh", before)
    assert _mode(node.root / "etc") == 0o755 and not (node.root / "etc/data").exists()


def test_scripts_refuse_another_users_directories(tmp_path: Path) -> None:
    _as_root()
    node = make_node(tmp_path)
    alice = node.root / "home/alice"
    alice.mkdir(parents=True)
    os.chown(alice, 4242, 4242)
    theirs = node.root / "scratch/enroot"
    theirs.mkdir(parents=True)
    theirs.chmod(0o1777)
    os.chown(theirs, 4242, 4242)
    before = _tree(node.root)
    _refused_by_script(node, _pyxis(node, "/home/alice/enroot"), "pyxis-enroot.sh", before)
    _refused_by_script(node, _pyxis(node, "/scratch/enroot"), "pyxis-enroot.sh", before)
    _refused_by_script(node, _venv(node, "/home/alice/venv"), "clusterkit-venv.sh", before)
    # A finished virtualenv the agent's service would run as root, then handed to someone else (or its parent).
    assert _venv(node, "/fsx/clusterkit/venv-test").returncode == 0
    venv = node.root / "fsx/clusterkit/venv-test"
    for theirs in (venv, venv.parent):
        os.chown(theirs, 4242, 4242)
        node.log.unlink(missing_ok=True)
        before = _tree(node.root)
        _refused_by_script(node, _agent(node, "/fsx/clusterkit/venv-test"), "clusterkit-agent.sh", before)
        os.chown(theirs, 0, 0)
    assert not (node.root / "etc/systemd/system/clusterkit-agent.service").exists()


def test_scripts_refuse_a_mount_point(tmp_path: Path) -> None:
    """/fsx on a node is the file system's root: never made world-writable, never replaced (even at mode 1777)."""
    _as_root()
    node = make_node(tmp_path)
    fsx = node.root / "fsx"
    fsx.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777,size=1m", "clusterkit-test", str(fsx)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr!r}")
    try:
        (fsx / "pyvenv.cfg").write_text("home = /usr/bin\n")
        before = _tree(node.root)
        _refused_by_script(node, _pyxis(node, "/fsx"), "pyxis-enroot.sh", before)
        _refused_by_script(node, _venv(node, "/fsx"), "clusterkit-venv.sh", before)
    finally:
        subprocess.run(["umount", str(fsx)], check=True)


def test_venv_script_never_takes_a_virtualenv_someone_else_may_change(tmp_path: Path) -> None:
    """A forged marker in a writable virtualenv would make every supervised job run somebody's Python."""
    node = make_node(tmp_path)
    venv = node.root / "fsx/clusterkit/venv-test"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / ".clusterkit-installed").write_text("clusterkit==0.1.0\n")
    venv.chmod(0o777)
    before = _tree(node.root)
    _refused_by_script(node, _venv(node, "/fsx/clusterkit/venv-test"), "clusterkit-venv.sh", before)


def test_venv_script_refuses_a_symlinked_virtualenv_or_parent(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    elsewhere = node.root / "etc/venv"
    elsewhere.mkdir()
    (elsewhere / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (node.root / "fsx").mkdir()
    (node.root / "fsx/venv").symlink_to(elsewhere)
    (node.root / "fsx/linked").symlink_to(node.root / "etc")
    before = _tree(node.root)
    _refused_by_script(node, _venv(node, "/fsx/venv"), "clusterkit-venv.sh", before)  # rm -rf would follow it
    _refused_by_script(node, _venv(node, "/fsx/linked/venv"), "clusterkit-venv.sh", before)
    assert (elsewhere / "pyvenv.cfg").exists()


# --- what root's pip installs -------------------------------------------------------------------------------

REFUSED_PACKAGES = [
    "http://example.com/clusterkit-0.1.0-py3-none-any.whl", "file:///tmp/clusterkit-0.1.0-py3-none-any.whl",
    "git+http://example.com/clusterkit.git", "git+https://example.com/clusterkit.git",
    "clusterkit@http://example.com/clusterkit.whl", "clusterkit-0.1.0-py3-none-any.whl", "clusterkit-0.1.0.tar.gz",
    "dist/clusterkit-0.1.0.tar.gz", "ftp://example.com/clusterkit.whl", "HTTPS://example.com/clusterkit.whl",
    "https:///etc/clusterkit.whl", "-e .", "clusterkit torch", "--index-url=https://evil",
]
ACCEPTED_PACKAGES = ["clusterkit", "clusterkit==0.1.0", "clusterkit[torch]>=0.1,<0.2", "zope.interface~=6.0",
                     "https://example.com/clusterkit-0.1.0-py3-none-any.whl"]


@pytest.mark.parametrize("package", REFUSED_PACKAGES)
def test_package_other_than_the_index_or_https_is_refused(package: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    line = _refused(tmp_path, set_field(base_data(), "clusterkit.package", package), "clusterkit.package", capsys)
    assert repr(package) in line
    node = make_node(tmp_path / "node")
    before = _tree(node.root)
    _refused_by_script(node, _venv(node, "/fsx/clusterkit/venv-test", package), "clusterkit-venv.sh", before)


@pytest.mark.parametrize("package", ACCEPTED_PACKAGES)
def test_package_of_the_index_or_https_is_installed(package: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    code, errors = _validate(tmp_path, set_field(base_data(), "clusterkit.package", package), capsys)
    assert code == 0 and errors == []
    node = make_node(tmp_path / "node")
    result = _venv(node, "/fsx/clusterkit/venv-test", package)
    assert result.returncode == 0, result.stderr
    assert ["python3", "-m", "pip", "install", "--quiet", "--no-cache-dir", "--disable-pip-version-check",
            package] in node.calls()


# --- slurm.conf values ---------------------------------------------------------------------------------------

SLURM_FIELDS = ["slurm.custom_settings", "queues[0].compute[0].slurm_settings"]


@pytest.mark.parametrize("field", SLURM_FIELDS)
@pytest.mark.parametrize(("value", "fragment"), [
    ("1 # no limit", "starts a comment"), ("x#y", "starts a comment"), ('"a # b"', "starts a comment"),
    ("a b", "space outside double quotes"), ('a"b', "space outside double quotes"),
    ('"a" b', "space outside double quotes"), ("x SlurmctldHost=evil", "hides a second"),
])
def test_slurm_values_with_a_comment_or_a_bare_space_are_refused(field: str, value: str, fragment: str,
                                                                 tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    key = "MaxJobCount" if field.startswith("slurm.") else "Features"
    line = _refused(tmp_path, set_field(base_data(), field, {key: value}), f"{field}.{key}", capsys)
    assert fragment in line


@pytest.mark.parametrize("field", SLURM_FIELDS)
@pytest.mark.parametrize("value", ["42", "a,b", '"a b"', "x=y", ""])
def test_slurm_values_of_one_word_or_quoted_pass(field: str, value: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    key = "MaxJobCount" if field.startswith("slurm.") else "Features"
    code, errors = _validate(tmp_path, set_field(base_data(), field, {key: value}), capsys)
    assert code == 0 and errors == []

"""Output files through the real CLI: never onto an input or another output, `""` refused, `-` is stdout,
and a file system that refuses the write (full, read-only) is one line naming the path, with nothing left.

Every verb that writes a file the user names is here: create-cluster --output-config and
--output-prerequisites, container dockerfile --output-file, container import --output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
G5_SPEC = REPO / "cluster-configs" / "g5.yaml"
DRY_RUN = ("create-cluster", "--name", "train", "--dry-run")


# A create that got past the checks under test must not reach a real account: fake keys, no config files.
OFFLINE_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
               "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
               "AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}


def clusterkit(*argv: str, cwd: Path, stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", *argv], cwd=cwd, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=60, env={**os.environ, **OFFLINE_AWS})


def refused(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one-line error of a refused command (no traceback), which holds each of `words`."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    error = result.stderr
    assert error.startswith("error: ") and error.count("\n") == 1 and "Traceback" not in error, error
    for word in words:
        assert word in error, (word, error)
    return error


def listing(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir()) if path.is_file()}


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    copy = tmp_path / "spec.yaml"
    shutil.copyfile(G5_SPEC, copy)
    return copy


@pytest.mark.parametrize("spelling", ["same", "dot-slash", "input-through-link", "output-is-link", "hard-link"])
def test_an_output_onto_the_spec_the_command_reads_is_refused_and_the_spec_kept(tmp_path: Path, spec: Path,
                                                                                spelling: str) -> None:
    spec_arg, output = {"same": ("spec.yaml", "spec.yaml"), "dot-slash": ("spec.yaml", "./spec.yaml"),
                        "input-through-link": ("link.yaml", "spec.yaml"), "output-is-link": ("spec.yaml", "link.yaml"),
                        "hard-link": ("spec.yaml", "hard.yaml")}[spelling]
    (tmp_path / "link.yaml").symlink_to("spec.yaml")
    os.link(spec, tmp_path / "hard.yaml")
    before = listing(tmp_path)
    for extra in ((), ("--output-prerequisites", "template.yaml")):
        result = clusterkit(*DRY_RUN, "--file", spec_arg, "--output-config", output, *extra, cwd=tmp_path)
        refused(result, f"--output-config {output!r}", "--file", "name another file for --output-config")
        assert listing(tmp_path) == before and (tmp_path / "link.yaml").is_symlink()


def test_an_output_onto_the_identity_file_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "train.pem"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    result = clusterkit(*DRY_RUN, "--preset", "g5", "--identity-file", str(key), "--output-config", "./train.pem",
                        cwd=tmp_path)
    refused(result, "--output-config './train.pem'", "--identity-file")
    assert key.read_text() == "-----BEGIN OPENSSH PRIVATE KEY-----\n"


@pytest.mark.parametrize(("config", "template"), [("out.yaml", "out.yaml"), ("out.yaml", "./out.yaml"),
                                                  ("real/out.yaml", "linked/out.yaml"), ("old.yaml", "old-link.yaml")])
def test_two_outputs_onto_one_file_are_refused_before_either_is_written(tmp_path: Path, config: str,
                                                                        template: str) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to("real")
    (tmp_path / "old.yaml").write_text("old\n")
    (tmp_path / "old-link.yaml").symlink_to("old.yaml")
    before = listing(tmp_path)
    result = clusterkit(*DRY_RUN, "--preset", "g5", "--output-config", config, "--output-prerequisites", template,
                        cwd=tmp_path)
    refused(result, f"--output-prerequisites {template!r}", "--output-config", "one would replace the other")
    assert listing(tmp_path) == before and list((tmp_path / "real").iterdir()) == []


@pytest.mark.parametrize("argv", [
    (*DRY_RUN, "--preset", "g5", "--output-config", ""),
    (*DRY_RUN, "--preset", "g5", "--output-prerequisites", ""),
    ("create-cluster", "--name", "train", "--preset", "g5", "--output-config", ""),  # a real create: refused first
    ("create-cluster", "--name", "train", "--provider", "local", "--output-config", ""),
    ("container", "dockerfile", "--accelerator", "gpu", "--output-file", ""),
], ids=["config", "prerequisites", "real-create", "local", "dockerfile"])
def test_an_empty_output_path_is_refused_naming_its_flag(tmp_path: Path, argv: tuple[str, ...]) -> None:
    flag = argv[-2]
    result = clusterkit(*argv, cwd=tmp_path)
    refused(result, flag)
    assert result.stdout == "" and list(tmp_path.iterdir()) == []


def test_container_import_refuses_an_empty_or_dash_output_naming_the_flag(tmp_path: Path) -> None:
    for output in ("", "-"):
        refused(clusterkit("container", "import", "my-train:1.0", "--output", output, cwd=tmp_path), "--output",
                ".sqsh")
    assert list(tmp_path.iterdir()) == []


def test_dash_writes_the_file_to_stdout_and_the_report_to_stderr(tmp_path: Path) -> None:
    files = clusterkit(*DRY_RUN, "--preset", "g5", "--output-config", "c.yaml", "--output-prerequisites", "p.yaml",
                       cwd=tmp_path)
    assert files.returncode == 0, files.stderr
    config, template = (tmp_path / "c.yaml").read_text(), (tmp_path / "p.yaml").read_text()
    config_out = clusterkit(*DRY_RUN, "--preset", "g5", "--output-config", "-", cwd=tmp_path)
    assert config_out.returncode == 0 and config_out.stdout == config
    assert "# what it would do:" in config_out.stderr and "wrote" not in config_out.stderr
    template_out = clusterkit(*DRY_RUN, "--preset", "g5", "--output-config", "c2.yaml", "--output-prerequisites", "-",
                              cwd=tmp_path)
    assert template_out.returncode == 0 and template_out.stdout == template
    assert "wrote c2.yaml" in template_out.stderr and (tmp_path / "c2.yaml").read_text() == config
    dockerfile = clusterkit("container", "dockerfile", "--accelerator", "gpu", cwd=tmp_path).stdout
    dash = clusterkit("container", "dockerfile", "--accelerator", "gpu", "--output-file", "-", cwd=tmp_path)
    assert dash.returncode == 0 and dash.stdout == dockerfile and "FROM" in dockerfile and dash.stderr == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "c2.yaml", "p.yaml"]  # no file named -


@pytest.mark.parametrize(("argv", "words"), [
    ((*DRY_RUN, "--preset", "g5", "--output-config", "-", "--output-prerequisites", "-"),
     ("--output-config and --output-prerequisites are each -", "only one output can go to stdout")),
    ((*DRY_RUN, "--preset", "g5", "--output-prerequisites", "-"), ("--output-prerequisites -", "dry run's config")),
    ((*DRY_RUN, "--preset", "g5", "--output", "json", "--output-config", "-"), ("--output-config -", "--output json")),
    (("create-cluster", "--name", "train", "--preset", "g5", "--output", "json", "--output-config", "-"),
     ("--output-config -", "--output json")),
    (("container", "dockerfile", "--accelerator", "gpu", "--output", "json", "--output-file", "-"),
     ("--output-file -", "--output json")),
])
def test_dash_is_refused_where_stdout_carries_something_else(tmp_path: Path, argv: tuple[str, ...],
                                                             words: tuple[str, ...]) -> None:
    result = clusterkit(*argv, cwd=tmp_path)
    refused(result, *words, "name a file for")
    assert result.stdout == "" and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [
    (*DRY_RUN, "--preset", "g5"),
    (*DRY_RUN, "--preset", "g5", "--output-config", "-"),
    ("container", "dockerfile", "--accelerator", "gpu"),
    ("container", "dockerfile", "--accelerator", "gpu", "--output-file", "-"),
    (*DRY_RUN, "--preset", "g5", "--output", "json"),
], ids=["dry-run", "dry-run-dash", "dockerfile", "dockerfile-dash", "json"])
def test_a_full_stdout_is_one_line_not_a_traceback(tmp_path: Path, argv: tuple[str, ...]) -> None:
    with open("/dev/full", "w") as full:  # every write fails with ENOSPC
        result = clusterkit(*argv, cwd=tmp_path, stdout=full.fileno())
    refused(result, "cannot write to stdout: No space left on device", "redirect stdout")
    assert "Exception ignored" not in result.stderr


def _mount(*argv: str) -> None:
    result = subprocess.run(["mount", *argv], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount here ({result.stderr.strip() or result.returncode}): needs root")


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 16 KiB tmpfs of our own, unmounted afterwards."""
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    mount_point = tmp_path / "fs"
    mount_point.mkdir()
    _mount("-t", "tmpfs", "-o", "size=16k,mode=0755", "tmpfs", str(mount_point))
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


@pytest.fixture
def full_fs(small_fs: Path) -> Path:
    """The tmpfs, with an old config in it and every data block taken."""
    (small_fs / "c.yaml").write_text("old\n")
    with open(small_fs / "filler", "wb", buffering=0) as filler:
        try:
            while filler.write(b"\0" * 4096):
                pass
        except OSError:
            pass
    return small_fs


@pytest.fixture
def read_only_fs(small_fs: Path) -> Path:
    (small_fs / "c.yaml").write_text("old\n")
    _mount("-o", "remount,ro", str(small_fs))
    return small_fs


def _writers(directory: Path) -> list[tuple[str, ...]]:
    """A command line of each verb that writes a user-named file, writing it into `directory`."""
    return [(*DRY_RUN, "--preset", "g5", "--output-config", str(directory / "c.yaml")),
            (*DRY_RUN, "--preset", "g5", "--output-config", "-", "--output-prerequisites", str(directory / "c.yaml")),
            ("container", "dockerfile", "--accelerator", "gpu", "--output-file", str(directory / "c.yaml"))]


def test_a_full_file_system_is_one_line_naming_the_path_and_leaves_the_old_file(tmp_path: Path,
                                                                                full_fs: Path) -> None:
    before = listing(full_fs)
    for argv in _writers(full_fs):
        result = clusterkit(*argv, cwd=tmp_path)
        refused(result, f"cannot write {str(full_fs / 'c.yaml')!r}: No space left on device", "file system is full")
        assert listing(full_fs) == before  # the old file whole, no temporary left
    # Two outputs are written all or none: the config beside this test is not written when the template fails.
    result = clusterkit(*DRY_RUN, "--preset", "g5", "--output-config", "here.yaml",
                        "--output-prerequisites", str(full_fs / "p.yaml"), cwd=tmp_path)
    refused(result, str(full_fs / "p.yaml"), "No space left on device")
    assert not (tmp_path / "here.yaml").exists() and listing(full_fs) == before


def test_a_read_only_file_system_is_one_line_naming_the_path(tmp_path: Path, read_only_fs: Path) -> None:
    for argv in _writers(read_only_fs):
        result = clusterkit(*argv, cwd=tmp_path)
        refused(result, f"cannot write {str(read_only_fs / 'c.yaml')!r}: Read-only file system", "writable one")
    assert listing(read_only_fs) == {"c.yaml": b"old\n"}
    # container import: enroot writes the file, so the path is tried before enroot pulls and converts anything.
    result = clusterkit("container", "import", "my-train:1.0", "--output", str(read_only_fs / "train.sqsh"),
                        cwd=tmp_path)
    refused(result, f"cannot write {str(read_only_fs / 'train.sqsh')!r}: Read-only file system")


def test_a_directory_the_user_may_not_write_is_one_line_naming_the_path() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("running the CLI as another user needs root and setpriv(1)")
    scratch = Path(tempfile.mkdtemp(prefix="ck-eacces-"))  # not under pytest's private tmp: nobody must enter it
    try:
        scratch.chmod(0o755)
        (scratch / "root-only").mkdir()
        as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-m",
                     "clusterkit"]
        if subprocess.run([*as_nobody, "--version"], cwd=scratch, capture_output=True).returncode != 0:
            pytest.skip("another user cannot run this checkout's clusterkit (a private directory above it)")
        for argv in [*_writers(scratch / "root-only"),
                     ("container", "import", "my-train:1.0", "--output", str(scratch / "root-only" / "c.sqsh"))]:
            result = subprocess.run([*as_nobody, *argv], cwd=scratch, capture_output=True, text=True, timeout=60,
                                    env={**os.environ, **OFFLINE_AWS})
            refused(result, f"cannot write '{scratch / 'root-only'}/c.", "Permission denied",
                    "choose a directory you can write")
        assert list((scratch / "root-only").iterdir()) == []
    finally:
        shutil.rmtree(scratch)


def test_the_template_a_spec_needs_none_of_is_refused_before_the_config_is_written(tmp_path: Path) -> None:
    spec_text = G5_SPEC.read_text()
    assert "  accounting: create" in spec_text and "\nsubnet_id:" not in spec_text
    (tmp_path / "spec.yaml").write_text(spec_text.replace("accounting: create", "accounting: none")
                                        + "subnet_id: subnet-0123456789abcdef0\n")
    result = clusterkit(*DRY_RUN, "--file", "spec.yaml", "--output-config", "c.yaml", "--output-prerequisites",
                        "p.yaml", cwd=tmp_path)
    refused(result, "needs no prerequisites stack", "drop --output-prerequisites")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


@pytest.fixture
def fake_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """moto for AWS and the fake in place of ParallelCluster, as tests/aws/test_cli_aws.py sets them up."""
    pytest.importorskip("moto")
    import boto3
    from moto import mock_aws

    from tests.aws.conftest import REGION, private_subnets, use_fake_parallelcluster
    from tests.aws.fake_backend import FakeParallelCluster

    for variable, value in {**OFFLINE_AWS, "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(variable, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # moto answers in this process
    with mock_aws():
        private_subnets(boto3.client("ec2", region_name=REGION), "us-east-1b", "us-east-1c")
        use_fake_parallelcluster(FakeParallelCluster(), monkeypatch, tmp_path / "home")
        yield


def test_a_create_writes_the_config_for_dash_to_stdout_and_its_summary_to_stderr(
        fake_aws: None, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    from clusterkit.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["create-cluster", "--preset", "p4de", "--name", "train", "--output-config", "-"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith("# AWS ParallelCluster 3.16 configuration for cluster 'train'")
    config = yaml.safe_load(out)
    assert config["Region"] == "us-east-1" and config["HeadNode"]["InstanceType"] == "c5.9xlarge"
    assert "cluster 'train' is running" in err and not (tmp_path / "-").exists()

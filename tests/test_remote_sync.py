"""What a submission from a laptop copies to the cluster: exactly the job's own files. Hostile trees (a link
to a secret elsewhere, a link to /etc, a link loop, a 512 MiB untracked file) through the real CLI, the
shared local cluster's real sshd, and the run directories it leaves on the cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_remote import REMOTE, clusterkit, laptop  # noqa: F401 - laptop is a fixture

pytestmark = pytest.mark.slurm
SECRET = b"the-secret-bytes-5f2c9e"
SPEC = "name: synced\nlauncher: srun\ncommand: [cat, code/main.py]\nlogs: {output: synced_%j.out}\n"


@pytest.fixture
def runs(laptop) -> Path:  # noqa: F811 - the fixture imported above
    """The cluster's runs directory (this machine's, as the cluster is local): where each submission's copy lands."""
    described = clusterkit(laptop, "describe-cluster", REMOTE, "-o", "json")
    return Path(json.loads(described.stdout)["runs_dir"])


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A git repository whose tracked links leave it or loop, with a large untracked file beside its code."""
    secret = tmp_path / "elsewhere" / "secret.txt"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    work = tmp_path / "project"
    (work / "code").mkdir(parents=True)
    (work / "job.yaml").write_text(SPEC)
    (work / "code" / "train.py").write_text("print('training')\n")
    (work / "code" / "main.py").symlink_to("train.py")  # inside: stays a link
    (work / "code" / "creds.txt").symlink_to(secret)
    (work / "etc").symlink_to("/etc")
    (work / "loop").symlink_to("loop")
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run(["git", "-C", str(work), "add", "."], check=True)
    with open(work / "big.bin", "wb") as big:  # untracked; sparse, so the test costs no disk
        big.truncate(512 << 20)
    return work


def every_file_under(directory: Path) -> list[Path]:
    return [Path(root) / name for root, dirs, names in os.walk(directory) for name in dirs + names]


def assert_nothing_outside_came(workdir: Path) -> None:
    for path in every_file_under(workdir):
        if path.is_file() and not path.is_symlink():
            assert SECRET not in path.read_bytes(), path
        if path.is_symlink():
            assert (path.parent / os.readlink(path)).resolve().is_relative_to(workdir), path


def test_a_hostile_repository_sends_only_its_own_files_and_says_what_it_left(laptop, repository):  # noqa: F811
    started = time.monotonic()
    submitted = clusterkit(laptop, "submit", "job.yaml", "--cluster", REMOTE, "-o", "json", cwd=repository)
    elapsed = time.monotonic() - started
    assert submitted.returncode == 0 and "Traceback" not in submitted.stderr, submitted.stderr
    result = json.loads(submitted.stdout)
    assert elapsed < 20, elapsed  # the 512 MiB file is not read; no link is followed
    assert result["copied"] == ["code/main.py", "code/train.py", "job.yaml"]
    assert result["copied_bytes"] == len(SPEC) + len("print('training')\n")
    assert {r["path"]: r["why"] for r in result["refused"]} == {
        "code/creds.txt": "a link that leaves the directory", "etc": "a link that leaves the directory",
        "loop": "a link loop"}
    assert result["skipped"] == [{"path": "big.bin", "why": "untracked"}]
    assert {w["rule"] for w in result["warnings"]} >= {"job.sync-refused", "job.sync-untracked"}
    workdir = Path(result["workdir"])
    arrived = sorted(str(p.relative_to(workdir)) for p in every_file_under(workdir))
    assert [name for name in arrived if not name.startswith("synced_")] == [  # the job's log may be there already
        "code", "code/main.py", "code/train.py", "job.yaml"]
    assert os.readlink(workdir / "code" / "main.py") == "train.py"
    assert_nothing_outside_came(workdir)


def test_sync_paths_never_follow_links_and_a_refused_one_leaves_nothing(laptop, repository, runs):  # noqa: F811
    (repository / "self").symlink_to(".")  # followed, a walk of `.` would never end
    before = set(runs.iterdir()) if runs.exists() else set()
    refused = {
        "": "an empty path names nothing to copy",
        "/etc": "'/etc' is outside",
        "../elsewhere/secret.txt": "is outside",
        "etc": "'etc' is not copied to the cluster: a link that leaves the directory",
        ".": "come to more than 256.0 MiB",  # big.bin, untracked, named with the rest
    }
    for path, expected in refused.items():
        result = clusterkit(laptop, "submit", "job.yaml", "--cluster", REMOTE, "--sync", path, cwd=repository)
        *warnings, error = result.stderr.strip().splitlines()
        assert result.returncode == 1 and "Traceback" not in result.stderr, (path, result.stderr)
        assert error.startswith("error: ") and expected in error and "fix:" in error and "sync" in error, (path, error)
        assert all(line.startswith("warning: ") for line in warnings), (path, warnings)
    assert (set(runs.iterdir()) if runs.exists() else set()) == before  # no run directory was made
    (repository / "big.bin").unlink()

    started = time.monotonic()
    whole = clusterkit(laptop, "submit", "job.yaml", "--cluster", REMOTE, "--sync", ".", cwd=repository)
    assert whole.returncode == 0 and "Traceback" not in whole.stderr, whole.stderr
    assert time.monotonic() - started < 20
    summary = next(line for line in whole.stderr.splitlines() if line.startswith("copied "))
    assert "copied 2 files and 2 links, " in summary and "refused 3: code/creds.txt, etc, loop" in summary, summary
    (workdir,) = set(runs.iterdir()) - before
    assert os.readlink(workdir / "self") == "." and not (workdir / "etc").exists()
    assert_nothing_outside_came(workdir)


def test_a_copy_that_fails_there_leaves_no_run_directory(laptop, tmp_path, runs):  # noqa: F811
    (tmp_path / "job.yaml").write_text("name: nowhere\nlauncher: srun\ncommand: [true]\n"
                                       "logs: {output: /proc/clusterkit-none/x_%j.out}\n")
    before = set(runs.iterdir()) if runs.exists() else set()
    result = clusterkit(laptop, "submit", "job.yaml", "--cluster", REMOTE, "--sync", "job.yaml", "--no-preflight",
                        cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1 and "cannot unpack the job's files" in lines[0], lines
    assert (set(runs.iterdir()) if runs.exists() else set()) == before


PEAK_RSS = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10, file=sys.stderr); "
            "sys.exit(done.returncode)")


def test_a_large_copy_goes_in_pieces_never_whole_in_memory(laptop, tmp_path):  # noqa: F811
    (tmp_path / "job.yaml").write_text(SPEC.replace("code/main.py", "weights.bin"))
    with open(tmp_path / "weights.bin", "wb") as weights:  # incompressible: the archive is as large
        for _ in range(96):
            weights.write(os.urandom(1 << 20))
    submitted = subprocess.run([sys.executable, "-c", PEAK_RSS, sys.executable, "-m", "clusterkit", "submit",
                                "job.yaml", "--cluster", REMOTE, "--sync", "job.yaml", "--sync", "weights.bin",
                                "-o", "json"], capture_output=True, text=True, env=laptop, cwd=tmp_path, timeout=300)
    assert submitted.returncode == 0 and "Traceback" not in submitted.stderr, submitted.stderr
    peak_mib = int(submitted.stderr.strip().splitlines()[-1])
    assert peak_mib < 64, peak_mib  # the whole archive in memory would be 96 MiB, and the process's own 30 besides
    workdir = Path(json.loads(submitted.stdout)["workdir"])
    assert (workdir / "weights.bin").read_bytes() == (tmp_path / "weights.bin").read_bytes()
    assert not (workdir / ".clusterkit-upload.tar.gz").exists()  # the spool there is gone too

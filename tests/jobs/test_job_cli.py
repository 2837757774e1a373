"""`clusterkit validate` on job specs, and job-spec findings on a dry run (the submission's own are
in test_submit_local.py): printed for people, carried by --output json, errors before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.jobs.helpers import REPO_ROOT

EXAMPLES = sorted((REPO_ROOT / "examples" / "jobs").glob("*.yaml"))


def clusterkit(*args: str, cwd: Path | None = None, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = None
    if home is not None:
        import os

        env = dict(os.environ, CLUSTERKIT_HOME=str(home))
        env.pop("CLUSTERKIT_CLUSTER", None)
    return subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=60)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.stem)
def test_validate_accepts_every_example_job_spec(path: Path) -> None:
    result = clusterkit("validate", str(path), "-o", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["kind"] == "job" and report["valid"] is True


def test_validate_names_every_problem_of_a_job_spec(tmp_path: Path) -> None:
    spec = write(tmp_path, 'name: "../../x"\ncommand: [train.py]\nnodes: 0\nenv: {PATH: ""}\n'
                           'stack: {nccl: "2.19\\ntouch pwned"}\n')
    result = clusterkit("validate", str(spec))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    for field in ("name", "nodes", "env.PATH", "stack.nccl"):
        assert any(line.startswith(f"error: {field}: ") for line in lines), (field, lines)
    assert all("\n" not in line for line in lines)
    loading = write(tmp_path, "name: j\ncommand: [train.py]\nnodse: 2\n")
    report = json.loads(clusterkit("validate", str(loading), "-o", "json").stdout)
    assert report["valid"] is False and report["findings"][0]["path"] == "nodse"


def test_validate_tells_a_job_spec_from_a_cluster_spec(tmp_path: Path) -> None:
    cluster = REPO_ROOT / "cluster-configs" / "p5.yaml"
    assert json.loads(clusterkit("validate", str(cluster), "-o", "json").stdout)["kind"] == "cluster"
    job = write(tmp_path, "name: j\ncommand: [train.py]\n")
    assert clusterkit("validate", str(job)).stdout.strip().endswith("valid job spec")
    forced = clusterkit("validate", str(job), "--kind", "cluster", "-o", "json")
    assert forced.returncode == 1 and json.loads(forced.stdout)["kind"] == "cluster"


def test_a_dry_run_prints_warnings_and_json_carries_them(tmp_path: Path) -> None:
    spec = write(tmp_path, "name: j\ncommand: [train.py]\ncheckpoint_dir: ckpt\nsignal: USR1@60\nrequeue: false\n")
    table = clusterkit("submit", str(spec), "--dry-run", home=tmp_path / "home")
    assert table.returncode == 0, table.stderr
    assert "warning: checkpoint_dir: is relative" in table.stderr and "warning: signal: requeue is off" in table.stderr
    assert table.stdout.startswith("#!/bin/bash\n")
    as_json = json.loads(clusterkit("submit", str(spec), "--dry-run", "-o", "json", home=tmp_path / "home").stdout)
    warnings = {f["path"] for f in as_json["findings"] if f["level"] == "warning"}
    assert {"checkpoint_dir", "signal"} <= warnings


def test_a_name_that_would_move_the_log_is_refused_before_anything_runs(tmp_path: Path) -> None:
    spec = write(tmp_path, 'name: "../../x"\ncommand: [train.py]\nlogs: {output: "logs/%x_%j.out"}\n')
    result = clusterkit("submit", str(spec), "--dry-run", home=tmp_path / "home")
    assert result.returncode == 1 and result.stdout == ""
    assert "error: name: the log path uses the job name (%x)" in result.stderr


@pytest.mark.parametrize(("runtime", "image"), [("docker", "--privileged"), ("apptainer", "--fakeroot"),
                                                ("docker", "Team/Train")])
def test_an_image_the_runtime_would_misread_is_refused_in_one_line(tmp_path: Path, runtime: str,
                                                                    image: str) -> None:
    spec = write(tmp_path, f"name: j\ncommand: [train.py]\ncontainer: {{runtime: {runtime}, image: '{image}'}}\n")
    result = clusterkit("submit", str(spec), "--dry-run", home=tmp_path / "home")
    assert result.returncode == 1 and result.stdout == ""
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith("error: container.image: ") and image in line and "write " in line
    assert "Traceback" not in result.stderr

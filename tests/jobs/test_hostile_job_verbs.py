"""The job verbs given ids that name no job, through the real CLI: an empty or garbage id is refused in
one line before anything asks Slurm (`scontrol show job ''` lists every job, so `logs ''` printed
another job's log); an id Slurm does not know is said to be unknown, with a non-zero exit (scancel 22.05
exits 0 and prints nothing for it). And a supervised job whose supervisor's interpreter cannot run is
refused by the preflight, here and from afar, instead of failing on the node with 127."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.providers.local import processes

from tests.test_remote import REMOTE
from tests.test_remote import clusterkit as clusterkit_from
from tests.test_remote import laptop  # noqa: F401 - the fixture: a cluster reached over SSH

UNKNOWN_JOB = "99999"


def clusterkit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == "" and "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    return line


@pytest.mark.parametrize("verb", ["status", "logs", "cancel", "watch"])
@pytest.mark.parametrize("job_id", ["", "12x", "../../etc/passwd", "--me", "1;id", "x" * 500])
def test_a_garbage_job_id_is_refused_in_one_line(verb: str, job_id: str, tmp_path: Path) -> None:
    # No cluster is needed to tell: the id is refused before any is looked up.
    result = clusterkit(verb, "--cluster", "none-such", "--", job_id, cwd=tmp_path)
    line = one_error_line(result)
    assert line.startswith("error: '") and "is not a Slurm job id" in line and "e.g. 1234" in line
    assert len(line) < 300


@pytest.mark.slurm
def test_logs_of_an_empty_id_never_prints_another_jobs_log(local_cluster, tmp_path):
    spec = tmp_path / "other.yaml"
    spec.write_text("name: other\nlauncher: srun\ncommand: [bash, -c, 'echo secret of another job; sleep 30']\n"
                    "logs: {output: other_%j.out}\n")
    submitted = clusterkit("submit", str(spec), "--cluster", local_cluster.name, "-o", "json", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["job_id"]
    try:
        log = tmp_path / f"other_{job_id}.out"
        processes.wait_until(lambda: "secret" in (log.read_text() if log.exists() else ""), 30, "the other job's log")
        for verb in ("logs", "status"):
            result = clusterkit(verb, "", "--cluster", local_cluster.name)
            assert "secret" not in result.stdout + result.stderr
            assert one_error_line(result).startswith("error: '' is not a Slurm job id")
    finally:
        local_cluster.slurm().cancel(job_id)


@pytest.mark.slurm
@pytest.mark.parametrize("verb", ["cancel", "status"])
def test_a_job_slurm_does_not_know_is_said_to_be_unknown(local_cluster, verb):
    line = one_error_line(clusterkit(verb, UNKNOWN_JOB, "--cluster", local_cluster.name))
    assert line == (f"error: Slurm knows no job {UNKNOWN_JOB} on cluster {local_cluster.name!r} "
                    "(check the id with `clusterkit jobs` or squeue)")
    as_json = clusterkit(verb, UNKNOWN_JOB, "--cluster", local_cluster.name, "-o", "json")
    assert as_json.returncode == 1 and as_json.stdout == ""


@pytest.mark.slurm
def test_cancel_of_a_job_that_already_ended_says_so(local_cluster, tmp_path):
    slurm = local_cluster.slurm()
    job_id = slurm.sbatch("#!/bin/bash\ntrue\n", f"--output={tmp_path}/done_%j.out")
    processes.wait_until(lambda: [a.state for a in slurm.accounting([job_id])] == ["COMPLETED"], 30,
                         "accounting to show the job completed", interval=0.3)
    result = clusterkit("cancel", job_id, "--cluster", local_cluster.name)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"job {job_id} had already ended (COMPLETED): nothing to cancel\n"
    as_json = json.loads(clusterkit("cancel", job_id, "--cluster", local_cluster.name, "-o", "json").stdout)
    assert as_json == {"job_id": job_id, "cancelled": False, "state": "COMPLETED"}


def supervised_spec(tmp_path: Path, python: str) -> Path:
    spec = tmp_path / "supervised.yaml"
    spec.write_text(f"name: supervised\nlauncher: srun\ncommand: [true]\ncheckpoint_dir: {tmp_path}/ckpt\n"
                    f"supervise: {{python: '{python}'}}\nlogs: {{output: sup_%j.out}}\n")
    return spec


@pytest.mark.slurm
def test_a_supervisor_python_that_cannot_run_is_refused_before_submission(local_cluster, tmp_path):
    before = clusterkit("jobs", "--cluster", local_cluster.name, "-o", "json").stdout
    missing = str(tmp_path / "venv" / "bin" / "python")
    result = clusterkit("submit", str(supervised_spec(tmp_path, missing)), "--cluster", local_cluster.name,
                        cwd=tmp_path)
    line = one_error_line(result)
    assert f"error: supervise.python: the supervisor's interpreter {missing!r} is no program on this machine" in line
    assert "set supervise.python to a Python with clusterkit installed" in line
    assert clusterkit("jobs", "--cluster", local_cluster.name, "-o", "json").stdout == before
    # The cluster's own Python (the default) passes: a dry run against the cluster runs the same preflight.
    fine = clusterkit("submit", str(supervised_spec(tmp_path, sys.executable)), "--cluster", local_cluster.name,
                      "--dry-run", cwd=tmp_path)
    assert fine.returncode == 0 and fine.stderr == "", fine.stderr


@pytest.mark.slurm
def test_a_supervisor_python_is_checked_on_a_cluster_reached_over_ssh(laptop, tmp_path):  # noqa: F811
    result = clusterkit_from(laptop, "submit", str(supervised_spec(tmp_path, "/opt/none/python3")), "--cluster",
                             REMOTE, "--sync", "supervised.yaml", cwd=tmp_path)
    line = one_error_line(result)
    assert "supervise.python: the supervisor's interpreter '/opt/none/python3' is no program on root@" in line

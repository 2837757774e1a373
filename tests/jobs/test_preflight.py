"""Preflight rules that read srun's help: pyxis must be loaded, and know --container-env (without it
the image's environment beats the job's); the supervisor's interpreter must run there and have clusterkit."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.findings import Finding, shorten
from clusterkit.jobs import preflight
from clusterkit.jobs.spec import JobSpec
from clusterkit.slurm import Slurm

from tests.jobs.helpers import make_spec


class SrunHelp:
    def __init__(self, text: str) -> None:
        self.text = text

    def run(self, command: str, *args: str, **_: object) -> subprocess.CompletedProcess[str]:
        assert (command, args) == ("srun", ("--help",))
        return subprocess.CompletedProcess([command, *args], 0, self.text, "")


PYXIS_SPEC = make_spec(container={"runtime": "pyxis", "image": "/fsx/i.sqsh", "mounts": ["/fsx"]})


@pytest.mark.parametrize(("help_text", "problem"), [
    ("  --container-image=IMAGE\n  --container-env=NAME[,NAME...]\n", None),
    ("  --container-image=IMAGE\n", "no --container-env"),
    ("  --mpi=TYPE\n", "not loaded"),
])
def test_pyxis_must_be_loaded_and_know_container_env(help_text: str, problem: str | None) -> None:
    findings = preflight.pyxis(PYXIS_SPEC, SrunHelp(help_text), {}, Path("."))
    if problem is None:
        assert findings == []
    else:
        (finding,) = findings
        assert finding.path == "container.runtime" and problem in finding.message and finding.fix


def test_other_runtimes_do_not_ask_srun() -> None:
    assert preflight.pyxis(make_spec(), SrunHelp(""), {}, Path(".")) == []


def supervised(python: str | None) -> JobSpec:
    return make_spec(checkpoint_dir="/fsx/ckpt", supervise={"python": python} if python else True)


def supervisor_findings(python: str | None, workdir: Path, path: str | None = None) -> list[Finding]:
    # The real transport of this machine, as a local cluster's preflight uses; `path`: the PATH jobs get.
    slurm = Slurm(extra_env={"PATH": path} if path else None)
    return preflight.supervisor_python(supervised(python), slurm, {}, workdir)


def test_a_supervisor_python_that_is_no_program_is_named(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    for python in (str(tmp_path / "missing" / "python"), "-c", f"$(touch {canary})", "no-such-python3"):
        (finding,) = supervisor_findings(python, tmp_path)
        assert finding.path == "supervise.python" and finding.value == shorten(python)  # as every finding shows it
        assert "is no program on this machine" in finding.message and "exit 127" in finding.message
        assert "supervise.python" in finding.fix
    assert not canary.exists()


def test_a_supervisor_python_that_does_not_run_is_named(tmp_path: Path) -> None:
    not_executable = tmp_path / "python"
    not_executable.write_text("#!/bin/sh\n")
    (finding,) = supervisor_findings(str(not_executable), tmp_path)
    assert "does not run on this machine" in finding.message and "Permission denied" in finding.message


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="no system Python")
def test_a_supervisor_python_without_clusterkit_is_named(tmp_path: Path) -> None:
    finds = subprocess.run(["/usr/bin/python3", "-c", "import clusterkit"], cwd=tmp_path, capture_output=True)
    if finds.returncode == 0:
        pytest.skip("this system's Python finds clusterkit (installed, or on PYTHONPATH)")
    (finding,) = supervisor_findings("/usr/bin/python3", tmp_path)
    assert "cannot import clusterkit" in finding.message and "'/usr/bin/python3'" in finding.fix


def this_python(path: Path) -> None:
    """A program at `path` that runs this (virtualenv's) Python, which has clusterkit."""
    path.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    path.chmod(0o755)


def test_a_supervisor_python_that_has_clusterkit_passes(tmp_path: Path) -> None:
    assert supervisor_findings(sys.executable, tmp_path) == []
    # Relative: from the job's working directory, as the batch script runs it.
    this_python(tmp_path / "py")
    assert supervisor_findings("./py", tmp_path) == []
    assert supervisor_findings("./py", tmp_path / "elsewhere") != []
    # Without one: python3 on the PATH the jobs get.
    (tmp_path / "bin").mkdir()
    this_python(tmp_path / "bin" / "python3")
    assert supervisor_findings(None, tmp_path, path=f"{tmp_path / 'bin'}:{os.defpath}") == []
    assert supervisor_findings(None, tmp_path, path=str(tmp_path / "empty")) != []


def test_an_unsupervised_job_runs_no_supervisor_check(tmp_path: Path) -> None:
    assert preflight.supervisor_python(make_spec(), None, {}, tmp_path) == []
    assert "preflight.supervisor-python" in preflight.PREFLIGHT_RULES.ids

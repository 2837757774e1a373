"""`supervise.spares` through the real CLI: refused when out of range, rendered as an allocation of nodes + spares
that outlives a node's loss, with the step's srun on the nodes the supervisor names and torchrun's rendezvous
on the first of them."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit import runtime

SPEC = ("name: t\ninstance: local\nnodes: 2\nlauncher: {launcher}\ncommand: [train.py]\ncheckpoint_dir: /fsx/run\n"
        "supervise: {{spares: {value}}}\n")


def clusterkit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60)


@pytest.mark.parametrize(("value", "says"), [("3", "is 3: must be 0 to nodes (2) spare nodes"),
                                             ("-1", "is -1: must be 0 to nodes (2) spare nodes"),
                                             ("'one'", "expected a whole number, got text 'one'")])
def test_spares_out_of_range_are_one_line_naming_the_field(tmp_path: Path, value: str, says: str) -> None:
    (tmp_path / "job.yaml").write_text(SPEC.format(launcher="torchrun", value=value))
    result = clusterkit("submit", "job.yaml", "--dry-run", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr + result.stdout
    errors = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "supervise.spares: " in errors[0] and says in errors[0], errors
    assert ("fix: " in errors[0] or "(write " in errors[0]) and sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


@pytest.mark.parametrize("launcher", ["torchrun", "srun", "mpi"])
def test_spares_hold_more_nodes_and_the_step_runs_on_the_supervisors_list(tmp_path: Path, launcher: str) -> None:
    (tmp_path / "job.yaml").write_text(SPEC.format(launcher=launcher, value="1"))
    result = clusterkit("submit", "job.yaml", "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    script = result.stdout
    assert "#SBATCH --nodes=3\n" in script and "#SBATCH --no-kill\n" in script
    (launch,) = [line for line in script.splitlines() if line.startswith("  clusterkit_run_step clusterkit_srun")]
    assert (f'--nodes="${runtime.STEP_NUM_NODES_ENV}" --nodelist="${runtime.STEP_NODES_ENV}"') in launch
    (line,) = [line for line in script.splitlines() if f"-m {runtime.SUPERVISOR_MODULE} " in line]
    words = shlex.split(line.removeprefix("exec ").rstrip("\\ "))
    assert runtime.supervisor_parser().parse_args(words[words.index(runtime.SUPERVISOR_MODULE) + 1:]).spares == 1
    if launcher == "torchrun":
        assert '--nnodes="${SLURM_STEP_NUM_NODES:-$SLURM_JOB_NUM_NODES}"' in script
        assert 'local nodes=${SLURM_STEP_NODELIST:-$SLURM_JOB_NODELIST}' in script


def test_without_spares_the_step_runs_on_the_whole_allocation(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(SPEC.format(launcher="torchrun", value="0"))
    result = clusterkit("submit", "job.yaml", "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --nodes=2\n" in result.stdout and "no-kill" not in result.stdout
    assert runtime.STEP_NODES_ENV not in result.stdout and "--spares" not in result.stdout

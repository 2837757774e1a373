"""Helpers for the job tests: spec builders and a fake Slurm (srun, scontrol) to run rendered scripts."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


from clusterkit.jobs.spec import JobSpec, job_from_dict

REPO_ROOT = Path(__file__).resolve().parents[2]

# A fake srun: records its argv, drops its own options, then runs the step once per "node"
# (CK_SRUN_COPIES), with the node list the step would see (CK_STEP_NODELIST, e.g. after a retry).
SRUN = r"""#!/bin/bash
printf '%s\0' "$@" > "$CK_SHIM_LOG/srun.$$.argv"
while [[ $# -gt 0 && $1 == -* ]]; do shift; done
export SLURM_JOB_NODELIST=${CK_STEP_NODELIST:-$SLURM_JOB_NODELIST}
pids=()
for ((node = 0; node < ${CK_SRUN_COPIES:-1}; node++)); do
  SLURM_NODEID=$node "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit "$status"
"""

# A fake scontrol that expands the node lists the tests use.
SCONTROL = r"""#!/bin/bash
printf '%s\0' "$@" > "$CK_SHIM_LOG/scontrol.$$.argv"
[[ $1 == show && $2 == hostnames ]] || exit 2
case $3 in
  "node-[3-4]") printf 'node-3\nnode-4\n' ;;
  "node-[7-8]") printf 'node-7\nnode-8\n' ;;
  "localhost") printf 'localhost\n' ;;
  *) exit 1 ;;
esac
"""

# Stands in for torchrun, docker, python ...: records argv and the CK_NASTY variable it was given.
RECORDER = r"""#!/bin/bash
log="$CK_SHIM_LOG/${0##*/}.$$"
printf '%s\0' "$@" > "$log.argv"
printf '%s' "${CK_NASTY-unset}" > "$log.env"
"""

RECORDED_PROGRAMS = ("torchrun", "neuron_parallel_compile", "docker", "apptainer", "python", "prog")
HOST_TOOLS = ("bash", "date", "head")


@dataclass
class Call:
    program: str
    argv: list[str]
    env: str | None


@dataclass
class FakeSlurm:
    """Runs a rendered script with only the fakes and a few host tools on PATH."""

    root: Path
    bin: Path
    log: Path

    def run(self, script: str, *, nodelist: str = "node-[3-4]", step_nodelist: str | None = None,
            copies: int = 1, extra_env: dict[str, str] | None = None,
            timeout: float = 30) -> subprocess.CompletedProcess[str]:
        path = self.root / "job.sbatch"
        path.write_text(script)
        env = {
            "PATH": str(self.bin), "HOME": str(self.root), "CK_SHIM_LOG": str(self.log),
            "CK_SRUN_COPIES": str(copies), "SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "2",
            "SLURM_JOB_NODELIST": nodelist, "SLURM_RESTART_COUNT": "1",
        }
        if step_nodelist:
            env["CK_STEP_NODELIST"] = step_nodelist
        env.update(extra_env or {})
        return subprocess.run(["/bin/bash", str(path)], cwd=self.root, env=env, capture_output=True,
                              text=True, timeout=timeout)

    def calls(self, program: str) -> list[Call]:
        calls = []
        for argv_file in sorted(self.log.glob(f"{program}.*.argv")):
            words = argv_file.read_bytes().decode().split("\0")[:-1]
            env_file = argv_file.with_suffix(".env")
            calls.append(Call(program, words, env_file.read_text() if env_file.exists() else None))
        return calls

    def remove(self, program: str) -> None:
        (self.bin / program).unlink()

    def link(self, program: str, target: str) -> None:
        (self.bin / program).symlink_to(target)


def _write_executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def make_spec(**fields: object) -> JobSpec:
    """A valid spec from a few fields, through the loader (as a user's YAML would go)."""
    data: dict[str, object] = {"name": "test-job", "command": ["train.py"]}
    data.update(fields)
    return job_from_dict(data)


def make_fake_slurm(tmp_path: Path) -> FakeSlurm:
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir()
    log.mkdir()
    _write_executable(bin_dir / "srun", SRUN)
    _write_executable(bin_dir / "scontrol", SCONTROL)
    for program in RECORDED_PROGRAMS:
        _write_executable(bin_dir / program, RECORDER)
    for tool in HOST_TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run rendered scripts"
        (bin_dir / tool).symlink_to(found)
    return FakeSlurm(tmp_path, bin_dir, log)

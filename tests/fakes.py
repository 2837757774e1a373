"""The test suite's stand-ins for Slurm, where the real local cluster (`local_cluster`) is not needed.

- `ScriptedSlurm`: a Python stand-in for `clusterkit.slurm.Slurm` (no daemons) that answers from the
  test's picture of the cluster and records what was asked of it.
- `FakeSlurm`: fake binaries on a PATH of their own: `srun`/`scontrol` that run a rendered script's
  steps, recorders of the programs steps start, and `record()` for a command that prints a recorded
  output (for parsing tests).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from clusterkit.slurm import AccountingRecord, NodeInfo, Poll, SlurmCommandError


class ScriptedSlurm:
    """`queued`: job id -> state in the controller's queue; `attempts`: job id -> states in accounting;
    `sick`: node -> the evidence its health check reports. Calls and changes are counted and recorded."""

    def __init__(self, nodes: tuple[str, ...] = ("n1", "n2"), sick: dict[str, str] | None = None,
                 queued: dict[str, str] | None = None) -> None:
        self.node_names = nodes
        self.sick = dict(sick or {})
        self.queued: dict[str, str] = dict(queued or {})
        self.attempts: dict[str, list[str]] = {}
        self.calls = 0  # squeue and sacct invocations
        self.fail_next = 0  # the next squeue calls that fail as an overloaded controller's would
        self.drained: list[tuple[str, str]] = []
        self.marks: list[tuple[str, str, str]] = []  # (node, state, reason) of each update, in order
        self.requeued: list[str] = []
        self.seconds_left: float | None = None  # before the job's time limit; None: no limit
        self.node_states: dict[str, tuple[str, str]] = {}  # node -> (sinfo's state, reason); else allocated
        self.details: dict[str, str] = {}  # `scontrol show job`'s fields for every job; empty: none given

    # ----- jobs -----
    def queue(self) -> dict[str, str]:
        self.calls += 1
        if self.fail_next:
            self.fail_next -= 1
            raise SlurmCommandError("`squeue` did not answer within 30 s")
        return dict(self.queued)

    def accounting(self, job_ids: list[str]) -> list[AccountingRecord]:
        self.calls += 1 if job_ids else 0
        return [AccountingRecord(job_id, "j", state, "0:0", "n1", "", "")
                for job_id in job_ids for state in self.attempts.get(job_id, [])]

    def poll(self, job_ids: list[str], details_of: str | None = None) -> Poll:
        queue = self.queue()
        accounting = self.accounting(job_ids) if job_ids else []
        return Poll(queue, accounting, {}, 2 if job_ids else 1)

    def requeue(self, job_id: str) -> None:
        self.requeued.append(job_id)

    def job_details(self, job_id: str) -> dict[str, str]:
        if not self.details:
            raise SlurmCommandError("`scontrol show job` is not scripted here")
        return dict(self.details)

    def time_left(self, job_id: str) -> float | None:
        return self.seconds_left

    def steps(self, job_id: str, but: str = "") -> list[str]:
        return []

    # ----- nodes -----
    def hostnames(self, node_list: str) -> list[str]:
        return list(self.node_names)

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(name, state, 2, "", reason, "2027-01-15T08:00:07" if reason else "")
                for name in self.node_names for state, reason in [self.node_states.get(name, ("alloc", ""))]]

    def update_node(self, node: str, state: str, reason: str = "") -> None:
        self.drained.append((node, reason))
        self.marks.append((node, state, reason))

    def run(self, command: str, *args: str, **_: object) -> subprocess.CompletedProcess[str]:
        """`srun ... -w NODE python -m clusterkit.stack.health`: the node's health report."""
        node = args[args.index("-w") + 1]
        results = [{"check": "injected-fault", "ok": node not in self.sick, "evidence": self.sick.get(node, "none")}]
        report = {"node": node, "healthy": node not in self.sick, "results": results}
        return subprocess.CompletedProcess([command, *args], 0, json.dumps(report) + "\n", "")


# A fake srun: records its argv, drops its own options, then runs the step once per "node"
# (CK_SRUN_COPIES), with the node list the step would see (CK_STEP_NODELIST, e.g. after a retry).
SRUN = r"""#!/bin/bash
printf '%s\0' "$@" > "$CK_SHIM_LOG/srun.$$.argv"
while [[ $# -gt 0 && $1 == -* ]]; do shift; done
export SLURM_JOB_NODELIST=${CK_STEP_NODELIST:-$SLURM_JOB_NODELIST}
pids=()
for ((node = 0; node < ${CK_SRUN_COPIES:-1}; node++)); do
  SLURM_NODEID=$node SLURM_PROCID=$node "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit "$status"
"""

# A fake scontrol that expands the node lists the tests use, and takes (records) any update.
SCONTROL = r"""#!/bin/bash
printf '%s\0' "$@" > "$CK_SHIM_LOG/scontrol.$$.argv"
[[ $1 == update ]] && exit 0
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

RECORDED_PROGRAMS = ("torchrun", "neuron_parallel_compile", "docker", "apptainer", "python", "prog", "scancel")
HOST_TOOLS = ("bash", "date", "head", "id", "sed", "sleep")


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

    def record(self, command: str, output: str, exit_code: int = 0) -> None:
        """Make `command` print `output` (as the real one printed it once) and exit with `exit_code`."""
        (self.log / f"{command}.recorded").write_text(output)
        path = self.bin / command
        path.unlink(missing_ok=True)
        _write_executable(path, f'#!/bin/bash\ncat "{self.log}/{command}.recorded"\nexit {exit_code}\n')


def _write_executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


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

"""Thin, typed wrappers of Slurm's commands for one cluster: the one way clusterkit talks to Slurm.

A `Slurm` object carries the cluster's environment (its SLURM_CONF), so callers never export
anything. Parsing is done on Slurm's parsable output (`-P`/`-h` with `|`), not on tables.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from clusterkit.errors import ClusterkitError, MissingDependency

INSTALL_HINT = "install Slurm's client commands: apt-get install -y slurm-wlm (or scripts/install-slurm.sh)"


class SlurmCommandError(ClusterkitError):
    """A Slurm command exited non-zero; the message carries its stderr."""


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: str  # lowercase Slurm state, e.g. "idle", "allocated", "down*", "drained"
    cpus: int
    gres: str
    reason: str

    @property
    def responding(self) -> bool:
        return not self.state.endswith("*")

    @property
    def base_state(self) -> str:
        return self.state.rstrip("*~#!%$@^-")


@dataclass(frozen=True)
class AccountingRecord:
    """One line of `sacct -D -X`: one attempt of a job (a requeue starts a new attempt, same id)."""

    job_id: str
    name: str
    state: str
    exit_code: str
    node_list: str
    start: str
    end: str

    @property
    def base_state(self) -> str:
        # "CANCELLED by 0" -> "CANCELLED"
        return self.state.split()[0] if self.state else ""


_environ_lock = threading.RLock()


class Slurm:
    """Slurm's CLI against one cluster.

    `extra_env` is what jobs of this cluster should inherit from the submitting process (sbatch
    exports the submitter's environment), e.g. a PATH that finds the submitter's Python.
    """

    def __init__(self, slurm_conf: Path | None = None, timeout: float = 30.0,
                 extra_env: dict[str, str] | None = None) -> None:
        self.slurm_conf = Path(slurm_conf) if slurm_conf else None
        self.timeout = timeout
        self.extra_env = dict(extra_env or {})

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ, **self.extra_env)
        if self.slurm_conf:
            env["SLURM_CONF"] = str(self.slurm_conf)
        return env

    @contextlib.contextmanager
    def environment(self) -> Iterator[None]:
        """Point this process's environment at the cluster, for libraries that run Slurm's
        commands themselves (submitit): only the cluster's own variables are set, and restored on
        exit; one cluster at a time."""
        ours = dict(self.extra_env, **({"SLURM_CONF": str(self.slurm_conf)} if self.slurm_conf else {}))
        with _environ_lock:
            saved = {key: os.environ.get(key) for key in ours}
            os.environ.update(ours)
            try:
                yield
            finally:
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value

    def run(self, command: str, *args: str, check: bool = True, input_text: str | None = None,
            timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        if shutil.which(command) is None:
            raise MissingDependency(f"Slurm command {command!r} not found on PATH", fix=INSTALL_HINT)
        try:
            result = subprocess.run(
                [command, *args], env=self.env, capture_output=True, text=True, input=input_text,
                timeout=timeout or self.timeout,
            )
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(f"`{command} {' '.join(args)}` did not answer within "
                                    f"{timeout or self.timeout:.0f} s",
                                    fix="is slurmctld running? see `clusterkit describe-cluster`") from None
        if check and result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise SlurmCommandError(f"`{command} {' '.join(args)}` failed: {detail[-1] if detail else result.returncode}")
        return result

    def config(self) -> dict[str, str]:
        """`scontrol show config` as a dict: JobRequeue, AccountingStorageType, ..."""
        config = {}
        for line in lines(self.run("scontrol", "show", "config").stdout):
            key, sep, value = line.partition("=")
            if sep:
                config[key.strip()] = value.strip()
        return config

    def partitions(self) -> list[dict[str, str]]:
        """Partition name (the default one ends in '*'), node count, gres and CPUs per node (one row per
        distinct node shape)."""
        out = self.run("sinfo", "-h", "-o", "%P|%D|%G|%c").stdout  # %P marks the default partition with *
        return [dict(zip(("name", "nodes", "gres", "cpus"), line.split("|"))) for line in lines(out)]

    def ping(self) -> bool:
        result = self.run("scontrol", "ping", check=False, timeout=10)
        return result.returncode == 0 and "UP" in result.stdout

    def nodes(self) -> list[NodeInfo]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N|%t|%c|%G|%E").stdout
        seen: dict[str, NodeInfo] = {}
        for line in lines(out):
            name, state, cpus, gres, reason = line.split("|", 4)
            # sinfo -N repeats a node once per partition it is in.
            seen.setdefault(name, NodeInfo(name, state, int(cpus), gres, "" if reason == "none" else reason))
        return list(seen.values())

    def sbatch(self, script: str | Path, *args: str) -> str:
        """Submit a script (text or path) and return the job id."""
        if isinstance(script, Path):
            out = self.run("sbatch", "--parsable", *args, str(script)).stdout
        else:
            out = self.run("sbatch", "--parsable", *args, input_text=script).stdout
        return out.strip().split(";")[0]

    def accounting(self, job_ids: list[str], all_attempts: bool = True) -> list[AccountingRecord]:
        """Accounting records of jobs (one sacct call for all of them); with `all_attempts`, every requeue."""
        if not job_ids:
            return []
        fields = "JobID,JobName,State,ExitCode,NodeList,Start,End"
        args = ["-n", "-P", "-X", "-o", fields, "-j", ",".join(job_ids)]
        if all_attempts:
            args.insert(0, "-D")
        out = self.run("sacct", *args).stdout
        records = []
        for line in lines(out):
            # A job name may contain '|': the name is whatever lies between the id and the last 5 fields.
            job_id, rest = line.split("|", 1)
            *name, state, exit_code, node_list, start, end = rest.split("|")
            records.append(AccountingRecord(job_id, "|".join(name), state, exit_code, node_list, start, end))
        return records

    def queue(self) -> dict[str, str]:
        """Job id -> state for every job the controller still lists (array tasks one by one)."""
        out = self.run("squeue", "-h", "-r", "-o", "%i|%T").stdout
        return dict(line.split("|", 1) for line in lines(out) if "|" in line)

    def job_details(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (StdOut, StdErr, WorkDir, NodeList...); empty once forgotten."""
        result = self.run("scontrol", "show", "job", "-o", job_id, check=False)
        line = next(iter(lines(result.stdout)), "")
        # Values may hold spaces (log paths): a value runs until the next " Key=".
        return {key: value for key, value in re.findall(r"(?:^|\s)([A-Za-z:/_]+)=(.*?)(?=\s[A-Za-z:/_]+=|$)", line)}

    def update_node(self, node: str, state: str, reason: str = "") -> None:
        args = [f"NodeName={node}", f"State={state}"]
        if reason:
            args.append(f"Reason={reason}")
        self.run("scontrol", "update", *args)

    def hostnames(self, node_list: str) -> list[str]:
        """Expand a compact node list (`n[1-3,5]`) into names."""
        return self.run("scontrol", "show", "hostnames", node_list).stdout.split() if node_list else []

    def steps(self, job_id: str) -> list[str]:
        """The job's running steps (`JOB.STEP`), not counting the batch and extern steps."""
        out = self.run("squeue", "-h", "-s", "-j", job_id, "-o", "%i", check=False).stdout.split()
        return [step for step in out if not step.endswith((".batch", ".extern"))]

    def time_left(self, job_id: str) -> float | None:
        """Seconds before the job's time limit; None without a limit, or for a job Slurm does not list."""
        out = lines(self.run("squeue", "-h", "-j", job_id, "-o", "%L", check=False, timeout=10).stdout)
        return parse_duration(out[0]) if out else None

    def requeue(self, job_id: str) -> None:
        self.run("scontrol", "requeue", job_id)

    def cancel(self, job_id: str, signal: str | None = None) -> None:
        self.run("scancel", *([f"--signal={signal}"] if signal else []), job_id)


def parse_duration(text: str) -> float | None:
    """Slurm's [D-]HH:MM:SS, MM:SS or M as seconds; None for UNLIMITED, INVALID and anything else."""
    days, _, clock = text.strip().rpartition("-")
    parts = clock.split(":")
    if not (days.isdigit() or days == "") or not all(part.isdigit() for part in parts) or len(parts) > 3:
        return None
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + int(part)
    if len(parts) == 1:
        seconds *= 60  # a bare number is minutes
    return float(seconds + int(days or 0) * 86400)


def log_file(pattern: str | None, reported: str | None, workdir: str | Path) -> str | None:
    """Where Slurm writes a job's log: where `scontrol show job` says, except for a pattern holding a
    backslash, which Slurm takes literally (replacement symbols such as %j are not expanded and the
    backslashes are dropped) while scontrol still shows the pattern expanded."""
    if pattern and "\\" in pattern:
        literal = Path(pattern.replace("\\", ""))
        return str(literal if literal.is_absolute() else Path(workdir) / literal)
    return reported or None


def lines(output: str) -> list[str]:
    """The lines of a Slurm command's output: split at newlines only (str.splitlines also splits at
    U+2028 and other separators a job name or log path may hold)."""
    return [line for line in output.split("\n") if line]

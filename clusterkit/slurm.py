"""Thin, typed wrappers of Slurm's commands for one cluster: the one way clusterkit talks to Slurm.

A `Slurm` object carries the cluster's environment (its SLURM_CONF), so callers never export
anything. Parsing is done on Slurm's parsable output (`-P`/`-h` with `|`), not on tables.
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import secrets
import shlex
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from clusterkit.errors import ClusterkitError, MissingDependency, NotFound
from clusterkit.findings import shorten
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.transport import LOCAL, Transport, exists

INSTALL_HINT = "install Slurm's client commands: apt-get install -y slurm-wlm (or scripts/install-slurm.sh)"


class SlurmCommandError(ClusterkitError):
    """A Slurm command exited non-zero; the message carries its stderr."""


# A job as the job verbs name it: a job, an array task (JOB_TASK) or a heterogeneous job's component (JOB+N).
JOB_ID_RE = r"\d+(?:_\d+|\+\d+)?"


def checked_job_id(job_id: str) -> str:
    """`job_id` if it names a job; else a one-line error (an empty id makes scontrol list every job)."""
    if not re.fullmatch(JOB_ID_RE, job_id):
        raise ClusterkitError(f"{shorten(job_id)!r} is not a Slurm job id",
                              fix="give the id sbatch printed, e.g. 1234 (or 1234_5 for an array task); "
                                  "`clusterkit jobs` lists them")
    return job_id


# SageMaker HyperPod writes its groups and their instances here on every node it runs (its lifecycle scripts read it).
HYPERPOD_RESOURCE_CONFIG = "/opt/ml/config/resource_config.json"
# HyperPod's own request, from Slurm, for a node: `scontrol update node=X state=fail reason="Action:Replace"` (new
# hardware; the instance's volumes are lost) or "Action:Reboot" (the same instance). The reason must be exactly this.
REPLACE_REASON = "Action:Replace"
REBOOT_REASON = "Action:Reboot"


class Flavor(str, enum.Enum):
    """Whose Slurm a cluster runs: stock Slurm (a local cluster, ParallelCluster, any other), or SageMaker HyperPod's,
    which replaces a node marked FAIL with REPLACE_REASON and re-runs a failed step started with --auto-resume=1."""

    STOCK = "slurm"
    HYPERPOD = "hyperpod"


def flavor_of(transport: Transport = LOCAL) -> Flavor:
    """The flavor of the Slurm of the machine `transport` reaches (this one by default): HyperPod's where HyperPod's
    resource config is there."""
    return Flavor.HYPERPOD if exists(transport, HYPERPOD_RESOURCE_CONFIG) else Flavor.STOCK


@lean_dataclass(frozen=True)
class NodeInfo:
    name: str
    state: str  # lowercase Slurm state, e.g. "idle", "allocated", "down*", "drained"
    cpus: int
    gres: str
    reason: str
    reason_time: str = ""  # when the reason was set (sinfo's %H: the controller's local time), '' without one

    @property
    def responding(self) -> bool:
        return not self.state.endswith("*")

    @property
    def base_state(self) -> str:
        return self.state.rstrip("*~#!%$@^-")


@lean_dataclass(frozen=True)
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
QUEUE_ARGS = ("-h", "-r", "-o", "%i|%T")
ACCOUNTING_FIELDS = "JobID,JobName,State,ExitCode,NodeList,Start,End"


@lean_dataclass(frozen=True)
class Poll:
    """What one look at the cluster saw (see Slurm.poll); `commands`: how many Slurm commands it took."""

    queue: dict[str, str]
    accounting: list[AccountingRecord]
    details: dict[str, str]
    commands: int


class Slurm:
    """Slurm's CLI against one cluster, run on this machine or over SSH (`transport`).

    `extra_env` is what jobs of this cluster should inherit from the submitting process (sbatch
    exports the submitter's environment), e.g. a PATH that finds the submitter's Python.
    """

    def __init__(self, slurm_conf: Path | None = None, timeout: float = 30.0,
                 extra_env: dict[str, str] | None = None, transport: Transport = LOCAL) -> None:
        self.slurm_conf = Path(slurm_conf) if slurm_conf else None
        self.timeout = timeout
        self.extra_env = dict(extra_env or {})
        self.transport = transport
        self._version: str | None = None

    @property
    def env(self) -> dict[str, str]:
        """What commands get on top of the environment they run in (this process's, or the far side's)."""
        env = dict(self.extra_env)
        if self.slurm_conf:
            env["SLURM_CONF"] = str(self.slurm_conf)
        return env

    @contextlib.contextmanager
    def environment(self) -> Iterator[None]:
        """Point this process's environment at the cluster, for libraries that run Slurm's
        commands themselves (submitit): only the cluster's own variables are set, and restored on
        exit; one cluster at a time."""
        ours = self.env
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
        on_path = self.env.get("PATH", os.environ.get("PATH"))  # the cluster's own clients may come first
        if not self.transport.remote and shutil.which(command, path=on_path) is None:
            raise MissingDependency(f"Slurm command {command!r} not found on PATH", fix=INSTALL_HINT)
        limit = timeout or self.timeout
        try:
            raw = self.transport.run([command, *args], env=self.env, timeout=limit,
                                     input_bytes=input_text.encode() if input_text is not None else None)
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(f"`{command} {' '.join(args)}` did not answer within {limit:.0f} s"
                                    + (f" on {self.transport.label}" if self.transport.remote else ""),
                                    fix="is slurmctld running? see `clusterkit describe-cluster`") from None
        result = subprocess.CompletedProcess(raw.args, raw.returncode, raw.stdout.decode(errors="replace"),
                                             raw.stderr.decode(errors="replace"))
        if self.transport.remote and result.returncode == 127:  # the far side's shell (or env) found no such command
            raise MissingDependency(f"Slurm command {command!r} is not on the PATH of {self.transport.label}",
                                    fix="is this a Slurm login node? (or add Slurm's bin directory to its PATH)")
        if check and result.returncode != 0:
            raise _failed([command, *args], result)
        return result

    def config(self) -> dict[str, str]:
        """`scontrol show config` as a dict: JobRequeue, AccountingStorageType, ..."""
        config = {}
        for line in lines(self.run("scontrol", "show", "config").stdout):
            key, sep, value = line.partition("=")
            if sep:
                config[key.strip()] = value.strip()
        return config

    def version(self) -> str:
        """The Slurm version of the cluster's controller, as slurmctld reports it (`scontrol show config`'s
        SLURM_VERSION is the controller's, not the client's): asked once per Slurm object."""
        if self._version is None:
            version = controller_version(self.run("scontrol", "show", "config").stdout)
            if version is None:
                raise SlurmCommandError("the controller reported no Slurm version (`scontrol show config` has no "
                                        "SLURM_VERSION)")
            self._version = version
        return self._version

    def partitions(self) -> list[dict[str, str]]:
        """Partition name (the default one ends in '*'), node count, gres and CPUs per node (one row per
        distinct node shape)."""
        out = self.run("sinfo", "-h", "-o", "%P|%D|%G|%c").stdout  # %P marks the default partition with *
        return [dict(zip(("name", "nodes", "gres", "cpus"), line.split("|"))) for line in lines(out)]

    def ping(self) -> bool:
        result = self.run("scontrol", "ping", check=False, timeout=10)
        return result.returncode == 0 and "UP" in result.stdout

    def nodes(self) -> list[NodeInfo]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N|%t|%c|%G|%H|%E").stdout
        seen: dict[str, NodeInfo] = {}
        for line in lines(out):
            name, state, cpus, gres, since, reason = line.split("|", 5)  # the reason last: it may hold a |
            # sinfo -N repeats a node once per partition it is in.
            seen.setdefault(name, NodeInfo(name, state, int(cpus), gres, "" if reason == "none" else reason,
                                           "" if reason == "none" or since == "Unknown" else since))
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
        return parse_accounting(self.run("sacct", *_sacct_args(job_ids, all_attempts)).stdout)

    def queue(self) -> dict[str, str]:
        """Job id -> state for every job the controller still lists (array tasks one by one)."""
        return parse_queue(self.run("squeue", *QUEUE_ARGS).stdout)

    def job_details(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (StdOut, StdErr, WorkDir, NodeList...); empty once forgotten."""
        checked = checked_job_id(job_id)  # an empty id would make scontrol describe every job
        return parse_job_details(self.run("scontrol", "show", "job", "-o", checked, check=False).stdout)

    def poll(self, job_ids: list[str], details_of: str | None = None) -> Poll:
        """The queue, the accounting of `job_ids` (every attempt) and, when asked, one job's details, in
        one round trip to the cluster (it matters over SSH)."""
        calls = [["squeue", *QUEUE_ARGS]]
        if job_ids:
            calls.append(["sacct", *_sacct_args(job_ids, True)])
        if details_of:
            calls.append(["scontrol", "show", "job", "-o", details_of])
        results = self.run_many(calls)
        for call, result in zip(calls[:2], results[:2]):
            if result.returncode != 0:
                raise _failed(call, result)
        return Poll(queue=parse_queue(results[0].stdout),
                    accounting=parse_accounting(results[1].stdout) if job_ids else [],
                    details=parse_job_details(results[-1].stdout) if details_of else {},
                    commands=len(calls))

    def run_many(self, calls: list[list[str]], timeout: float | None = None) -> list[subprocess.CompletedProcess[str]]:
        """Run several commands; over SSH in one connection round trip. Exit codes are not checked."""
        if not self.transport.remote:
            return [self.run(call[0], *call[1:], check=False, timeout=timeout) for call in calls]
        marker = f"--clusterkit-{secrets.token_hex(8)}--"
        script = "".join(f"{shlex.join(call)}; printf '\\n{marker} %s\\n' \"$?\"\n" for call in calls)
        together = self.run("sh", "-c", script, check=False, timeout=timeout)
        # chunks[0] is the first command's output; each later chunk starts with the exit code of the
        # command before it, then (after a newline) the next command's output.
        chunks = together.stdout.split(f"\n{marker} ")
        outputs, codes = [chunks[0]], []
        for chunk in chunks[1:]:
            code, _, rest = chunk.partition("\n")
            codes.append(int(code) if code.isdigit() else 1)
            outputs.append(rest)
        return [subprocess.CompletedProcess(call, codes[i] if i < len(codes) else 1,
                                            outputs[i] if i < len(outputs) else "", together.stderr)
                for i, call in enumerate(calls)]

    def update_node(self, node: str, state: str, reason: str = "") -> None:
        args = [f"NodeName={node}", f"State={state}"]
        if reason:
            args.append(f"Reason={reason}")
        self.run("scontrol", "update", *args)

    def hostnames(self, node_list: str) -> list[str]:
        """Expand a compact node list (`n[1-3,5]`) into names."""
        return self.run("scontrol", "show", "hostnames", node_list).stdout.split() if node_list else []

    def steps(self, job_id: str, but: str = "") -> list[str]:
        """The job's running steps (`JOB.STEP`), not counting the batch and extern steps, nor those named `but`."""
        out = self.run("squeue", "-h", "-s", "-j", job_id, "-o", "%i %j", check=False).stdout
        steps = [line.split(maxsplit=1) for line in lines(out)]
        return [step[0] for step in steps
                if not step[0].endswith((".batch", ".extern")) and not (but and step[1:] == [but])]

    def time_left(self, job_id: str) -> float | None:
        """Seconds before the job's time limit; None without a limit, or for a job Slurm does not list."""
        out = lines(self.run("squeue", "-h", "-j", job_id, "-o", "%L", check=False, timeout=10).stdout)
        return parse_duration(out[0]) if out else None

    def requeue(self, job_id: str) -> None:
        self.run("scontrol", "requeue", job_id)

    def cancel(self, job_id: str, signal: str | None = None) -> bool:
        """Cancel (or signal) a job or step; False when it had already ended, NotFound when Slurm knows no
        such job. scancel (22.05) exits 0 and says nothing of either unless asked to be verbose."""
        argv = ["--verbose", *([f"--signal={signal}"] if signal else []), job_id]
        result = self.run("scancel", *argv, check=False)
        if "Invalid job id specified" in result.stderr:
            where = f" on {self.transport.label}" if self.transport.remote else ""
            raise NotFound(f"Slurm knows no job {job_id}{where}", fix="check the id with `clusterkit jobs` or squeue")
        if result.returncode != 0:
            raise _failed(["scancel", *argv], result)
        return "already completing or completed" not in result.stderr


def _failed(call: list[str], result: subprocess.CompletedProcess[str]) -> SlurmCommandError:
    """A command's failure in one line: the command and the last line it printed."""
    detail = (result.stderr or result.stdout).strip().splitlines()
    return SlurmCommandError(f"`{' '.join(call)}` failed: {detail[-1] if detail else result.returncode}")


def controller_version(config_output: str) -> str | None:
    """The controller's Slurm version (24.11.5) in `scontrol show config`'s output; None without one."""
    found = re.search(r"^SLURM_VERSION\s*=\s*(\d+\.\d+\.\d+\S*)\s*$", config_output, re.MULTILINE)
    return found.group(1) if found else None


def release(version: str) -> str:
    """A Slurm version's release (major.minor: 24.11 of 24.11.5), what compatibility and behaviour go by."""
    return ".".join(version.split(".")[:2])


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


def _sacct_args(job_ids: list[str], all_attempts: bool) -> list[str]:
    args = ["-n", "-P", "-X", "-o", ACCOUNTING_FIELDS, "-j", ",".join(job_ids)]
    return ["-D", *args] if all_attempts else args


def parse_queue(output: str) -> dict[str, str]:
    return dict(line.split("|", 1) for line in lines(output) if "|" in line)


def parse_accounting(output: str) -> list[AccountingRecord]:
    records = []
    for line in lines(output):
        # A job name may contain '|': the name is whatever lies between the id and the last 5 fields.
        job_id, rest = line.split("|", 1)
        *name, state, exit_code, node_list, start, end = rest.split("|")
        records.append(AccountingRecord(job_id, "|".join(name), state, exit_code, node_list, start, end))
    return records


def parse_job_details(output: str) -> dict[str, str]:
    # `-o` ends every field with a space. Slurm 22.05 ends the line with an empty Power=; 24.11 dropped it, so
    # the space would end the last field there (StdOut, a log path).
    line = next(iter(lines(output)), "").removesuffix(" ")
    # Values may hold spaces (log paths): a value runs until the next " Key=".
    return {key: value for key, value in re.findall(r"(?:^|\s)([A-Za-z:/_]+)=(.*?)(?=\s[A-Za-z:/_]+=|$)", line)}


def lines(output: str) -> list[str]:
    """The lines of a Slurm command's output: split at newlines only (str.splitlines also splits at
    U+2028 and other separators a job name or log path may hold)."""
    return [line for line in output.split("\n") if line]

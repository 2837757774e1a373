"""Rules a job spec must meet before it is rendered: one small function per rule, all run together.

Each rule yields Findings whose path is the field in the user's spec; `validate_job(spec)` returns
every finding, errors first. Rules that need the live cluster are the preflight's (`preflight.py`).
Patterns are matched in full (`fullmatch`): `$` would let a trailing newline through.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterator
from typing import Any

from clusterkit.findings import CONTROL_RE, Finding, Level, error, shorten, similar_names, warning
from clusterkit.jobs.spec import (CPU_INSTANCE, DEFAULT_NEURON_CACHE_DIR, DEFAULT_OUTPUT, LAUNCHERS, RUNTIMES,
                                  WARNING_SIGNALS, JobSpec, parse_warning)
from clusterkit.registry import CLUSTER_NAME_RE
from clusterkit.rules import RuleBook
from clusterkit.spec_reader import control_characters, load
from clusterkit.stack_versions import COMPONENT_NAMES, TUNER_SOURCE, TunerOutcome, tuner_outcome, unmet_floors
from clusterkit.versions import version_tuple

JOB_RULES: RuleBook[JobSpec] = RuleBook("job")
rule = JOB_RULES.rule

# sbatch options the spec sets through its own fields, and which field that is.
MANAGED_DIRECTIVES: dict[str, str] = {
    "job-name": "name",
    "nodes": "nodes",
    "ntasks-per-node": "processes_per_node",
    "gpus-per-node": "gpus_per_node",
    "partition": "partition",
    "exclusive": "exclusive",
    "requeue": "requeue",
    "no-requeue": "requeue",
    "signal": "signal",
    "time": "time",
    "output": "logs.output",
    "error": "logs.error",
    "open-mode": "logs (always append)",
    "chdir": "workdir",
    "wait-all-nodes": "(always 1)",
}

ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (and UNLIMITED).
TIME_RE = re.compile(r"\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(?::\d{1,2}){0,2}|UNLIMITED|INFINITE")
TIME_HINT = "a Slurm time such as 90 (minutes), 04:00:00 or 2-00:00:00"
RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
PARTITION_RE = re.compile(r"[A-Za-z0-9_.-]+(?:,[A-Za-z0-9_.-]+)*")
VERSION_RE = re.compile(r"v?\d+(?:\.\d+)*(?:[-+][A-Za-z0-9.]+)?")
SBATCH_OPTION_RE = re.compile(r"--[a-z][a-z0-9-]*")
CPU_BIND_RE = re.compile(r"(?:(?:quiet|verbose),)?(?:none|rank|sockets|cores|threads|ldoms|boards|rank_ldom"
                         r"|(?:map|mask)_(?:cpu|ldom):[0-9a-fA-Fx,*]+)")
# An image in Amazon ECR: docker on the nodes must log in to its registry first.
ECR_IMAGE_RE = re.compile(r"(?P<host>\d{12}\.dkr\.ecr\.(?P<region>[a-z]{2}(?:-[a-z]+)+-\d)\.amazonaws\.com(?:\.cn)?)"
                          r"/[a-z0-9][a-z0-9._/-]*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})?")
# Image references each runtime takes (a leading '-' is refused before these: it would be an option). Text,
# compiled by `re` (and cached) when a spec has an image: not at every CLI start.
# docker: distribution's reference grammar, [HOST[:PORT]/]PATH[:TAG][@DIGEST].
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = rf"{_LABEL}(?:\.{_LABEL})*(?::\d+)?"
# The first component is a registry only with a '.' or a port, or as localhost (else it is the path's).
_REGISTRY = rf"(?:{_LABEL}(?:\.{_LABEL})+(?::\d+)?|{_LABEL}:\d+|localhost)"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
_TAG_AND_DIGEST = (r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
                   r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")
# pyxis: a squashfs file (a path from '/' or '.'), or enroot's [SCHEME://][USER@][REGISTRY#]IMAGE[:TAG].
_ENROOT_USER = r"[A-Za-z0-9_.!~*'()%;:&=+$,-]+"
IMAGE_REFERENCE_PATTERNS = {
    "docker": rf"(?:{_REGISTRY}/)?{_PATH}{_TAG_AND_DIGEST}",
    "pyxis": (rf"\.{{0,2}}/\S*|(?:(?:docker|dockerd|podman)://)?(?:{_ENROOT_USER}@)?(?:{_HOST}#)?"
              rf"[a-z0-9][a-z0-9._/-]*{_TAG_AND_DIGEST}"),
    # apptainer: a URI of a source it knows, else a path (a SIF file or a sandbox directory).
    "apptainer": (r"(?:docker|docker-archive|docker-daemon|library|oras|shub|oci|oci-archive|http|https)://"
                  r"[A-Za-z0-9/.]\S*|(?:docker-archive|docker-daemon|oci|oci-archive):[A-Za-z0-9/.]\S*"
                  r"|(?![A-Za-z][A-Za-z0-9+.-]*:)\S+"),
}
IMAGE_HINTS = {
    "docker": "write a docker reference such as registry.example.com/team/train:1.0 (lowercase repository)",
    "pyxis": "write /fsx/images/NAME.sqsh, or an enroot reference such as nvcr.io#nvidia/pytorch:24.01-py3",
    "apptainer": "write a path such as /fsx/images/train.sif, or a URI such as docker://registry.example.com/train:1",
}
NAME_MAX = 255  # bytes in one path component (and Slurm's job names end up in file names via %x)
PATH_MAX = 4096
# The kernel refuses one argument or environment string of 32 pages or more (MAX_ARG_STRLEN), and a
# task's shell receives its whole step function as one argument: the command must fit in it.
MAX_ARG_BYTES = 131072
STEP_FUNCTION_BUDGET = 120_000  # of MAX_ARG_BYTES, for the command words (the rest: clusterkit's own text)
MAX_ENVIRONMENT_BYTES = 1 << 20  # of the kernel's 2 MiB for arguments and environment together
# Variables that change how the batch script's own shell runs: never from a spec.
SHELL_CONTROL_VARIABLES = ("BASH_ENV", "ENV", "IFS", "SHELLOPTS", "BASHOPTS", "PS4", "GLOBIGNORE", "CDPATH",
                           "BASH_XTRACEFD", "PROMPT_COMMAND", "POSIXLY_CORRECT")
# Shared file systems: paths under them inside a container exist there only when mounted.
SHARED_STORAGE_ROOTS = ("/fsx", "/efs", "/shared", "/home")
# Mounted into every container by default: apptainer binds $HOME and /tmp; pyxis nothing (the script passes
# --no-container-mount-home), docker nothing.
DEFAULT_CONTAINER_MOUNTS = {"pyxis": (), "apptainer": ("/home", "/tmp"), "docker": ()}
NEURON_BF16_VARIABLES = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")


def validate_job(spec: JobSpec) -> list[Finding]:
    """Check a job spec's values; every finding names the field, the problem and a fix."""
    return JOB_RULES.check(spec)


def check_job_data(data: Any) -> list[Finding]:
    """Every finding of a job spec given as a tree or plain data: loading errors, else the rules'."""
    from clusterkit.jobs.spec import SHORT_FORMS

    spec, findings = load(JobSpec, data, short_forms=SHORT_FORMS, rule_prefix="job")
    return findings if spec is None else findings + validate_job(spec)


def _choice(path: str, value: str, choices: tuple[str, ...]) -> Iterator[Finding]:
    if value not in choices:
        guess = similar_names(value, choices)
        yield error(path, f"must be one of {', '.join(choices)}",
                    f"did you mean {guess[0]!r}?" if guess else f"use one of: {', '.join(choices)}", value)


@rule
def single_line(spec: JobSpec) -> Iterator[Finding]:
    """No control character in any text (#SBATCH lines, comments, names and paths that logs and Slurm read line
    by line); command arguments, compile arguments and env values may hold tabs and line breaks, as they reach
    the program quoted, byte for byte."""
    return control_characters(spec)


def _path_too_long(value: str) -> str:
    if len(value.encode()) >= PATH_MAX:
        return f"is {len(value.encode()):,} bytes; paths are at most {PATH_MAX - 1:,}"
    longest = max((len(part.encode()) for part in value.split("/")), default=0)
    if longest > NAME_MAX:
        return f"has a path component of {longest:,} bytes; the kernel allows {NAME_MAX}"
    return ""


@rule
def name(spec: JobSpec) -> Iterator[Finding]:
    if not spec.name:
        yield error("name", "is empty", "name the job")
        return
    if len(spec.name.encode()) > NAME_MAX:
        yield error("name", f"is {len(spec.name.encode()):,} bytes; it names the log file (%x), which the "
                    f"kernel limits to {NAME_MAX}", "use a shorter name", spec.name)
    patterns = spec.logs.output + (spec.logs.error or "")
    if "%x" in patterns and ("/" in spec.name or spec.name in (".", "..")):
        yield error("name", "the log path uses the job name (%x), and this name would put the log in "
                    "another directory", "use a name without '/' (or a log path without %x)", spec.name)


@rule
def nodes(spec: JobSpec) -> Iterator[Finding]:
    if spec.nodes < 1:
        yield error("nodes", "must be at least 1", "write a number >= 1", spec.nodes)


@rule
def names_of_things(spec: JobSpec) -> Iterator[Finding]:
    if spec.cluster is not None and not CLUSTER_NAME_RE.fullmatch(spec.cluster):
        yield error("cluster", "is not a clusterkit cluster name", "letters, digits and '-', starting with a letter",
                    spec.cluster)
    if spec.partition is not None and not PARTITION_RE.fullmatch(spec.partition):
        yield error("partition", "is not a Slurm partition name", "use letters, digits, '_', '.', '-'",
                    spec.partition)
    if spec.run_id is not None and not RUN_ID_RE.fullmatch(spec.run_id):
        yield error("run_id", "may hold only letters, digits, '.', '_' and '-'", "pick a simpler run id", spec.run_id)


@rule
def time_and_signal(spec: JobSpec) -> Iterator[Finding]:
    if spec.time is not None and (not TIME_RE.fullmatch(spec.time) or not spec.time.strip("0:-")):
        yield error("time", "is not a Slurm time limit", f"write {TIME_HINT}", spec.time)
    if spec.signal is None:
        return
    parsed = parse_warning(spec.signal)
    if parsed is None:
        names = sorted({name for name in WARNING_SIGNALS if not name.isdigit() and not name.startswith("SIG")})
        yield error("signal", f"is not a warning clusterkit can act on: write {' or '.join(names)}, optionally "
                    "@SECONDS before the time limit", "write e.g. USR1@120 (the job saves and requeues 120 s "
                    "before its limit)", spec.signal)
        return
    if spec.supervise is not None and parsed.signal != "USR1":
        yield error("signal", "the supervisor takes Slurm's warning as SIGUSR1", "write USR1@SECONDS",
                    spec.signal)
    limit = _minutes(spec.time) if spec.time else None
    if limit is not None and parsed.seconds >= limit * 60:
        yield error("signal", f"the warning would come {parsed.seconds} s before a time limit of {limit} min",
                    "warn fewer seconds before the limit, or raise the limit", spec.signal)
    if not spec.requeue:
        yield warning("signal", "requeue is off: after the warning the step saves and stops, and the job ends "
                      "at its time limit (TIMEOUT) instead of being requeued", "set requeue: true, or resubmit "
                      "with `clusterkit watch JOB --resubmit`", spec.signal)


def _minutes(time: str) -> int | None:
    """A Slurm time limit in whole minutes (seconds dropped); None for unlimited or unreadable."""
    if not TIME_RE.fullmatch(time) or time in ("UNLIMITED", "INFINITE"):
        return None
    days, has_days, clock = time.partition("-")
    if not has_days:
        days, clock = "0", time
    parts = [int(part) for part in clock.split(":")]
    if has_days or len(parts) == 3:  # D-H[:M[:S]] or H:M:S
        hours, minutes = parts[0], parts[1] if len(parts) > 1 else 0
    else:  # M or M:S
        hours, minutes = 0, parts[0]
    return int(days) * 1440 + hours * 60 + minutes


@rule
def restarts(spec: JobSpec) -> Iterator[Finding]:
    if spec.max_restarts is not None and spec.max_restarts < 0:
        yield error("max_restarts", "must be 0 or more", "write a number >= 0", spec.max_restarts)
    if spec.max_restarts and not spec.requeue:
        yield warning("max_restarts", "a restart budget with requeue off: Slurm will not requeue after a node "
                      "failure", "set requeue: true")
    if spec.supervise is not None:
        if spec.supervise.hang_timeout < 0:
            yield error("supervise.hang_timeout", "must be 0 (off) or more seconds", "write e.g. 600",
                        spec.supervise.hang_timeout)
        if spec.supervise.startup_timeout is not None and spec.supervise.startup_timeout < 0:
            yield error("supervise.startup_timeout", f"is {spec.supervise.startup_timeout}: must be 0 (off) or more "
                        "seconds", "write e.g. 1800, or leave it out for the default", spec.supervise.startup_timeout)
        if spec.supervise.app_retries < 0:
            yield error("supervise.app_retries", "must be 0 or more", "write e.g. 1", spec.supervise.app_retries)
        for name in ("max_time_limit_requeues", "max_preemptions"):
            bound = getattr(spec.supervise, name)
            if bound is not None and bound < 0:
                yield error(f"supervise.{name}", "must be 0 or more (leave it out for the default)", "write e.g. 20",
                            bound)
        if spec.supervise.python == "":
            yield error("supervise.python", "is empty", "name an interpreter with clusterkit, e.g. python3")
        if not 0 <= spec.supervise.spares <= spec.nodes:
            yield error("supervise.spares", f"is {spec.supervise.spares}: must be 0 to nodes ({spec.nodes}) spare "
                        "nodes beside the step's", "write e.g. 1: the job then holds nodes + 1", spec.supervise.spares)


@rule
def checkpoint_interval(spec: JobSpec) -> Iterator[Finding]:
    from clusterkit.errors import ClusterkitError
    from clusterkit.goodput.model import check_parameter
    from clusterkit.resilience.checkpoint_interval import AUTO, parse_every

    if spec.checkpoint_every is not None:
        try:
            parse_every(spec.checkpoint_every, "checkpoint_every")
        except ClusterkitError as problem:
            yield error("checkpoint_every", problem.message.partition(": ")[2], problem.fix, spec.checkpoint_every)
    if spec.failures_per_gpu_hour is not None:
        try:
            check_parameter("failures_per_gpu_hour", spec.failures_per_gpu_hour)
        except ClusterkitError as problem:
            yield error("failures_per_gpu_hour", problem.message.partition(": ")[2], problem.fix,
                        spec.failures_per_gpu_hour)
        if spec.checkpoint_every != AUTO:
            yield warning("failures_per_gpu_hour", "is used only to choose the checkpoint interval",
                          "set checkpoint_every: auto, or leave failures_per_gpu_hour out")


@rule
def directories(spec: JobSpec) -> Iterator[Finding]:
    for path, value in (("workdir", spec.workdir), ("checkpoint_dir", spec.checkpoint_dir),
                        ("container.workdir", spec.container.workdir)):
        if value is None:
            continue
        problem = "is empty" if not value else _path_too_long(value)
        if problem:
            yield error(path, problem, "write a shorter path, or leave the field out", value)
    if spec.checkpoint_dir and not spec.checkpoint_dir.startswith("/"):
        yield warning("checkpoint_dir", "is relative; every node must resolve it to the same shared directory",
                      "use an absolute path on shared storage, e.g. /fsx/checkpoints/RUN", spec.checkpoint_dir)


@rule
def logs(spec: JobSpec) -> Iterator[Finding]:
    for path, value in (("logs.output", spec.logs.output), ("logs.error", spec.logs.error)):
        if value is None:
            continue
        if not value:
            yield error(path, "is empty", f"write a path such as {DEFAULT_OUTPUT}")
            continue
        if "\\" in value:
            yield error(path, "contains '\\': Slurm then expands none of %j, %x... in the path",
                        "remove the backslash", value)
        problem = _path_too_long(value.replace("%x", spec.name))
        if problem:
            yield error(path, f"{problem} (with the job name for %x)", "use a shorter path or name", value)
        if "%j" not in value and "%J" not in value and "%A" not in value:
            yield warning(path, "has no job id (%j): different jobs would append to one file",
                          f"use a pattern such as {DEFAULT_OUTPUT}", value)


@rule
def resources(spec: JobSpec) -> Iterator[Finding]:
    facts = spec.instance_facts
    if spec.instance is not None and facts is None:
        yield error("instance", "is not in the instance catalog", "use a preset such as p4de or an instance type",
                    spec.instance)
        return
    if spec.gpus_per_node is not None:
        if spec.gpus_per_node < 1:
            yield error("gpus_per_node", "must be at least 1", "write a number >= 1, or leave it out",
                        spec.gpus_per_node)
        elif facts is not None and facts.accelerator != "gpu":
            yield error("gpus_per_node", f"{facts.name} has no GPUs", "remove gpus_per_node", spec.gpus_per_node)
        elif facts is not None and spec.gpus_per_node > facts.accelerator_count:
            yield error("gpus_per_node", f"{facts.name} has {facts.accelerator_count} GPUs",
                        f"ask for at most {facts.accelerator_count}", spec.gpus_per_node)
        elif facts is not None:
            yield warning("gpus_per_node", "--gpus-per-node breaks HyperPod auto-resume and is not needed on "
                          "ParallelCluster, where a job gets whole nodes", "remove gpus_per_node", spec.gpus_per_node)
    if spec.processes_per_node is not None and spec.processes_per_node < 1:
        yield error("processes_per_node", "must be at least 1", "write a number >= 1", spec.processes_per_node)
    elif facts is not None and facts.accelerator != "none" and spec.processes > facts.processes(
            spec.launcher.logical_nc_config):
        yield warning("processes_per_node", f"more processes than {facts.name} has GPUs or NeuronCores "
                      f"({facts.processes(spec.launcher.logical_nc_config)})", "use one process per accelerator",
                      spec.processes)
    if facts is not None and facts.accelerator != "none" and spec.nodes > 1 and not spec.exclusive:
        yield warning("exclusive", "multi-node training on nodes other jobs may share", "set exclusive: true")


@rule
def container(spec: JobSpec) -> Iterator[Finding]:
    container = spec.container
    if container.runtime not in RUNTIMES:
        yield from _choice("container.runtime", container.runtime, RUNTIMES)
        return
    if container.runtime == "none":
        if container.image:
            yield error("container.image", "an image with runtime none would be ignored",
                        "set container.runtime to pyxis, docker or apptainer", container.image)
        if container.mounts or container.workdir:
            yield warning("container", "mounts and workdir are ignored without a container runtime",
                          "remove them or set container.runtime")
        return
    image = container.image
    if not image:
        yield error("container.image", f"is required with runtime {container.runtime}",
                    "name an image (registry reference) or a .sqsh file on shared storage")
    elif CONTROL_RE.search(image) or " " in image:
        yield error("container.image", "contains spaces or control characters", "check the image reference", image)
    elif image.startswith("-"):
        yield error("container.image", f"{shorten(image)!r} starts with '-': {container.runtime} would take it "
                    "for an option", IMAGE_HINTS[container.runtime], image)
    elif image.endswith(".sqsh"):
        if container.runtime != "pyxis":
            yield error("container.image", f"a .sqsh file is an enroot image; {container.runtime} cannot run it",
                        "use runtime pyxis, or a registry reference", image)
        elif not image.startswith("/"):
            yield error("container.image", "a .sqsh path must be absolute (on storage every node sees)",
                        "e.g. /fsx/images/train.sqsh", image)
    elif not re.fullmatch(IMAGE_REFERENCE_PATTERNS[container.runtime], image):
        yield error("container.image", f"{shorten(image)!r} is not an image reference {container.runtime} takes",
                    IMAGE_HINTS[container.runtime], image)
    workdir = container.workdir or spec.workdir
    if workdir and not workdir.startswith("/"):
        yield error("container.workdir" if container.workdir else "workdir",
                    "a working directory inside a container must be absolute", "use an absolute path", workdir)
    for index, mount in enumerate(container.mounts):
        path = f"container.mounts[{index}]"
        for side in (mount.source, mount.target):
            if not side.startswith("/"):
                yield error(path, "mount paths must be absolute", "e.g. /fsx:/fsx", side)
            elif any(char in side for char in ",:") or CONTROL_RE.search(side):
                yield error(path, "mount paths cannot contain ',', ':' or control characters", "rename the path",
                            side)


def _under(path: str, directory: str) -> bool:
    path, directory = posixpath.normpath(path), posixpath.normpath(directory)
    return directory == "/" or path == directory or path.startswith(directory.rstrip("/") + "/")


@rule
def shared_paths_in_containers(spec: JobSpec) -> Iterator[Finding]:
    """A path on shared storage used inside a container exists there only when it is mounted: without
    a mount, checkpoints land in the container's own file system and vanish with it."""
    container = spec.container
    if container.runtime not in DEFAULT_CONTAINER_MOUNTS:
        return
    mounted = [mount.target for mount in container.mounts] + list(DEFAULT_CONTAINER_MOUNTS[container.runtime])
    workdir = container.workdir or spec.workdir
    used = [("container.workdir" if container.workdir else "workdir", workdir, False),
            ("checkpoint_dir", spec.checkpoint_dir, True), ("command.script", spec.command.script, False)]
    if spec.launcher.kind == "neuron":
        used.append(("launcher.compile_cache", spec.launcher.compile_cache, True))
    for path, value, written in used:
        if not value:
            continue
        if not value.startswith("/"):
            if not written or workdir is None or not workdir.startswith("/"):
                continue
            value = posixpath.join(workdir, value)  # relative: inside the container's working directory
        on_shared = any(_under(value, root) for root in SHARED_STORAGE_ROOTS)
        if (on_shared or written) and not any(_under(value, target) for target in mounted):
            where = "on shared storage" if on_shared else "written by the job"
            yield error(path, f"{value} is {where} but not mounted into the {container.runtime} container: "
                        "there it is an empty directory of the container's own (files written there vanish)",
                        f"add a mount, e.g. container.mounts: [{_mount_root(value)}]", value)


def _mount_root(path: str) -> str:
    parts = posixpath.normpath(path).split("/")
    return "/" + parts[1] if len(parts) > 1 and parts[1] else path


@rule
def launcher(spec: JobSpec) -> Iterator[Finding]:
    launcher = spec.launcher
    facts = spec.instance_facts
    if launcher.kind not in LAUNCHERS:
        yield from _choice("launcher.type", launcher.kind, LAUNCHERS)
        return
    if launcher.port is not None and not 1024 <= launcher.port <= 65535:
        yield error("launcher.port", "is not a TCP port for a user's server", "use a port between 1024 and 65535, "
                    "or leave it out for a port derived from the job", launcher.port)
    if launcher.cpu_bind is not None and not CPU_BIND_RE.fullmatch(launcher.cpu_bind):
        yield error("launcher.cpu_bind", "is not an srun --cpu-bind value", "write e.g. none, cores or sockets",
                    launcher.cpu_bind)
    if launcher.kind == "neuron":
        if facts is None or facts.accelerator != "neuron":
            yield error("launcher.type", "the neuron launcher needs a Trainium instance",
                        "set instance: trn1 (or trn1n), or use launcher torchrun", spec.instance or CPU_INSTANCE)
        if not launcher.compile_cache.startswith("/") or CONTROL_RE.search(launcher.compile_cache):
            yield error("launcher.compile_cache", "must be an absolute path on shared storage",
                        f"e.g. {DEFAULT_NEURON_CACHE_DIR}", launcher.compile_cache)
    elif facts is not None and facts.accelerator == "neuron" and launcher.kind == "torchrun":
        yield warning("launcher.type", "torchrun on Trainium without a compile pass compiles graphs during training",
                      "use launcher: neuron")
    if launcher.kind == "mpi" and spec.container.runtime == "docker":
        yield warning("launcher.type", "MPI (PMIx) tasks inside docker cannot reach Slurm's PMIx server by default",
                      "use container.runtime pyxis for MPI jobs")


@rule
def command_size(spec: JobSpec) -> Iterator[Finding]:
    """Each task's shell gets its step function, command included, as one argument: the kernel refuses
    one of MAX_ARG_BYTES or more."""
    for program, path in ((spec.command.args, "command.args"), (spec.launcher.compile_args, "launcher.compile_args")):
        size = len(" ".join(shlex.quote(word) for word in (spec.command.script, *program)).encode())
        if size > STEP_FUNCTION_BUDGET:
            yield error(path, f"the command is {size:,} bytes; a task receives it in one argument, which the "
                        f"kernel limits to {MAX_ARG_BYTES:,} bytes (with clusterkit's own text)",
                        "pass large values in a file and its path as the argument", f"{size:,} bytes")


@rule
def environment(spec: JobSpec) -> Iterator[Finding]:
    total = 0
    for key, value in spec.env.items():
        path = f"env.{key}"
        size = len(key.encode()) + 1 + len(value.encode())
        total += size
        if not ENV_NAME_RE.fullmatch(key):
            yield error(path, "is not a valid environment variable name",
                        "use letters, digits and '_', not starting with a digit", key)
        elif key in SHELL_CONTROL_VARIABLES:
            yield error(path, f"{key} changes how the job's own shell script runs", f"remove {key}", key)
        elif key == "PATH" and not value.strip(":"):
            yield error(path, "an empty PATH: no program of the job would be found on the node",
                        "leave PATH out, or list directories such as /opt/venv/bin:/usr/bin:/bin", value)
        elif key.startswith("RDMAV_"):
            yield warning(path, "RDMAV_* settings are not needed with current EFA software and can break it",
                          f"remove {key}")
        if size >= MAX_ARG_BYTES:
            yield error(path, f"{key}=... is {size:,} bytes; the kernel refuses one environment string of "
                        f"{MAX_ARG_BYTES:,} or more", "pass large values in a file", f"{size:,} bytes")
    if total > MAX_ENVIRONMENT_BYTES:
        yield error("env", f"{total:,} bytes of environment; the kernel leaves about {MAX_ENVIRONMENT_BYTES:,} "
                    "for it beside the arguments", "pass large values in files", f"{total:,} bytes")


@rule
def stack_versions(spec: JobSpec) -> Iterator[Finding]:
    for key in ("aws_ofi_nccl", "libfabric", "nccl", "efa_installer", "neuron"):
        version = getattr(spec.stack, key)
        if version is not None and not VERSION_RE.fullmatch(version):
            yield error(f"stack.{key}", "is not a version number", "write e.g. 1.13.2 (or 1.7.4-aws, v2.21.5-1)",
                        version)


@rule
def stack_floors(spec: JobSpec) -> Iterator[Finding]:
    """The version floors of the stack's table (`stack_versions.FLOORS`) on the job's instance type, each
    finding with the row's source."""
    facts = spec.instance_facts
    if facts is None or facts.accelerator != "gpu" or not facts.efa:
        return
    versions = {component: getattr(spec.stack, component) for component in COMPONENT_NAMES}
    for floor in unmet_floors(facts.name.split(".")[0], versions):
        name, have = COMPONENT_NAMES[floor.component], versions[floor.component]
        if floor.level is Level.ERROR:
            yield error(f"stack.{floor.component}", f"{facts.name} needs {name} {floor.minimum} or later, not "
                        f"{have}: {floor.problem} ({floor.source})", f"use {name} {floor.minimum} or later", have)
        else:
            yield warning(f"stack.{floor.component}", f"{name} {floor.minimum} or later is recommended on "
                          f"{facts.name}, not {have}: {floor.problem} ({floor.source})",
                          f"upgrade {name} to {floor.minimum} or later", have)


@rule
def nccl_tuner(spec: JobSpec) -> Iterator[Finding]:
    """NCCL_ALGO / NCCL_PROTO beside AWS's NCCL tuner, by the interface NCCL and aws-ofi-nccl share
    (`stack_versions.tuner_outcome`)."""
    facts = spec.instance_facts
    set_by_user = [name for name in ("NCCL_ALGO", "NCCL_PROTO") if name in spec.env]
    if facts is None or facts.accelerator != "gpu" or not facts.efa or not set_by_user:
        return
    outcome = tuner_outcome(spec.stack.aws_ofi_nccl, spec.stack.nccl)
    if outcome is None:
        return  # no tuner interface the two share: nothing of AWS's tuner runs
    what, path, value = " and ".join(set_by_user), f"env.{set_by_user[0]}", spec.env[set_by_user[0]]
    versions = f"NCCL {spec.stack.nccl or '(current)'} with aws-ofi-nccl {spec.stack.aws_ofi_nccl or '(current)'}"
    if outcome is TunerOutcome.FAILS:
        yield error(path, f"with {what} set, {versions} fails to initialise wherever the tuner is named "
                    "(NCCL_TUNER_PLUGIN, from an image or the submitting shell; clusterkit leaves it out): the "
                    f"plugin's v1 tuner, which NCCL 2.19-2.20 load, refuses them ({TUNER_SOURCE})",
                    f"remove {what} (the tuner picks algorithms and protocols), or use aws-ofi-nccl 1.17 or later",
                    value)
    elif outcome is TunerOutcome.OVERRIDDEN:
        yield warning(path, f"with {versions}, AWS's tuner (the v2 interface NCCL 2.21 finds in the net plugin) "
                      f"picks algorithm and protocol itself: {what} may be ignored ({TUNER_SOURCE})",
                      f"remove {what}, or use NCCL 2.22 or later (it keeps the tuner within them)", value)
    elif outcome is TunerOutcome.TUNER_OFF:
        yield warning(path, f"{what} turns AWS's NCCL tuner off with {versions}: NCCL's own tuning is used "
                      f"({TUNER_SOURCE})", f"remove {what} unless you measured it is faster", value)
    else:
        yield warning(path, f"{what} limits the algorithms and protocols NCCL and AWS's tuner choose from "
                      f"({TUNER_SOURCE})", f"remove {what} unless you measured it is faster", value)


@rule
def logical_neuron_cores(spec: JobSpec) -> Iterator[Finding]:
    """The logical NeuronCore size: one of the instance's (the ranks per node are counted in it), set by
    `launcher.logical_nc_config` alone."""
    if "NEURON_LOGICAL_NC_CONFIG" in spec.env:
        yield error("env.NEURON_LOGICAL_NC_CONFIG", "would change how many NeuronCores each node exposes behind "
                    "the ranks per node clusterkit starts", "set launcher.logical_nc_config instead (it sets both)",
                    spec.env["NEURON_LOGICAL_NC_CONFIG"])
    size, facts = spec.launcher.logical_nc_config, spec.instance_facts
    if size is None or facts is None:
        return
    if facts.accelerator != "neuron":
        yield error("launcher.logical_nc_config", f"{facts.name} has no NeuronCores", "remove it", size)
    elif size not in facts.logical_nc_configs:
        sizes = " or ".join(str(choice) for choice in sorted(facts.logical_nc_configs))
        yield error("launcher.logical_nc_config", f"{facts.name}'s Neuron runtime takes a logical NeuronCore "
                    f"size of {sizes}", f"write {sizes}, or leave it out for {facts.logical_nc_configs[0]}", size)


@rule
def neuron_settings(spec: JobSpec) -> Iterator[Finding]:
    facts = spec.instance_facts
    if facts is None or facts.accelerator != "neuron":
        return
    neuron = version_tuple(spec.stack.neuron)
    for variable in NEURON_BF16_VARIABLES:
        if variable not in spec.env:
            continue
        if neuron is None or neuron >= (2, 25):
            yield warning(f"env.{variable}", f"Neuron 2.25 and later ignore {variable}: the model trains in fp32",
                          "remove it and use torch.autocast (or model.to(torch.bfloat16)); if the image has an "
                          "older Neuron, say so in stack.neuron", spec.env[variable])
        elif neuron >= (2, 23):
            yield warning(f"env.{variable}", f"{variable} is deprecated since Neuron 2.23 and gone after 2.24",
                          "move to torch.autocast or model.to(torch.bfloat16)", spec.env[variable])


@rule
def sbatch_options(spec: JobSpec) -> Iterator[Finding]:
    for index, directive in enumerate(spec.sbatch):
        path = f"sbatch[{index}]"
        option = directive.split("=", 1)[0]
        if not SBATCH_OPTION_RE.fullmatch(option):
            yield error(path, "is not a long sbatch option", "write e.g. --account=ml", directive)
        elif option[2:] in MANAGED_DIRECTIVES:
            yield error(path, f"{option} is set by the job spec",
                        f"set `{MANAGED_DIRECTIVES[option[2:]]}` instead", directive)

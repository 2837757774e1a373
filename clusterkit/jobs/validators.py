"""Rules a job spec must meet before it is rendered: one small function per rule, all run together.

Each rule yields Findings whose path is the field in the user's spec; `validate_job(spec)` returns
every finding, errors first. Rules that need the live cluster are the preflight's (`preflight.py`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator

from clusterkit.findings import Finding, Level
from clusterkit.jobs.spec import CPU_INSTANCE, DEFAULT_NEURON_CACHE_DIR, DEFAULT_OUTPUT, LAUNCHERS, RUNTIMES, JobSpec
from clusterkit.registry import CLUSTER_NAME_RE
from clusterkit.rules import RuleBook

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

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (and UNLIMITED).
TIME_RE = re.compile(r"^(?:\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(?::\d{1,2}){0,2}|UNLIMITED|INFINITE)$")
TIME_HINT = "a Slurm time such as 90 (minutes), 04:00:00 or 2-00:00:00"
SIGNAL_RE = re.compile(r"^(?:[RB]{1,2}:)?(?:SIG)?(?:[A-Z][A-Z0-9]*|\d+)(?:@\d+)?$")
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
PARTITION_RE = re.compile(r"^[A-Za-z0-9_.-]+(?:,[A-Za-z0-9_.-]+)*$")
VERSION_RE = re.compile(r"^v?\d+(?:\.\d+)*(?:[-+][A-Za-z0-9.]+)?$")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
SBATCH_OPTION_RE = re.compile(r"^--[a-z][a-z0-9-]*$")


def validate_job(spec: JobSpec) -> list[Finding]:
    """Check a job spec's values; every finding names the field, the problem and a fix."""
    return JOB_RULES.check(spec)


def _error(path: str, message: str, fix: str, value: object = None) -> Finding:
    return Finding(Level.ERROR, path, message, fix, value)


def _warning(path: str, message: str, fix: str, value: object = None) -> Finding:
    return Finding(Level.WARNING, path, message, fix, value)


def _choice(path: str, value: str, choices: tuple[str, ...]) -> Iterator[Finding]:
    if value not in choices:
        guess = difflib.get_close_matches(value, choices, n=1)
        yield _error(path, f"must be one of {', '.join(choices)}",
                     f"did you mean {guess[0]!r}?" if guess else f"use one of: {', '.join(choices)}", value)


@rule
def directive_values(spec: JobSpec) -> Iterator[Finding]:
    """Values that go into #SBATCH lines: sbatch reads one line per directive."""
    values = {"name": spec.name, "partition": spec.partition, "time": spec.time, "signal": spec.signal,
              "logs.output": spec.logs.output, "logs.error": spec.logs.error, "workdir": spec.workdir}
    for path, value in values.items():
        if value is not None and CONTROL_RE.search(value):
            yield _error(path, "contains a line break or control character; it goes into an #SBATCH line",
                         "remove control characters", value)


@rule
def name(spec: JobSpec) -> Iterator[Finding]:
    if not spec.name:
        yield _error("name", "is empty", "name the job")
    elif "/" in spec.name and "%x" in spec.logs.output + (spec.logs.error or ""):
        yield _warning("name", "contains '/', and the log path uses the job name (%x)",
                       "use a name without '/' or a log path without %x", spec.name)


@rule
def nodes(spec: JobSpec) -> Iterator[Finding]:
    if spec.nodes < 1:
        yield _error("nodes", "must be at least 1", "write a number >= 1", spec.nodes)


@rule
def names_of_things(spec: JobSpec) -> Iterator[Finding]:
    if spec.cluster is not None and not CLUSTER_NAME_RE.match(spec.cluster):
        yield _error("cluster", "is not a clusterkit cluster name", "letters, digits and '-', starting with a letter",
                     spec.cluster)
    if spec.partition is not None and not PARTITION_RE.match(spec.partition):
        yield _error("partition", "is not a Slurm partition name", "use letters, digits, '_', '.', '-'",
                     spec.partition)
    if spec.run_id is not None and not RUN_ID_RE.match(spec.run_id):
        yield _error("run_id", "may hold only letters, digits, '.', '_' and '-'", "pick a simpler run id", spec.run_id)


@rule
def time_and_signal(spec: JobSpec) -> Iterator[Finding]:
    if spec.time is not None and (not TIME_RE.match(spec.time) or not spec.time.strip("0:-")):
        yield _error("time", "is not a Slurm time limit", f"write {TIME_HINT}", spec.time)
    if spec.signal is not None and not SIGNAL_RE.match(spec.signal):
        yield _error("signal", "is not a Slurm --signal value", "write e.g. USR1@120 (signal 120 s before the limit)",
                     spec.signal)


@rule
def restarts(spec: JobSpec) -> Iterator[Finding]:
    if spec.max_restarts is not None and spec.max_restarts < 0:
        yield _error("max_restarts", "must be 0 or more", "write a number >= 0", spec.max_restarts)
    if spec.max_restarts and not spec.requeue:
        yield _warning("max_restarts", "a restart budget with requeue off: Slurm will not requeue after a node "
                       "failure", "set requeue: true")
    if spec.supervise is not None:
        if spec.supervise.hang_timeout < 0:
            yield _error("supervise.hang_timeout", "must be 0 (off) or more seconds", "write e.g. 600",
                         spec.supervise.hang_timeout)
        if spec.supervise.app_retries < 0:
            yield _error("supervise.app_retries", "must be 0 or more", "write e.g. 1", spec.supervise.app_retries)


@rule
def directories(spec: JobSpec) -> Iterator[Finding]:
    for path, value in (("workdir", spec.workdir), ("checkpoint_dir", spec.checkpoint_dir)):
        if value is not None and not value:
            yield _error(path, "is empty", "write a path or leave the field out")
    if spec.checkpoint_dir and not spec.checkpoint_dir.startswith("/"):
        yield _warning("checkpoint_dir", "is relative; every node must resolve it to the same shared directory",
                       "use an absolute path on shared storage, e.g. /fsx/checkpoints/RUN", spec.checkpoint_dir)


@rule
def logs(spec: JobSpec) -> Iterator[Finding]:
    for path, value in (("logs.output", spec.logs.output), ("logs.error", spec.logs.error)):
        if value is None:
            continue
        if not value:
            yield _error(path, "is empty", f"write a path such as {DEFAULT_OUTPUT}")
        elif "%j" not in value and "%J" not in value and "%A" not in value:
            yield _warning(path, "has no job id (%j): different jobs would append to one file",
                           f"use a pattern such as {DEFAULT_OUTPUT}", value)


@rule
def resources(spec: JobSpec) -> Iterator[Finding]:
    facts = spec.instance_facts
    if spec.instance is not None and facts is None:
        yield _error("instance", "is not in the instance catalog", "use a preset such as p4de or an instance type",
                     spec.instance)
        return
    if spec.gpus_per_node is not None:
        if spec.gpus_per_node < 1:
            yield _error("gpus_per_node", "must be at least 1", "write a number >= 1, or leave it out",
                         spec.gpus_per_node)
        elif facts is not None and facts.accelerator != "gpu":
            yield _error("gpus_per_node", f"{facts.name} has no GPUs", "remove gpus_per_node", spec.gpus_per_node)
        elif facts is not None and spec.gpus_per_node > facts.accelerator_count:
            yield _error("gpus_per_node", f"{facts.name} has {facts.accelerator_count} GPUs",
                         f"ask for at most {facts.accelerator_count}", spec.gpus_per_node)
        elif facts is not None:
            yield _warning("gpus_per_node", "--gpus-per-node breaks HyperPod auto-resume and is not needed on "
                           "ParallelCluster, where a job gets whole nodes", "remove gpus_per_node", spec.gpus_per_node)
    if spec.processes_per_node is not None and spec.processes_per_node < 1:
        yield _error("processes_per_node", "must be at least 1", "write a number >= 1", spec.processes_per_node)
    elif facts is not None and facts.accelerator != "none" and spec.processes > facts.processes_per_node:
        yield _warning("processes_per_node", f"more processes than {facts.name} has GPUs or NeuronCores "
                       f"({facts.processes_per_node})", "use one process per accelerator", spec.processes)
    if facts is not None and facts.accelerator != "none" and spec.nodes > 1 and not spec.exclusive:
        yield _warning("exclusive", "multi-node training on nodes other jobs may share", "set exclusive: true")


@rule
def container(spec: JobSpec) -> Iterator[Finding]:
    container = spec.container
    if container.runtime not in RUNTIMES:
        yield from _choice("container.runtime", container.runtime, RUNTIMES)
        return
    if container.runtime == "none":
        if container.image:
            yield _error("container.image", "an image with runtime none would be ignored",
                         "set container.runtime to pyxis, docker or apptainer", container.image)
        if container.mounts or container.workdir:
            yield _warning("container", "mounts and workdir are ignored without a container runtime",
                           "remove them or set container.runtime")
        return
    image = container.image
    if not image:
        yield _error("container.image", f"is required with runtime {container.runtime}",
                     "name an image (registry reference) or a .sqsh file on shared storage")
    elif CONTROL_RE.search(image) or " " in image:
        yield _error("container.image", "contains spaces or control characters", "check the image reference", image)
    elif image.endswith(".sqsh"):
        if container.runtime != "pyxis":
            yield _error("container.image", f"a .sqsh file is an enroot image; {container.runtime} cannot run it",
                         "use runtime pyxis, or a registry reference", image)
        elif not image.startswith("/"):
            yield _error("container.image", "a .sqsh path must be absolute (on storage every node sees)",
                         "e.g. /fsx/images/train.sqsh", image)
    workdir = container.workdir or spec.workdir
    if workdir and not workdir.startswith("/"):
        yield _error("container.workdir" if container.workdir else "workdir",
                     "a working directory inside a container must be absolute", "use an absolute path", workdir)
    for index, mount in enumerate(container.mounts):
        path = f"container.mounts[{index}]"
        for side in (mount.source, mount.target):
            if not side.startswith("/"):
                yield _error(path, "mount paths must be absolute", "e.g. /fsx:/fsx", side)
            elif any(char in side for char in ",:") or CONTROL_RE.search(side):
                yield _error(path, "mount paths cannot contain ',', ':' or control characters", "rename the path",
                             side)


@rule
def launcher(spec: JobSpec) -> Iterator[Finding]:
    launcher = spec.launcher
    facts = spec.instance_facts
    if launcher.kind not in LAUNCHERS:
        yield from _choice("launcher.type", launcher.kind, LAUNCHERS)
        return
    if not 1 <= launcher.port <= 65535:
        yield _error("launcher.port", "is not a TCP port", "use a port between 1024 and 65535", launcher.port)
    if launcher.kind == "neuron":
        if facts is None or facts.accelerator != "neuron":
            yield _error("launcher.type", "the neuron launcher needs a Trainium instance",
                         "set instance: trn1 (or trn1n), or use launcher torchrun", spec.instance or CPU_INSTANCE)
        if not launcher.compile_cache.startswith("/") or CONTROL_RE.search(launcher.compile_cache):
            yield _error("launcher.compile_cache", "must be an absolute path on shared storage",
                         f"e.g. {DEFAULT_NEURON_CACHE_DIR}", launcher.compile_cache)
    elif facts is not None and facts.accelerator == "neuron" and launcher.kind == "torchrun":
        yield _warning("launcher.type", "torchrun on Trainium without a compile pass compiles graphs during training",
                       "use launcher: neuron")
    if launcher.kind == "mpi" and spec.container.runtime == "docker":
        yield _warning("launcher.type", "MPI (PMIx) tasks inside docker cannot reach Slurm's PMIx server by default",
                       "use container.runtime pyxis for MPI jobs")


@rule
def environment(spec: JobSpec) -> Iterator[Finding]:
    for key, value in spec.env.items():
        path = f"env.{key}"
        if not ENV_NAME_RE.match(key):
            yield _error(path, "is not a valid environment variable name",
                         "use letters, digits and '_', not starting with a digit", key)
        elif key.startswith("RDMAV_"):
            yield _warning(path, "RDMAV_* settings are not needed with current EFA software and can break it",
                           f"remove {key}")


@rule
def stack_versions(spec: JobSpec) -> Iterator[Finding]:
    for key in ("aws_ofi_nccl", "libfabric"):
        version = getattr(spec.stack, key)
        if version is not None and not VERSION_RE.fullmatch(version):
            yield _error(f"stack.{key}", "is not a version number", "write e.g. 1.13.2 (or 1.7.4-aws)", version)


@rule
def sbatch_options(spec: JobSpec) -> Iterator[Finding]:
    for index, directive in enumerate(spec.sbatch):
        path = f"sbatch[{index}]"
        option = directive.split("=", 1)[0]
        if not SBATCH_OPTION_RE.match(option):
            yield _error(path, "is not a long sbatch option", "write e.g. --account=ml", directive)
        elif option[2:] in MANAGED_DIRECTIVES:
            yield _error(path, f"{option} is set by the job spec",
                         f"set `{MANAGED_DIRECTIVES[option[2:]]}` instead", directive)
        elif CONTROL_RE.search(directive):
            yield _error(path, "contains a line break or control character", "remove it", directive)

"""A job spec: what to run, on which nodes, in which container, launched how.

Plain dataclasses that know nothing of Slurm (rendering to sbatch lives in `render.py`). Loading
from YAML or a dict keeps the path of every field, so an error names `container.runtime` or
`env.FOO` together with the bad value and a fix. Loading checks shapes and types; `validate_job`
checks values and returns findings. yaml is imported only when YAML text is parsed.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

from clusterkit.catalog import INSTANCE_TYPES, PRESET_INSTANCE_TYPES, InstanceType, find_instance_type
from clusterkit.errors import ClusterkitError
from clusterkit.files import read_text
from clusterkit.findings import Finding, Level
from clusterkit.registry import CLUSTER_NAME_RE

# Nodes without accelerators, such as the local Slurm cluster.
CPU_INSTANCE = "local"

RUNTIMES = ("pyxis", "docker", "apptainer", "none")
LAUNCHERS = ("torchrun", "neuron", "mpi", "srun")

DEFAULT_OUTPUT = "logs/%x_%j.out"
DEFAULT_RDZV_PORT = 29500
DEFAULT_NEURON_CACHE_DIR = "/fsx/neuron_compile_cache"

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


class JobSpecError(ClusterkitError):
    """A job spec that cannot be loaded; `path` is the field, e.g. `container.runtime`."""

    def __init__(self, path: str, message: str, value: object = None, *, fix: str | None = None) -> None:
        shown = "" if value is None else f" (got {_short_repr(value)})"
        super().__init__(f"{path}: {message}{shown}", fix=fix)
        self.path = path
        self.value = value


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class Container:
    runtime: str = "none"
    image: str | None = None  # registry reference, or a .sqsh file on shared storage (pyxis)
    mounts: tuple[Mount, ...] = ()
    workdir: str | None = None  # inside the container; defaults to the job's workdir


@dataclass(frozen=True)
class Command:
    """What each task runs: a Python file (`.py`, run by torchrun or python) or an executable."""

    script: str
    args: tuple[str, ...] = ()

    @property
    def is_python(self) -> bool:
        return self.script.endswith(".py")


@dataclass(frozen=True)
class Launcher:
    kind: str = "torchrun"  # one of LAUNCHERS; `type` in YAML
    port: int = DEFAULT_RDZV_PORT  # torchrun c10d rendezvous port
    compile: bool = True  # neuron: run a neuron_parallel_compile pass before training
    compile_args: tuple[str, ...] = ()  # neuron: extra arguments for the compile pass only
    compile_cache: str = DEFAULT_NEURON_CACHE_DIR  # neuron: compiler cache on shared storage


@dataclass(frozen=True)
class Logs:
    # One file per job id, appended to across requeues (no restart count in the name).
    output: str = DEFAULT_OUTPUT
    error: str | None = None  # None: stderr goes to the output file


@dataclass(frozen=True)
class StackVersions:
    """Library versions in the image; they gate the EFA settings. None: assume current ones."""

    aws_ofi_nccl: str | None = None
    libfabric: str | None = None


@dataclass(frozen=True)
class Supervision:
    """Run the step under clusterkit's supervisor (clusterkit.resilience.supervisor) in the job."""

    hang_timeout: int = 0  # seconds without heartbeat progress that count as a hang; 0: off
    app_retries: int = 1  # step retries when every node is healthy but the step fails
    python: str = "python3"  # an interpreter with clusterkit, on the nodes (bare, not in the container)


@dataclass(frozen=True)
class JobSpec:
    name: str
    command: Command
    nodes: int = 1
    cluster: str | None = None  # a clusterkit cluster name
    partition: str | None = None
    instance: str | None = None  # EC2 instance type; None for CPU nodes (the local cluster)
    gpus_per_node: int | None = None  # renders --gpus-per-node; only when asked for
    processes_per_node: int | None = None  # default: one per GPU or NeuronCore, else one
    container: Container = field(default_factory=Container)
    workdir: str | None = None
    launcher: Launcher = field(default_factory=Launcher)
    env: dict[str, str] = field(default_factory=dict)
    time: str | None = None  # Slurm time limit, e.g. "48:00:00" or "2-00:00:00"
    exclusive: bool = False
    requeue: bool = True
    signal: str | None = None  # e.g. "USR1@120": a signal this many seconds before the time limit
    logs: Logs = field(default_factory=Logs)
    checkpoint_dir: str | None = None
    run_id: str | None = None
    max_restarts: int | None = None
    stack: StackVersions = field(default_factory=StackVersions)
    supervise: Supervision | None = None
    sbatch: tuple[str, ...] = ()  # extra directives, e.g. "--account=ml"

    @property
    def instance_facts(self) -> InstanceType | None:
        return find_instance_type(self.instance) if self.instance else None

    @property
    def processes(self) -> int:
        """Processes per node: the override, else requested GPUs, else one per accelerator core."""
        if self.processes_per_node:
            return self.processes_per_node
        if self.gpus_per_node:
            return self.gpus_per_node
        facts = self.instance_facts
        return facts.processes_per_node if facts else 1


# ---------------------------------------------------------------------------------------------
# Loading


def load_job(path: str | PathLike[str]) -> JobSpec:
    """Load a job spec from a YAML file."""
    return job_from_yaml(read_text(path, "job spec (YAML)"), origin=str(path))


def job_from_yaml(text: str, origin: str = "<job spec>") -> JobSpec:
    """Parse YAML text into a job spec."""
    import yaml

    try:
        data = yaml.load(text, Loader=_spec_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        raise ClusterkitError(f"{origin} is not valid YAML: {_one_line(str(error))}",
                              fix="check indentation and quoting at the position shown") from None
    except RecursionError:
        raise ClusterkitError(f"{origin} is nested too deeply", fix="write a flat job spec") from None
    return job_from_dict(data)


def job_from_dict(data: Any) -> JobSpec:
    """Build a job spec from plain data (as YAML would give), naming the field on any error."""
    top = _Section(data, "")
    spec = JobSpec(
        name=top.string("name", required=True),
        command=_command(top.take("command"), "command"),
        nodes=top.integer("nodes", minimum=1, default=1),
        cluster=top.string("cluster"),
        partition=top.string("partition"),
        instance=_instance(top.take("instance"), "instance"),
        gpus_per_node=top.integer("gpus_per_node", minimum=1),
        processes_per_node=top.integer("processes_per_node", minimum=1),
        container=_container(top.take("container"), "container"),
        workdir=top.string("workdir"),
        launcher=_launcher(top.take("launcher"), "launcher"),
        env=_env(top.take("env"), "env"),
        time=_time(top.take("time"), "time"),
        exclusive=top.boolean("exclusive", default=False),
        requeue=top.boolean("requeue", default=True),
        signal=top.string("signal"),
        logs=_logs(top.take("logs"), "logs"),
        checkpoint_dir=top.string("checkpoint_dir"),
        run_id=top.string("run_id"),
        max_restarts=top.integer("max_restarts", minimum=0),
        stack=_stack(top.take("stack"), "stack"),
        supervise=_supervise(top.take("supervise"), "supervise"),
        sbatch=_sbatch(top.take("sbatch"), "sbatch"),
    )
    top.reject_unknown()
    return spec


_MISSING = object()


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Section:
    """One mapping of the spec: fields are taken one by one; what is left over is unknown."""

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, Mapping):
            raise JobSpecError(path or "job spec", "expected a mapping of fields", data,
                               fix="write `field: value` lines" + (" under " + path if path else ""))
        for key in data:
            if not isinstance(key, str):
                raise JobSpecError(path or "job spec", "field names must be strings", key,
                                   fix="quote the field name or remove it")
        self.data = dict(data)
        self.path = path
        self.taken: set[str] = set()

    def take(self, key: str) -> Any:
        self.taken.add(key)
        value = self.data.get(key)
        return _MISSING if value is None else value

    def string(self, key: str, *, required: bool = False) -> str | None:
        value = self.take(key)
        if value is _MISSING:
            if required:
                raise JobSpecError(_join(self.path, key), "is required", fix=f"add `{key}: ...`")
            return None
        return _string(value, _join(self.path, key))

    def integer(self, key: str, *, minimum: int, default: int | None = None) -> int | None:
        value = self.take(key)
        return default if value is _MISSING else _integer(value, _join(self.path, key), minimum)

    def boolean(self, key: str, *, default: bool) -> bool:
        value = self.take(key)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            raise JobSpecError(_join(self.path, key), "expected true or false", value,
                               fix=f"write `{key}: true` or `{key}: false`")
        return value

    def reject_unknown(self) -> None:
        known = sorted(self.taken)
        for key in self.data:
            if key not in self.taken:
                guess = difflib.get_close_matches(key, known, n=1)
                fix = f"did you mean {guess[0]!r}?" if guess else f"known fields: {', '.join(known)}"
                raise JobSpecError(_join(self.path, key), "unknown field", fix=fix)


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise JobSpecError(path, "expected a string", value, fix="quote the value")
    if "\x00" in value:
        raise JobSpecError(path, "contains a NUL byte, which no program argument can carry", value,
                           fix="remove the NUL byte")
    return value


def _integer(value: Any, path: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobSpecError(path, "expected a whole number", value, fix=f"write a number >= {minimum}")
    if value < minimum:
        raise JobSpecError(path, f"must be at least {minimum}", value, fix=f"write a number >= {minimum}")
    return value


def _strings(value: Any, path: str) -> tuple[str, ...]:
    if isinstance(value, (str, Mapping)) or not isinstance(value, (list, tuple)):
        raise JobSpecError(path, "expected a list of strings", value, fix="write `[a, b, ...]`")
    return tuple(_argument(item, f"{path}[{index}]") for index, item in enumerate(value))


def _argument(value: Any, path: str) -> str:
    """A command-line word: numbers are accepted and written as YAML shows them."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise JobSpecError(path, "expected a string or a number", value, fix="quote the value")
    return _string(value if isinstance(value, str) else str(value), path)


def _command(value: Any, path: str) -> Command:
    if value is _MISSING:
        raise JobSpecError(path, "is required", fix="add `command: [script.py, --arg, value]`")
    if isinstance(value, (list, tuple)) and not isinstance(value, str):
        words = _strings(value, path)
        if not words:
            raise JobSpecError(path, "is empty", fix="name the script to run: `command: [train.py]`")
        return Command(script=words[0], args=words[1:])
    if isinstance(value, str):
        raise JobSpecError(path, "expected a list or a mapping, not one string", value,
                           fix="split the command into words: `command: [train.py, --epochs, '3']`")
    section = _Section(value, path)
    script = section.string("script", required=True)
    args = section.take("args")
    command = Command(script=script or "", args=() if args is _MISSING else _strings(args, f"{path}.args"))
    section.reject_unknown()
    if not command.script:
        raise JobSpecError(f"{path}.script", "is empty", fix="name the script to run")
    return command


def _instance(value: Any, path: str) -> str | None:
    if value is _MISSING:
        return None
    name = _string(value, path)
    if name == CPU_INSTANCE:
        return None
    if name in PRESET_INSTANCE_TYPES:
        return PRESET_INSTANCE_TYPES[name]
    if name in INSTANCE_TYPES:
        return name
    choices = [CPU_INSTANCE, *PRESET_INSTANCE_TYPES, *INSTANCE_TYPES]
    guess = difflib.get_close_matches(name, choices, n=1)
    fix = f"did you mean {guess[0]!r}?" if guess else f"use {CPU_INSTANCE!r}, a preset ({', '.join(PRESET_INSTANCE_TYPES)}) or an instance type"
    raise JobSpecError(path, "unknown instance type or preset", name, fix=fix)


def _choice(value: Any, path: str, choices: tuple[str, ...]) -> str:
    text = _string(value, path)
    if text not in choices:
        guess = difflib.get_close_matches(text, choices, n=1)
        fix = f"did you mean {guess[0]!r}?" if guess else f"use one of: {', '.join(choices)}"
        raise JobSpecError(path, f"must be one of {', '.join(choices)}", text, fix=fix)
    return text


def _container(value: Any, path: str) -> Container:
    if value is _MISSING:
        return Container()
    section = _Section(value, path)
    runtime = section.take("runtime")
    mounts = section.take("mounts")
    container = Container(
        runtime="none" if runtime is _MISSING else _choice(runtime, f"{path}.runtime", RUNTIMES),
        image=section.string("image"),
        mounts=() if mounts is _MISSING else _mounts(mounts, f"{path}.mounts"),
        workdir=section.string("workdir"),
    )
    section.reject_unknown()
    return container


def _mounts(value: Any, path: str) -> tuple[Mount, ...]:
    if isinstance(value, (str, Mapping)) or not isinstance(value, (list, tuple)):
        raise JobSpecError(path, "expected a list of mounts", value, fix="write `[/fsx, /data:/data:ro]`")
    return tuple(_mount(item, f"{path}[{index}]") for index, item in enumerate(value))


def _mount(value: Any, path: str) -> Mount:
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) > 3 or not all(parts[:2]) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            raise JobSpecError(path, "expected SOURCE[:TARGET[:ro]]", value, fix="e.g. /fsx or /data:/data:ro")
        target = parts[1] if len(parts) > 1 else parts[0]
        return Mount(source=parts[0], target=target, read_only=len(parts) == 3 and parts[2] == "ro")
    section = _Section(value, path)
    source = section.string("source", required=True) or ""
    mount = Mount(source=source, target=section.string("target") or source,
                  read_only=section.boolean("read_only", default=False))
    section.reject_unknown()
    return mount


def _launcher(value: Any, path: str) -> Launcher:
    if value is _MISSING:
        return Launcher()
    if isinstance(value, str):
        return Launcher(kind=_choice(value, path, LAUNCHERS))
    section = _Section(value, path)
    kind = section.take("type")
    compile_args = section.take("compile_args")
    launcher = Launcher(
        kind="torchrun" if kind is _MISSING else _choice(kind, f"{path}.type", LAUNCHERS),
        port=section.integer("port", minimum=1, default=DEFAULT_RDZV_PORT) or DEFAULT_RDZV_PORT,
        compile=section.boolean("compile", default=True),
        compile_args=() if compile_args is _MISSING else _strings(compile_args, f"{path}.compile_args"),
        compile_cache=_default(section.string("compile_cache"), DEFAULT_NEURON_CACHE_DIR),
    )
    section.reject_unknown()
    return launcher


def _supervise(value: Any, path: str) -> Supervision | None:
    """`supervise: true`, or a mapping of the supervisor's settings."""
    if value is _MISSING or value is False:
        return None
    if value is True:
        return Supervision()
    section = _Section(value, path)
    supervision = Supervision(
        hang_timeout=section.integer("hang_timeout", minimum=0, default=0) or 0,
        app_retries=section.integer("app_retries", minimum=0, default=1) or 0,
        python=_default(section.string("python"), "python3"),
    )
    section.reject_unknown()
    return supervision


def _env(value: Any, path: str) -> dict[str, str]:
    if value is _MISSING:
        return {}
    section = _Section(value, path)
    env: dict[str, str] = {}
    for name, item in section.data.items():
        key_path = _join(path, name)
        if not ENV_NAME_RE.match(name):
            raise JobSpecError(key_path, "is not a valid environment variable name", name,
                               fix="use letters, digits and '_', not starting with a digit")
        if isinstance(item, bool):
            raise JobSpecError(key_path, "is a YAML boolean; environment values are strings", item,
                               fix=f"quote it: {name}: \"1\" or \"true\"")
        if item is None:
            raise JobSpecError(key_path, "has no value", fix=f"write {name}: \"\" for an empty value")
        env[name] = _argument(item, key_path)
    return env


def _time(value: Any, path: str) -> str | None:
    if value is _MISSING:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(_integer(value, path, 1))  # minutes
    return _string(value, path)


def _logs(value: Any, path: str) -> Logs:
    if value is _MISSING:
        return Logs()
    section = _Section(value, path)
    logs = Logs(output=_default(section.string("output"), DEFAULT_OUTPUT), error=section.string("error"))
    section.reject_unknown()
    return logs


def _stack(value: Any, path: str) -> StackVersions:
    if value is _MISSING:
        return StackVersions()
    section = _Section(value, path)
    versions = {}
    for key in ("aws_ofi_nccl", "libfabric"):
        item = section.take(key)
        # YAML reads 1.18 as a float; a version is text.
        versions[key] = None if item is _MISSING else _argument(item, _join(path, key))
    section.reject_unknown()
    return StackVersions(**versions)


def _sbatch(value: Any, path: str) -> tuple[str, ...]:
    if value is _MISSING:
        return ()
    if isinstance(value, Mapping):
        section = _Section(value, path)
        directives = []
        for key, item in section.data.items():
            if item is True:
                directives.append(f"--{key}")
            else:
                directives.append(f"--{key}={_argument(item, _join(path, key))}")
        return tuple(directives)
    return _strings(value, path)


# ---------------------------------------------------------------------------------------------
# Validation

# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (and UNLIMITED).
TIME_RE = re.compile(r"^(?:\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(?::\d{1,2}){0,2}|UNLIMITED|INFINITE)$")
TIME_HINT = "a Slurm time such as 90 (minutes), 04:00:00 or 2-00:00:00"
SIGNAL_RE = re.compile(r"^(?:[RB]{1,2}:)?(?:SIG)?(?:[A-Z][A-Z0-9]*|\d+)(?:@\d+)?$")
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
PARTITION_RE = re.compile(r"^[A-Za-z0-9_.-]+(?:,[A-Za-z0-9_.-]+)*$")
VERSION_RE = re.compile(r"^\d+(?:\.\d+)*")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


# Adds one finding: (path, message, fix, value).
Report = Callable[..., None]


def validate_job(spec: JobSpec) -> list[Finding]:
    """Check a job spec's values; every finding names the field, the problem and a fix."""
    findings: list[Finding] = []

    def error(path: str, message: str, fix: str, value: object = None) -> None:
        findings.append(Finding(Level.ERROR, path, message, fix, value))

    def warning(path: str, message: str, fix: str, value: object = None) -> None:
        findings.append(Finding(Level.WARNING, path, message, fix, value))

    # Values that go into #SBATCH lines: sbatch reads one line per directive.
    directive_values = {"name": spec.name, "partition": spec.partition, "time": spec.time,
                        "signal": spec.signal, "logs.output": spec.logs.output, "logs.error": spec.logs.error,
                        "workdir": spec.workdir}
    for path, value in directive_values.items():
        if value is not None and CONTROL_RE.search(value):
            error(path, "contains a line break or control character; it goes into an #SBATCH line",
                  "remove control characters", value)
    if not spec.name:
        error("name", "is empty", "name the job")
    elif "/" in spec.name and "%x" in spec.logs.output + (spec.logs.error or ""):
        warning("name", "contains '/', and the log path uses the job name (%x)",
                "use a name without '/' or a log path without %x", spec.name)
    if spec.nodes < 1:
        error("nodes", "must be at least 1", "ask for one node or more", spec.nodes)
    if spec.cluster is not None and not CLUSTER_NAME_RE.match(spec.cluster):
        error("cluster", "is not a clusterkit cluster name", "letters, digits and '-', starting with a letter",
              spec.cluster)
    if spec.partition is not None and not PARTITION_RE.match(spec.partition):
        error("partition", "is not a Slurm partition name", "use letters, digits, '_', '.', '-'", spec.partition)
    if spec.time is not None and not TIME_RE.match(spec.time):
        error("time", "is not a Slurm time limit", f"write {TIME_HINT}", spec.time)
    if spec.signal is not None and not SIGNAL_RE.match(spec.signal):
        error("signal", "is not a Slurm --signal value", "write e.g. USR1@120 (signal 120 s before the limit)",
              spec.signal)
    if spec.run_id is not None and not RUN_ID_RE.match(spec.run_id):
        error("run_id", "may hold only letters, digits, '.', '_' and '-'", "pick a simpler run id", spec.run_id)
    if spec.max_restarts is not None and spec.max_restarts < 0:
        error("max_restarts", "must be 0 or more", "write a number >= 0", spec.max_restarts)
    if spec.max_restarts and not spec.requeue:
        warning("max_restarts", "a restart budget with requeue off: Slurm will not requeue after a node failure",
                "set requeue: true")
    for path, value in (("workdir", spec.workdir), ("checkpoint_dir", spec.checkpoint_dir)):
        if value is not None and not value:
            error(path, "is empty", "write a path or leave the field out")
    if spec.checkpoint_dir and not spec.checkpoint_dir.startswith("/"):
        warning("checkpoint_dir", "is relative; every node must resolve it to the same shared directory",
                "use an absolute path on shared storage, e.g. /fsx/checkpoints/RUN", spec.checkpoint_dir)
    _validate_logs(spec, error, warning)
    _validate_resources(spec, error, warning)
    _validate_container(spec, error, warning)
    _validate_launcher(spec, error, warning)
    _validate_env(spec, error, warning)
    _validate_sbatch(spec, error)
    return findings


def _validate_logs(spec: JobSpec, error: Report, warning: Report) -> None:
    for path, value in (("logs.output", spec.logs.output), ("logs.error", spec.logs.error)):
        if value is None:
            continue
        if not value:
            error(path, "is empty", f"write a path such as {DEFAULT_OUTPUT}")
        elif "%j" not in value and "%J" not in value and "%A" not in value:
            warning(path, "has no job id (%j): different jobs would append to one file",
                    f"use a pattern such as {DEFAULT_OUTPUT}", value)


def _validate_resources(spec: JobSpec, error: Report, warning: Report) -> None:
    facts = spec.instance_facts
    if spec.instance is not None and facts is None:
        error("instance", "is not in the instance catalog", "use a preset such as p4de or an instance type",
              spec.instance)
        return
    if spec.gpus_per_node is not None:
        if facts is not None and facts.accelerator != "gpu":
            error("gpus_per_node", f"{facts.name} has no GPUs", "remove gpus_per_node", spec.gpus_per_node)
        elif facts is not None and spec.gpus_per_node > facts.accelerator_count:
            error("gpus_per_node", f"{facts.name} has {facts.accelerator_count} GPUs",
                  f"ask for at most {facts.accelerator_count}", spec.gpus_per_node)
        elif facts is not None:
            warning("gpus_per_node", "--gpus-per-node breaks HyperPod auto-resume and is not needed on "
                    "ParallelCluster, where a job gets whole nodes", "remove gpus_per_node", spec.gpus_per_node)
    if spec.processes_per_node is not None and spec.processes_per_node < 1:
        error("processes_per_node", "must be at least 1", "write a number >= 1", spec.processes_per_node)
    elif facts is not None and facts.accelerator != "none" and spec.processes > facts.processes_per_node:
        warning("processes_per_node", f"more processes than {facts.name} has GPUs or NeuronCores "
                f"({facts.processes_per_node})", "use one process per accelerator", spec.processes)
    if facts is not None and facts.accelerator != "none" and spec.nodes > 1 and not spec.exclusive:
        warning("exclusive", "multi-node training on nodes other jobs may share",
                "set exclusive: true")


def _validate_container(spec: JobSpec, error: Report, warning: Report) -> None:
    container = spec.container
    if container.runtime not in RUNTIMES:
        error("container.runtime", f"must be one of {', '.join(RUNTIMES)}", "pick a runtime", container.runtime)
        return
    if container.runtime == "none":
        if container.image:
            error("container.image", "an image with runtime none would be ignored",
                  "set container.runtime to pyxis, docker or apptainer", container.image)
        if container.mounts or container.workdir:
            warning("container", "mounts and workdir are ignored without a container runtime",
                    "remove them or set container.runtime")
        return
    image = container.image
    if not image:
        error("container.image", f"is required with runtime {container.runtime}",
              "name an image (registry reference) or a .sqsh file on shared storage")
    elif CONTROL_RE.search(image) or " " in image:
        error("container.image", "contains spaces or control characters", "check the image reference", image)
    elif image.endswith(".sqsh"):
        if container.runtime != "pyxis":
            error("container.image", f"a .sqsh file is an enroot image; {container.runtime} cannot run it",
                  "use runtime pyxis, or a registry reference", image)
        elif not image.startswith("/"):
            error("container.image", "a .sqsh path must be absolute (on storage every node sees)",
                  "e.g. /fsx/images/train.sqsh", image)
    workdir = container.workdir or spec.workdir
    if workdir and not workdir.startswith("/"):
        error("container.workdir" if container.workdir else "workdir",
              "a working directory inside a container must be absolute", "use an absolute path", workdir)
    for index, mount in enumerate(container.mounts):
        path = f"container.mounts[{index}]"
        for side in (mount.source, mount.target):
            if not side.startswith("/"):
                error(path, "mount paths must be absolute", "e.g. /fsx:/fsx", side)
            elif any(char in side for char in ",:") or CONTROL_RE.search(side):
                error(path, "mount paths cannot contain ',', ':' or control characters", "rename the path", side)


def _validate_launcher(spec: JobSpec, error: Report, warning: Report) -> None:
    launcher = spec.launcher
    facts = spec.instance_facts
    if launcher.kind not in LAUNCHERS:
        error("launcher.type", f"must be one of {', '.join(LAUNCHERS)}", "pick a launcher", launcher.kind)
        return
    if not 1 <= launcher.port <= 65535:
        error("launcher.port", "is not a TCP port", "use a port between 1024 and 65535", launcher.port)
    if launcher.kind == "neuron":
        if facts is None or facts.accelerator != "neuron":
            error("launcher.type", "the neuron launcher needs a Trainium instance",
                  "set instance: trn1 (or trn1n), or use launcher torchrun", spec.instance or CPU_INSTANCE)
        if not launcher.compile_cache.startswith("/") or CONTROL_RE.search(launcher.compile_cache):
            error("launcher.compile_cache", "must be an absolute path on shared storage",
                  f"e.g. {DEFAULT_NEURON_CACHE_DIR}", launcher.compile_cache)
    elif facts is not None and facts.accelerator == "neuron" and launcher.kind == "torchrun":
        warning("launcher.type", "torchrun on Trainium without a compile pass compiles graphs during training",
                "use launcher: neuron")
    if launcher.kind == "mpi" and spec.container.runtime == "docker":
        warning("launcher.type", "MPI (PMIx) tasks inside docker cannot reach Slurm's PMIx server by default",
                "use container.runtime pyxis for MPI jobs")


def _validate_env(spec: JobSpec, error: Report, warning: Report) -> None:
    for name, value in spec.env.items():
        path = f"env.{name}"
        if not ENV_NAME_RE.match(name):
            error(path, "is not a valid environment variable name", "use letters, digits and '_'", name)
        elif name.startswith("RDMAV_"):
            warning(path, "RDMAV_* settings are not needed with current EFA software and can break it",
                    f"remove {name}")
        if "\x00" in value:
            error(path, "contains a NUL byte", "remove it")
    for key in ("aws_ofi_nccl", "libfabric"):
        version = getattr(spec.stack, key)
        if version is not None and not VERSION_RE.match(version):
            error(f"stack.{key}", "is not a version number", "write e.g. 1.13.2", version)


def _validate_sbatch(spec: JobSpec, error: Report) -> None:
    for index, directive in enumerate(spec.sbatch):
        path = f"sbatch[{index}]"
        option = directive.split("=", 1)[0]
        if not re.match(r"^--[a-z][a-z0-9-]*$", option):
            error(path, "is not a long sbatch option", "write e.g. --account=ml", directive)
        elif option[2:] in MANAGED_DIRECTIVES:
            error(path, f"{option} is set by the job spec", f"set `{MANAGED_DIRECTIVES[option[2:]]}` instead",
                  directive)
        elif CONTROL_RE.search(directive):
            error(path, "contains a line break or control character", "remove it", directive)


# ---------------------------------------------------------------------------------------------
# Helpers


def _default(value: str | None, default: str) -> str:
    return default if value is None else value


def _short_repr(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(text: str) -> str:
    return " ".join(text.split())


@functools.lru_cache(maxsize=1)
def _spec_yaml_loader() -> type:
    """A SafeLoader without YAML 1.1's base-60 numbers (which read `04:00:00` as 14400)
    and octal ints, so times stay text and numbers are plain decimals."""
    import yaml

    int_tag, float_tag = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"

    class SpecLoader(yaml.SafeLoader):
        pass

    SpecLoader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in (int_tag, float_tag)]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    SpecLoader.add_implicit_resolver(int_tag, re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789"))
    SpecLoader.add_implicit_resolver(
        float_tag, re.compile(r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$"), list("-+.0123456789"))
    return SpecLoader

"""A job spec: what to run, on which nodes, in which container, launched how.

Plain dataclasses that know nothing of Slurm (rendering to sbatch lives in `render.py`, the rules
in `validators.py`). They are read by clusterkit's one spec reader, from YAML or plain data; the
short forms a person writes (`command: [train.py, --epochs, 3]`, `launcher: neuron`, a mount as
`/data:/data:ro`, `supervise: true`) are the reader hooks below.
"""

from __future__ import annotations

import shlex
from dataclasses import field
from os import PathLike
from typing import Any

from clusterkit import spec_reader
from clusterkit.catalog import INSTANCE_TYPES, PRESET_INSTANCE_TYPES, InstanceType, find_instance_type
from clusterkit.findings import similar_names
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.spec_reader import ValueProblem, field_options, is_mapping, items_of, text_of

# Nodes without accelerators, such as the local Slurm cluster.
CPU_INSTANCE = "local"

RUNTIMES = ("pyxis", "docker", "apptainer", "none")
LAUNCHERS = ("torchrun", "neuron", "mpi", "srun")

DEFAULT_OUTPUT = "logs/%x_%j.out"
DEFAULT_NEURON_CACHE_DIR = "/fsx/neuron_compile_cache"


# Slurm's warning before the time limit goes to the batch shell (B:), which must tell it apart from
# Slurm ending the job (TERM): only these signals may carry it. Linux numbers them 10 and 12.
WARNING_SIGNALS = {"USR1": "USR1", "SIGUSR1": "USR1", "10": "USR1", "USR2": "USR2", "SIGUSR2": "USR2", "12": "USR2"}
DEFAULT_WARNING_SECONDS = 60  # Slurm's default when --signal names no time


@lean_dataclass(frozen=True)
class TimeLimitWarning:
    """A parsed `signal: [R:]USR1[@SECONDS]`: sent to the batch shell SECONDS before the time limit."""

    signal: str  # USR1 or USR2
    seconds: int
    reservation: bool = False  # R: also before the end of a reservation

    @property
    def directive(self) -> str:
        """The --signal value: always B: (to the batch shell), which passes the request on."""
        return f"{'R' if self.reservation else ''}B:{self.signal}@{self.seconds}"


def parse_warning(value: str) -> TimeLimitWarning | None:
    """`USR1@120`, `B:SIGUSR1@120`, `R:USR2`, `10@90`...; None when it is not such a value."""
    flags, _, rest = value.rpartition(":")
    if flags and (len(flags) > 2 or set(flags) - {"B", "R"} or len(set(flags)) != len(flags)):
        return None
    name, has_time, seconds = rest.partition("@")
    signal = WARNING_SIGNALS.get(name)
    if signal is None or (has_time and not (seconds.isascii() and seconds.isdigit())):
        return None
    return TimeLimitWarning(signal, int(seconds) if has_time else DEFAULT_WARNING_SECONDS, "R" in flags)


# ----- short forms (reader hooks) -------------------------------------------------------------------


def _command_words(value: Any) -> Any:
    """`[train.py, --epochs, 3]` or `"train.py --epochs 3"` (split like a shell, never run by one)."""
    if is_mapping(value):
        return value
    words = items_of(value)
    if words is None:
        text = text_of(value)
        if text is None:
            raise ValueProblem("expected a list of words, a mapping or one line of text",
                               "write `command: [train.py, --epochs, '3']`")
        try:
            words = shlex.split(text)
        except ValueError as error:
            raise ValueProblem(f"cannot split the command into words: {error}",
                               "write it as a list: `command: [train.py, --epochs, '3']`") from None
    if not words:
        raise ValueProblem("is empty", "name the script to run: `command: [train.py]`")
    return {"script": words[0], "args": list(words[1:])}


def _launcher_kind(value: Any) -> Any:
    """`launcher: neuron` for `launcher: {type: neuron}`."""
    return {"type": value} if text_of(value) is not None else value


def _mount_text(value: Any) -> Any:
    """`/fsx` or `/data:/data:ro` (the syntax pyxis, docker and apptainer share)."""
    text = text_of(value)
    if text is None:
        return value
    parts = text.split(":")
    if len(parts) > 3 or not all(parts[:2]) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise ValueProblem("expected SOURCE[:TARGET[:ro]]", "e.g. /fsx or /data:/data:ro")
    return {"source": parts[0], "target": parts[1] if len(parts) > 1 else parts[0],
            "read_only": len(parts) == 3 and parts[2] == "ro"}


def _supervise_switch(value: Any) -> Any:
    """`supervise: true` for the supervisor's defaults; `false` for none."""
    if value is True or text_of(value) in ("true", "True", "TRUE"):
        return {}
    if value is False or text_of(value) in ("false", "False", "FALSE"):
        return None
    return value


def _sbatch_mapping(value: Any) -> Any:
    """`sbatch: {account: ml, exclusive: true}` for `sbatch: [--account=ml, --exclusive]`."""
    if not is_mapping(value):
        if items_of(value) is None:
            raise ValueProblem("expected a list of sbatch options", "write `[--account=ml, --qos=high]`")
        return value
    directives = []
    for key, item in spec_reader.plain_data(value).items():
        if item is True or item in ("true", "True", "TRUE"):
            directives.append(f"--{key}")
        elif isinstance(item, (list, dict)) or item is None:
            raise ValueProblem(f"option {key!r} needs one value", f"write `{key}: VALUE`")
        else:
            directives.append(f"--{key}={item}")
    return directives


def _instance_name(value: Any) -> Any:
    """A preset short name (p4de) or an EC2 instance type; `local` for CPU nodes."""
    name = text_of(value)
    if name is None:
        return value
    if name == CPU_INSTANCE:
        return None
    if name in PRESET_INSTANCE_TYPES:
        return PRESET_INSTANCE_TYPES[name]
    if name in INSTANCE_TYPES:
        return name
    choices = [CPU_INSTANCE, *PRESET_INSTANCE_TYPES, *INSTANCE_TYPES]
    guess = similar_names(name, choices)
    raise ValueProblem("unknown instance type or preset",
                       f"did you mean {guess[0]!r}?" if guess else
                       f"use {CPU_INSTANCE!r}, a preset ({', '.join(PRESET_INSTANCE_TYPES)}) or an instance type")


# ----- the spec -----------------------------------------------------------------------------------


@lean_dataclass(frozen=True)
class Mount:
    source: str
    target: str = ""  # default: the same path as the source
    read_only: bool = False

    def __post_init__(self) -> None:
        if not self.target:
            object.__setattr__(self, "target", self.source)


@lean_dataclass(frozen=True)
class Container:
    runtime: str = "none"  # one of RUNTIMES
    image: str | None = None  # registry reference, or a .sqsh file on shared storage (pyxis)
    mounts: tuple[Mount, ...] = ()
    workdir: str | None = None  # inside the container; defaults to the job's workdir


@lean_dataclass(frozen=True)
class Command:
    """What each task runs: a Python file (`.py`, run by torchrun or python) or an executable."""

    script: str
    args: tuple[str, ...] = field(default=(), metadata=field_options(multiline=True))

    @property
    def is_python(self) -> bool:
        return self.script.endswith(".py")


@lean_dataclass(frozen=True)
class Launcher:
    kind: str = field(default="torchrun", metadata=field_options(key="type"))  # one of LAUNCHERS
    # torchrun's c10d rendezvous port; None: derived from the job id and the cluster on the node, so
    # that two jobs sharing their first node never meet in one store (see render.py).
    port: int | None = None
    cpu_bind: str | None = None  # srun --cpu-bind, e.g. none (nccl-tests); None: the cluster's default
    compile: bool = True  # neuron: run a neuron_parallel_compile pass before training (first start only)
    # neuron: arguments for the compile pass; each option replaces the training argument of the same name
    compile_args: tuple[str, ...] = field(default=(), metadata=field_options(multiline=True))
    compile_cache: str = DEFAULT_NEURON_CACHE_DIR  # neuron: compiler cache on shared storage
    # Trainium2: physical NeuronCores per logical one (NEURON_LOGICAL_NC_CONFIG, 1 or 2), which sets the ranks
    # per node (trn2.48xlarge: 64 at 2, 128 at 1). None: the instance's default (2 on trn2).
    logical_nc_config: int | None = None


@lean_dataclass(frozen=True)
class Logs:
    # One file per job id, appended to across requeues (no restart count in the name).
    output: str = DEFAULT_OUTPUT
    error: str | None = None  # None: stderr goes to the output file


@lean_dataclass(frozen=True)
class StackVersions:
    """Library versions in the image (or on the nodes); they gate the EFA, NCCL and Neuron settings.
    None: assume current ones."""

    aws_ofi_nccl: str | None = None
    libfabric: str | None = None
    nccl: str | None = None
    efa_installer: str | None = None
    neuron: str | None = None  # the Neuron SDK release, e.g. 2.25


@lean_dataclass(frozen=True)
class Supervision:
    """Run the step under clusterkit's supervisor (clusterkit.resilience.supervisor) in the job."""

    hang_timeout: int = 0  # seconds without heartbeat progress that count as a hang; 0: off
    # Seconds from the step's start to its first heartbeat (imports, rendezvous, checkpoint load); 0: off.
    # None: with hang detection on, 30 minutes or 3 hang timeouts, whichever is longer.
    startup_timeout: int | None = None
    app_retries: int = 1  # step retries when every node is healthy but the step fails
    # An interpreter with clusterkit on the nodes (bare, not in the container). None: the cluster's own
    # (an AWS cluster's installed virtualenv, a local cluster's Python), python3 when planned without one.
    python: str | None = None
    # Requeues at the time limit (a long run crossing many limits) and after preemptions: bounded apart
    # from failures. None: the supervisor's defaults (100 time limits; preemptions without bound).
    max_time_limit_requeues: int | None = None
    max_preemptions: int | None = None
    # Nodes held beside the step's `nodes` (the allocation is nodes + spares, kept through a node loss): on a node
    # failure the supervisor relaunches the step on the healthy nodes and a spare, in the same allocation.
    spares: int = 0


@lean_dataclass(frozen=True)
class JobSpec:
    name: str
    command: Command
    nodes: int = 1
    cluster: str | None = None  # a clusterkit cluster name
    partition: str | None = None
    # EC2 instance type (a preset short name is resolved on reading); None: CPU nodes, or the type
    # of the cluster's partition, resolved when the job is planned.
    instance: str | None = field(default=None, metadata=field_options(short=_instance_name))
    gpus_per_node: int | None = None  # renders --gpus-per-node; only when asked for
    processes_per_node: int | None = None  # default: one per GPU or (logical) NeuronCore, else one
    container: Container = field(default_factory=Container)
    workdir: str | None = None
    launcher: Launcher = field(default_factory=Launcher)
    env: dict[str, str] = field(default_factory=dict, metadata=field_options(multiline=True))  # values, not names
    time: str | None = None  # Slurm time limit, e.g. "48:00:00" or "2-00:00:00"
    exclusive: bool = False
    requeue: bool = True
    signal: str | None = None  # e.g. "USR1@120": a signal this many seconds before the time limit
    logs: Logs = field(default_factory=Logs)
    checkpoint_dir: str | None = None
    # How often the training saves, in steps, or "auto" (chosen in the job from the save's measured cost, the step
    # time and the failure rate): CheckpointManager's checkpoint_every where the training passes none.
    checkpoint_every: str | None = None
    # The failure rate "auto" plans for, per GPU-hour. None: the cluster's own, from clusterkit's records of its
    # supervised runs (jobs.failure_history), where they hold enough hours; else Llama 3's.
    failures_per_gpu_hour: float | None = None
    run_id: str | None = None
    max_restarts: int | None = None
    stack: StackVersions = field(default_factory=StackVersions)
    supervise: Supervision | None = field(default=None, metadata=field_options(short=_supervise_switch))
    sbatch: tuple[str, ...] = field(default=(), metadata=field_options(short=_sbatch_mapping))  # e.g. --account=ml

    @property
    def instance_facts(self) -> InstanceType | None:
        return find_instance_type(self.instance) if self.instance else None

    @property
    def allocated_nodes(self) -> int:
        """The allocation's nodes: the step's, and the supervisor's spares beside them."""
        return self.nodes + (self.supervise.spares if self.supervise else 0)

    @property
    def processes(self) -> int:
        """Processes per node: the override, else requested GPUs, else one per accelerator core."""
        if self.processes_per_node:
            return self.processes_per_node
        if self.gpus_per_node:
            return self.gpus_per_node
        facts = self.instance_facts
        return facts.processes(self.launcher.logical_nc_config) if facts else 1


SHORT_FORMS = {Command: _command_words, Launcher: _launcher_kind, Mount: _mount_text}


# ----- reading --------------------------------------------------------------------------------------


def load_job(path: str | PathLike[str]) -> JobSpec:
    """Read a job spec file; every error at once in a SpecError."""
    return spec_reader.load_path(JobSpec, path, "job spec (YAML)", short_forms=SHORT_FORMS, rule_prefix="job")


def job_from_yaml(text: str, origin: str = "<job spec>") -> JobSpec:
    return job_from_data(spec_reader.parse_text(text, origin), origin)


def job_from_dict(data: Any) -> JobSpec:
    """A job spec from plain data (as YAML would give), naming every bad field."""
    return job_from_data(data, "job spec")


def job_from_data(data: Any, origin: str) -> JobSpec:
    return spec_reader.load_or_raise(JobSpec, data, source=origin, short_forms=SHORT_FORMS, rule_prefix="job")

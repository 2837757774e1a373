"""What the goodput simulator assumes: the failure mix, the costs of each path, the policies.

Every default is a named constant with its source: Meta's Llama 3 paper for the failure rate and mix,
ParallelCluster's Slurm settings and PyTorch's defaults for what Slurm alone sees, and clusterkit's own
benches (`bench/bench_recovery.py --timings parallelcluster`, `bench/bench_checkpoint.py --only async`)
for what clusterkit does. Costs that no bench measured at scale (restart at 16,384 GPUs, storage
bandwidth) are inputs with a stated assumption. docs/goodput.md explains the model.
"""

from __future__ import annotations

import math
from dataclasses import field, replace

from clusterkit.errors import ClusterkitError
from clusterkit.lean_dataclass import lean_dataclass

GIB = 2**30
GB = 10**9

# --- The failure rate: Llama 3 405B pre-training (Llama Team, "The Llama 3 Herd of Models", 2024, section
# 3.3.4): 466 interruptions in a 54-day snapshot on 16,384 H100s, 419 of them unexpected.
LLAMA3_GPUS = 16_384
LLAMA3_DAYS = 54
LLAMA3_UNEXPECTED_INTERRUPTIONS = 419
# 419 / (54 d x 24 h x 16,384 GPUs) = 419 / 21,233,664 GPU-hours = 1.97e-5 per GPU-hour: one every 3.09 h.
LLAMA3_FAILURES_PER_GPU_HOUR = LLAMA3_UNEXPECTED_INTERRUPTIONS / (LLAMA3_DAYS * 24 * LLAMA3_GPUS)
LLAMA3_REPORTED_GOODPUT = 0.90  # "> 90% effective training time", the same section

# How a fault shows itself, which decides who sees it and how fast.
NODE_LOSS = "node_loss"  # the node goes silent or down: seen by Slurm's timeouts, or by clusterkit's beacon
DEVICE = "device"  # a GPU fault (Xid, ECC): the rank crashes, the node answers, its health check fails
SOFTWARE = "software"  # the program crashes; the nodes are fine and the step can run again on them
HANG = "hang"  # ranks stop making progress with every process alive: only a watchdog sees it
MANIFESTATIONS: tuple[str, ...] = (NODE_LOSS, DEVICE, SOFTWARE, HANG)
REPLACES_NODE = {NODE_LOSS: True, DEVICE: True, SOFTWARE: False, HANG: False}


@lean_dataclass(frozen=True)
class FailureKind:
    """A row of Llama 3's table of root causes of unexpected interruptions (its Table 5)."""

    component: str
    count: int  # interruptions in the 54 days
    manifestation: str


# The paper's counts (they sum to 419; its percentage column does not match the counts, so the counts are
# used). The manifestation is our reading of each component: GPU parts crash their rank while the host
# answers; host parts, host maintenance and the network take the node out; watchdog timeouts are hangs.
LLAMA3_ROOT_CAUSES: tuple[FailureKind, ...] = (
    FailureKind("Faulty GPU", 148, DEVICE),
    FailureKind("GPU HBM3 memory", 72, DEVICE),
    FailureKind("Software bug", 54, SOFTWARE),
    FailureKind("Network switch/cable", 35, NODE_LOSS),
    FailureKind("Host maintenance", 32, NODE_LOSS),
    FailureKind("GPU SRAM memory", 19, DEVICE),
    FailureKind("GPU system processor", 17, DEVICE),
    FailureKind("NIC", 7, NODE_LOSS),
    FailureKind("NCCL watchdog timeouts", 7, HANG),
    FailureKind("Silent data corruption", 6, DEVICE),
    FailureKind("GPU thermal interface and sensor", 6, DEVICE),
    FailureKind("SSD", 3, NODE_LOSS),
    FailureKind("Power supply", 3, NODE_LOSS),
    FailureKind("Server chassis", 2, NODE_LOSS),
    FailureKind("IO expansion board", 2, NODE_LOSS),
    FailureKind("Dependency", 2, SOFTWARE),
    FailureKind("CPU", 2, NODE_LOSS),
    FailureKind("System memory", 2, NODE_LOSS),
)


def manifestation_mix(kinds: tuple[FailureKind, ...] = LLAMA3_ROOT_CAUSES) -> dict[str, float]:
    """The share of failures of each manifestation, in MANIFESTATIONS' order."""
    total = sum(kind.count for kind in kinds)
    return {m: sum(k.count for k in kinds if k.manifestation == m) / total for m in MANIFESTATIONS}


@lean_dataclass(frozen=True)
class Span:
    """A duration in seconds, drawn uniformly between low and high for each failure."""

    low: float
    high: float

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    def plus(self, seconds: float) -> Span:
        return Span(self.low + seconds, self.high + seconds)


# --- What Slurm alone sees, at ParallelCluster's timings (its cookbook's slurm.conf.erb; PyTorch's defaults).
SLURMD_TIMEOUT_S = 180.0  # ParallelCluster's SlurmdTimeout; slurmctld pings nodes every 60 s
SLURM_NODE_LOSS_DETECT = Span(SLURMD_TIMEOUT_S, SLURMD_TIMEOUT_S + 60.0)
NCCL_WATCHDOG_S = 600.0  # PyTorch's NCCL process-group timeout: the only watchdog of a hang without clusterkit
# A crashed rank ends the step within torchrun's 30 s between SIGTERM and SIGKILL of the other workers.
PROCESS_EXIT_DETECT = Span(2.0, 30.0)
# Slurm alone's requeue, from the fault being seen to the resumed step: bench_recovery's Slurm-alone column,
# 307.9 s (node crash) and 567.8 s (frozen batch host), less ~210 s of SlurmdTimeout. Holds cred_expire (70 s).
SLURM_REQUEUE = Span(90.0, 360.0)

# --- What clusterkit does (bench_recovery.py --timings parallelcluster, the closing note of issue 21).
# A silent node: its beacon unchanged for 4 s (beacon.SILENCE_S), then a probe unanswered for 3 s (PROBE_S).
CLUSTERKIT_NODE_LOSS_DETECT = Span(4.0, 8.0)
# A spare in the allocation: fault -> resumed step 12.3-19.6 s, less the ~7 s of detection.
SPARE_RELAUNCH = Span(5.0, 13.0)
# Requeue onto a free node of the cluster: 13.1-24.4 s (another node), 18.0-24.8 s (the batch host), less ~7 s.
FREE_NODE_REQUEUE = Span(6.0, 18.0)
# A node replaced by clustermgtd (60 s loop + boot): the replacement cases took 61.7-115 s from the fault to the
# resumed step with a 10-30 s boot; less detection and the requeue, the node is ready 45-95 s after it was
# marked DOWN. A real GPU instance boots slower: --replacement-s sets it.
REPLACEMENT = Span(45.0, 95.0)
DEFAULT_HANG_TIMEOUT_S = 120.0  # supervise.hang_timeout assumed at scale (the examples use 20 s on 0.15 s steps)
HANG_STOP = 30.0  # after hang_timeout the supervisor stops the step: torchrun's 30 s window at most

# --- Saves (bench_checkpoint.py --only async, 256 MiB state: 0.03 s per save_async call after the first, and
# the steps ran ~3% slower while the background thread hashed and wrote).
ASYNC_COPY_S_PER_GIB = 0.12  # 0.03 s / 0.25 GiB: each rank copies its own shard, so per GiB of shard
ASYNC_SLOWDOWN = 0.03

# --- At scale (inputs, not measured by clusterkit).
# Llama 3 405B's training state: 405e9 parameters x (2 B bf16 weights + 4 B fp32 master + 8 B Adam moments).
DEFAULT_CHECKPOINT_GIB = round(405e9 * 14 / GIB)
# FSx for Lustre PERSISTENT_2 at 1,000 MB/s per TiB on ~100 TiB (the reference architecture's 108 TB /fsx).
DEFAULT_SAVE_GBPS = 100.0
# Job start, imports, rendezvous and NCCL set-up of the whole job after a recovery: our assumption (the local
# bench's restart of 2 ranks is a few seconds and is inside the figures above); --restart-s sets it.
DEFAULT_RESTART_S = 60.0
GPUS_PER_NODE = 8


@lean_dataclass(frozen=True)
class Detection:
    """Seconds from a fault to the decision, per manifestation."""

    node_loss: Span
    device: Span
    software: Span
    hang: Span

    def of(self, manifestation: str) -> Span:
        return getattr(self, manifestation)


@lean_dataclass(frozen=True)
class Policy:
    """How a run saves, detects and recovers."""

    name: str
    description: str
    blocking_saves: bool
    detection: Detection
    node_path: Span  # once a node is ready: from the decision to the resumed step, before restart and load
    in_place_path: Span  # a fault that needs no new node (software, hang)
    pool: str  # where a ready node comes from: "spares" (in the allocation) or "free_nodes" (in the cluster)


def slurm_alone() -> Policy:
    return Policy(
        "slurm-alone", "Slurm at ParallelCluster's timings, blocking saves, requeue", True,
        Detection(SLURM_NODE_LOSS_DETECT, PROCESS_EXIT_DETECT, PROCESS_EXIT_DETECT,
                  Span(NCCL_WATCHDOG_S, NCCL_WATCHDOG_S).plus(PROCESS_EXIT_DETECT.high)),
        SLURM_REQUEUE, SLURM_REQUEUE, "free_nodes")


def clusterkit_policy(pool: str, hang_timeout: float) -> Policy:
    """clusterkit's supervisor with async saves; `hang_timeout` 0 (off, as in a job spec) leaves hangs to NCCL's
    watchdog."""
    hang = Span(hang_timeout, hang_timeout + HANG_STOP) if hang_timeout else slurm_alone().detection.hang
    detection = Detection(CLUSTERKIT_NODE_LOSS_DETECT, PROCESS_EXIT_DETECT, PROCESS_EXIT_DETECT, hang)
    if pool == "spares":
        return Policy("clusterkit-spares", "clusterkit, async saves, relaunch on a spare node", False,
                      detection, SPARE_RELAUNCH, SPARE_RELAUNCH, "spares")
    return Policy("clusterkit-requeue", "clusterkit, async saves, requeue", False,
                  detection, FREE_NODE_REQUEUE, SPARE_RELAUNCH, "free_nodes")


@lean_dataclass(frozen=True)
class Limit:
    low: float
    high: float
    integer: bool = False
    low_open: bool = False  # the low bound itself is refused

    def describe(self) -> str:
        kind = "a whole number" if self.integer else "a number"
        low = f"above {self.low:g}" if self.low_open else f"from {self.low:g}"
        return f"{kind} {low} to {self.high:g}"


LIMITS: dict[str, Limit] = {
    "gpus": Limit(1, 10_000_000, integer=True),
    "gpus_per_node": Limit(1, 128, integer=True),
    "days": Limit(0, 3650, low_open=True),
    "failures_per_gpu_hour": Limit(0, 3600, low_open=True),  # up to one a GPU-second: chaos runs are fast
    "checkpoint_gib": Limit(0, 10_000_000, low_open=True),
    "save_gbps": Limit(0, 100_000, low_open=True),
    "restart_s": Limit(0, 86_400),
    "replacement_s": Limit(0, 86_400),
    "hang_timeout": Limit(0, 86_400),  # 0: off
    "spares": Limit(0, 64, integer=True),
    "free_nodes": Limit(0, 64, integer=True),
    "interval": Limit(1, 10_000_000),
    "runs": Limit(1, 1000, integer=True),
    "seed": Limit(0, 2**63 - 1, integer=True),
}
MAX_FAILURES_PER_RUN = 100_000  # the simulator steps once per failure: bounds a run's time (~10 s)


def check_parameter(name: str, value: float, label: str | None = None, shown: str | None = None) -> None:
    """Refuse a value outside the parameter's limits, naming it (as `label`: a flag, on the CLI) and the value
    (as `shown`: what the user typed)."""
    limit, label = LIMITS[name], label or name
    bad = (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
           or (limit.integer and value != int(value)) or value < limit.low or value > limit.high
           or (limit.low_open and value == limit.low))
    if bad:
        raise ClusterkitError(f"{label} {shown if shown is not None else repr(value)}: must be {limit.describe()}",
                              fix=f"give {label} {limit.describe()}")


@lean_dataclass(frozen=True)
class Scenario:
    """A run to simulate: its size, its failure rate and what saves and recoveries cost."""

    gpus: int = LLAMA3_GPUS
    days: float = LLAMA3_DAYS
    failures_per_gpu_hour: float = LLAMA3_FAILURES_PER_GPU_HOUR
    checkpoint_gib: float = DEFAULT_CHECKPOINT_GIB
    save_gbps: float = DEFAULT_SAVE_GBPS  # storage's aggregate write (and read) bandwidth, GB/s
    restart_s: float = DEFAULT_RESTART_S
    replacement: Span = REPLACEMENT
    hang_timeout: float = DEFAULT_HANG_TIMEOUT_S
    gpus_per_node: int = GPUS_PER_NODE
    spares: int = 1  # spare nodes in the allocation (clusterkit-spares)
    free_nodes: int = 0  # idle nodes of the cluster a requeued job may start on
    mix: dict[str, float] = field(default_factory=manifestation_mix)

    def __post_init__(self) -> None:
        for name in ("gpus", "days", "failures_per_gpu_hour", "checkpoint_gib", "save_gbps", "restart_s",
                     "hang_timeout", "gpus_per_node", "spares", "free_nodes"):
            check_parameter(name, getattr(self, name))
        for bound in (self.replacement.low, self.replacement.high):
            check_parameter("replacement_s", bound)
        shares = [self.mix.get(m) for m in MANIFESTATIONS]
        if set(self.mix) != set(MANIFESTATIONS) or not all(
                isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 for x in shares) or not sum(shares):
            raise ClusterkitError(f"mix {self.mix!r}: must give a share, 0 or more, to each of "
                                  f"{', '.join(MANIFESTATIONS)}, and not all 0",
                                  fix="e.g. clusterkit.goodput.model.manifestation_mix()")
        if self.expected_failures > MAX_FAILURES_PER_RUN:
            raise ClusterkitError(
                f"{self.expected_failures:,.0f} failures expected per run ({self.gpus:,} GPUs x {self.days:g} days "
                f"x {self.failures_per_gpu_hour:g} per GPU-hour): too many to simulate",
                fix=f"keep gpus x days x 24 x rate under {MAX_FAILURES_PER_RUN:,}")

    @property
    def horizon_s(self) -> float:
        return self.days * 86_400.0

    @property
    def failure_rate_per_s(self) -> float:
        return self.failures_per_gpu_hour * self.gpus / 3600.0

    @property
    def mtbf_s(self) -> float:
        return 1.0 / self.failure_rate_per_s

    @property
    def expected_failures(self) -> float:
        return self.failure_rate_per_s * self.horizon_s

    @property
    def nodes(self) -> int:
        return math.ceil(self.gpus / self.gpus_per_node)

    def with_spares(self, spares: int) -> Scenario:
        return replace(self, spares=spares)


@lean_dataclass(frozen=True)
class SaveCost:
    """What one save costs the training loop: a stall, then a background write that slows the steps."""

    stall_s: float  # the loop blocked: the whole write (blocking) or the copy into host buffers (async)
    write_s: float  # the background write after the stall (0 for blocking saves)
    slowdown: float  # the fraction of step time lost while the background write runs

    def effective_stall(self, interval: float) -> float:
        """Seconds of training lost per save at this interval: the stall, the slowdown, and the wait for the
        previous write when saves come faster than storage takes them."""
        return self.stall_s + self.slowdown * min(self.write_s, interval) + max(0.0, self.write_s - interval)


def save_cost(scenario: Scenario, blocking: bool) -> SaveCost:
    write_s = scenario.checkpoint_gib * GIB / (scenario.save_gbps * GB)
    if blocking:
        return SaveCost(write_s, 0.0, 0.0)
    shard_gib = scenario.checkpoint_gib / scenario.gpus
    return SaveCost(shard_gib * ASYNC_COPY_S_PER_GIB, write_s, ASYNC_SLOWDOWN)


def load_s(scenario: Scenario) -> float:
    """Reading the checkpoint back after a restart, at the storage's bandwidth."""
    return scenario.checkpoint_gib * GIB / (scenario.save_gbps * GB)

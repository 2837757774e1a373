"""Fabric validation: nccl-tests all_reduce_perf on GPUs (nccom-test on Trainium), with a floor.

What the test runs (its binary and arguments, sized to the instance type) and how its output is judged.
The job around it is built and submitted where jobs are (`jobs/nccl_tests.py`). Before the test, each
node prints which EC2 instance it is, so that a degraded node can be named to AWS. The output parser
reads the table by its header, so it takes nccl-tests output with or without the `root` column, mpirun's
`[1,0]<stdout>:` tags, srun's `0: ` labels, and nccom-test's table.
docs/reference-parity.md compares every setting with the AWS reference scripts.
"""

from __future__ import annotations

import re

from clusterkit.catalog import InstanceType
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.stack.doctor import CheckResult, Status

ALL_REDUCE_BINARY = "/opt/nccl-tests/build/all_reduce_perf"  # where our GPU recipe builds it
ITERATIONS = 100  # -n: AWS's nccl-tests sbatch runs 100 (nccl-tests' default of 20 is noisy at large sizes)
GIB = 1 << 30
# all_reduce_perf allocates a send, a receive and (with -c 1, data checking) an expected-result buffer
# of the largest size on every GPU; CUDA and NCCL need a few GiB beside them.
BUFFERS_PER_RANK = 3
RESERVED_GIB = 4
LARGEST_SIZE = 16 * GIB  # AWS's sbatch goes to 16G, where p5 reaches its peak
UNKNOWN_GPU_SIZE = 4 * GIB  # fits every GPU of 16 GB or more
NCCOM_ITERATIONS = 20  # nccom-test's own default

# Published healthy 2-node bus bandwidths (GB/s, all_reduce_perf at its largest size), from AWS's
# nccl-tests README (awsome-distributed-training, micro-benchmarks/nccl-tests/README.md, "Results").
# On 2 nodes NCCL's tree reports more than the line rate (NVLink carries part of the traffic); p4d has
# p4de's fabric (4x100 Gbps EFA, NVSwitch), so it shares its figure.
PUBLISHED_SOURCE = "awsome-distributed-training micro-benchmarks/nccl-tests/README.md"
PUBLISHED_HEALTHY_BUSBW: dict[tuple[str, int], float] = {
    ("p4de.24xlarge", 2): 78.33,
    ("p4d.24xlarge", 2): 78.33,
    ("p5.48xlarge", 2): 487.09,
}
FLOOR_FRACTION_OF_HEALTHY = 0.85  # a node with one of its EFA devices gone loses a quarter or more
# Without a published figure: across more nodes the ring is bounded by each node's network, so the
# floor is this share of the line rate (catalog network_gbps / 8); within one node it is a sanity bound.
FLOOR_FRACTION_OF_LINE_RATE = 0.8

# mpirun tags every line of a rank's output ("[1,0]<stdout>:"), srun --label prefixes "0: ".
_RANK_TAG = re.compile(r"^\s*(?:\[\d+,\d+\]<stdout>:|\d+: )")
_AVERAGE = re.compile(r"Avg bus bandwidth\s*:\s*([0-9.]+)")
INSTANCE_LINE = re.compile(r"^clusterkit: node (\S+) is instance (\S+)$", re.MULTILINE)

# Each node's first task prints its Slurm node name and its EC2 instance id (the DMI asset tag), then
# becomes the test ("$@"). Written by clusterkit, passed as a quoted argument.
PRINT_INSTANCE = ('if [[ ${SLURM_LOCALID:-0} == 0 ]]; then '
                  'echo "clusterkit: node ${SLURMD_NODENAME:-$(uname -n)} is instance '
                  '$(tr -d " " < /sys/devices/virtual/dmi/id/board_asset_tag 2>/dev/null || echo unknown)"; fi; '
                  'exec "$@"')


@lean_dataclass(frozen=True)
class BandwidthRow:
    size_bytes: int
    busbw_gb_s: tuple[float, ...]  # nccl-tests: out-of-place, then in-place


@lean_dataclass(frozen=True)
class BandwidthReport:
    rows: tuple[BandwidthRow, ...]
    average_busbw_gb_s: float | None  # the "# Avg bus bandwidth" line, when printed
    instances: tuple[tuple[str, str], ...] = ()  # (node, EC2 instance id) as the nodes printed them

    @property
    def peak_busbw_gb_s(self) -> float | None:
        values = [value for row in self.rows for value in row.busbw_gb_s]
        return max(values) if values else None


def parse_bus_bandwidth(text: str) -> BandwidthReport:
    """The result table and average of nccl-tests (or nccom-test) output, and the node-to-instance map."""
    header: list[str] | None = None
    rows: list[BandwidthRow] = []
    for raw in text.splitlines():
        line = _RANK_TAG.sub("", raw).strip()
        words = line.lstrip("#").split()
        lowered = [word.lower() for word in words]
        if any(w.startswith("busbw") for w in lowered) and any(w.startswith("size") for w in lowered):
            header = lowered
            continue
        if header is None or line.startswith("#") or len(words) != len(header) or not words[0].isdigit():
            continue
        size_column = next(i for i, name in enumerate(header) if name.startswith("size"))
        busbw = tuple(float(words[i]) for i, name in enumerate(header)
                      if name.startswith("busbw") and _is_number(words[i]))
        rows.append(BandwidthRow(int(words[size_column]), busbw))
    average = _AVERAGE.search(text)
    instances = {node: instance for node, instance in INSTANCE_LINE.findall(
        "\n".join(_RANK_TAG.sub("", line).strip() for line in text.splitlines()))}
    return BandwidthReport(tuple(rows), float(average.group(1)) if average else None,
                           tuple(sorted(instances.items())))


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def busbw_floor(instance: InstanceType, nodes: int) -> tuple[float, str] | None:
    """The bus-bandwidth floor (GB/s) for `nodes` nodes of `instance`, and where it comes from."""
    published = PUBLISHED_HEALTHY_BUSBW.get((instance.name, nodes))
    if published is not None:
        return (round(FLOOR_FRACTION_OF_HEALTHY * published, 1),
                f"{FLOOR_FRACTION_OF_HEALTHY:.0%} of a healthy {nodes}-node run "
                f"({published:g} GB/s, {PUBLISHED_SOURCE})")
    if not instance.network_gbps or instance.accelerator == "none":
        return None
    line_rate = instance.network_gbps / 8
    return (round(FLOOR_FRACTION_OF_LINE_RATE * line_rate, 1),
            f"{FLOOR_FRACTION_OF_LINE_RATE:.0%} of the {line_rate:g} GB/s line rate")


def judge_bandwidth(report: BandwidthReport, instance: InstanceType | None, nodes: int = 2) -> CheckResult:
    """Compare the peak bus bandwidth with the floor for this instance type and node count."""
    name, layer = "nccl bus bandwidth", "fabric"
    peak = report.peak_busbw_gb_s
    if peak is None:
        return CheckResult(name, layer, Status.FAIL, "no result table in the output",
                           "read the job's log: the test did not run to completion")
    average = f", average {report.average_busbw_gb_s:g} GB/s" if report.average_busbw_gb_s is not None else ""
    detail = f"peak {peak:g} GB/s{average} over {len(report.rows)} sizes on {nodes} node(s)"
    floor = busbw_floor(instance, nodes) if instance else None
    if floor is None:
        return CheckResult(name, layer, Status.WARN, f"{detail}; no floor for "
                           f"{instance.name if instance else 'an unknown instance type'}",
                           "pass --instance-type to compare against a floor")
    value, source = floor
    if peak < value:
        instances = ", ".join(f"{node}={instance_id}" for node, instance_id in report.instances)
        named = f"; the nodes were {instances}" if instances else ""
        return CheckResult(name, layer, Status.FAIL, f"{detail}, below the {instance.name} floor of {value:g} GB/s "
                           f"({source}){named}",
                           "run `clusterkit doctor` on the nodes: look for missing EFA devices, aws-ofi-nccl "
                           "not loaded (NCCL_DEBUG=INFO shows 'NET/Socket'), or a degraded node; test node pairs "
                           "to find it, and report its instance id to AWS")
    return CheckResult(name, layer, Status.PASS, f"{detail}, floor {value:g} GB/s ({source})")


def all_reduce_max_bytes(instance: InstanceType | None) -> int:
    """The largest message size whose buffers fit in one GPU's memory, up to LARGEST_SIZE."""
    if instance is None or not instance.accelerator_memory_gib:
        return UNKNOWN_GPU_SIZE
    return _fitting_power_of_two(instance.accelerator_memory_gib)


def _fitting_power_of_two(memory_gib: float) -> int:
    usable = (memory_gib - RESERVED_GIB) * GIB / BUFFERS_PER_RANK
    size = LARGEST_SIZE
    while size > 1 and size > usable:
        size //= 2
    return size


def size_text(size: int) -> str:
    """16G, 512M, 64K: nccl-tests' and nccom-test's size syntax."""
    for unit, factor in (("G", GIB), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def all_reduce_args(instance: InstanceType | None) -> tuple[str, ...]:
    """all_reduce_perf's arguments: 8 B up to what fits, doubling, one GPU per rank, data checked,
    ITERATIONS iterations per size."""
    return ("-b", "8", "-e", size_text(all_reduce_max_bytes(instance)), "-f", "2", "-g", "1", "-c", "1",
            "-n", str(ITERATIONS))


def nccom_test_args(instance: InstanceType, nodes: int) -> tuple[str, ...]:
    """nccom-test's arguments: one worker per NeuronCore the runtime exposes (logical ones, at the instance's
    default size: 64 on trn2.48xlarge) on every node, 8 B up to what fits one core."""
    cores = instance.processes()
    per_core_gib = instance.accelerator_memory_gib * instance.accelerator_count / cores
    largest = size_text(_fitting_power_of_two(per_core_gib)).lower() + "b"
    return ("--nworkers", str(cores * nodes), "--nnodes", str(nodes), "--minbytes", "8",
            "--maxbytes", largest, "--stepfactor", "2", "--iters", str(NCCOM_ITERATIONS), "--datatype", "fp32",
            "allr")

"""Fabric validation jobs: nccl-tests all_reduce_perf on GPUs (nccom-test on Trainium), with a floor.

The job is a plain job spec (mpi launcher: one task per GPU, wired up by Slurm's PMIx), rendered by
the usual job plan (`plan_job`) and submitted with `submit_plan`. The output parser reads the table by its
header, so it takes nccl-tests output with or without the `root` column, mpirun's `[1,0]<stdout>:`
tags, and nccom-test's table alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clusterkit.catalog import INSTANCE_TYPES, InstanceType
from clusterkit.errors import ClusterkitError
from clusterkit.stack.doctor import CheckResult, Status

if TYPE_CHECKING:
    from clusterkit.jobs.handle import JobHandle
    from clusterkit.jobs.plan import JobPlan
    from clusterkit.jobs.spec import JobSpec

ALL_REDUCE_BINARY = "/opt/nccl-tests/build/all_reduce_perf"  # where our GPU recipe builds it
ALL_REDUCE_ARGS = ("-b", "8", "-e", "16G", "-f", "2", "-g", "1")
NCCOM_TEST_ARGS = ("--minbytes", "8", "--maxbytes", "16gb", "--stepfactor", "2", "--datatype", "fp32", "allr")

# Bus-bandwidth floors in GB/s for a multi-node all-reduce at its largest messages.
# Rationale: nccl-tests' busbw is normalised so that a ring all-reduce across nodes is bounded by
# each node's network bandwidth; a healthy EFA fabric reaches most of the line rate at large
# messages. The floor is 80 % of the line rate from the catalog (network_gbps / 8 bits per byte),
# e.g. p4d: 400 Gbps = 50 GB/s -> 40 GB/s; p5: 3200 Gbps = 400 GB/s -> 320 GB/s. A 2-node run can
# report more than the line rate (NVLink carries part of the traffic); within one node NVLink
# dominates, so there the floor is only a sanity bound. Trainium (nccom-test) uses the same rule.
FLOOR_FRACTION_OF_LINE_RATE = 0.8
FLOOR_INSTANCE_TYPES = ("p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
                        "p6-b200.48xlarge", "g5.48xlarge", "trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge")
BUSBW_FLOORS_GB_S: dict[str, float] = {
    name: round(FLOOR_FRACTION_OF_LINE_RATE * INSTANCE_TYPES[name].network_gbps / 8, 1)
    for name in FLOOR_INSTANCE_TYPES
}

# mpirun tags every line of a rank's output, e.g. "[1,0]<stdout>:".
_RANK_TAG = re.compile(r"^\s*\[\d+,\d+\]<stdout>:")
_AVERAGE = re.compile(r"Avg bus bandwidth\s*:\s*([0-9.]+)")


@dataclass(frozen=True)
class BandwidthRow:
    size_bytes: int
    busbw_gb_s: tuple[float, ...]  # nccl-tests: out-of-place, then in-place


@dataclass(frozen=True)
class BandwidthReport:
    rows: tuple[BandwidthRow, ...]
    average_busbw_gb_s: float | None  # the "# Avg bus bandwidth" line, when printed

    @property
    def peak_busbw_gb_s(self) -> float | None:
        values = [value for row in self.rows for value in row.busbw_gb_s]
        return max(values) if values else None


def parse_bus_bandwidth(text: str) -> BandwidthReport:
    """The result table and average of nccl-tests (or nccom-test) output."""
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
    return BandwidthReport(tuple(rows), float(average.group(1)) if average else None)


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def judge_bandwidth(report: BandwidthReport, instance: InstanceType | None) -> CheckResult:
    """Compare the peak bus bandwidth with the instance type's floor."""
    name, layer = "nccl bus bandwidth", "fabric"
    peak = report.peak_busbw_gb_s
    if peak is None:
        return CheckResult(name, layer, Status.FAIL, "no result table in the output",
                           "read the job's log: the test did not run to completion")
    average = f", average {report.average_busbw_gb_s:g} GB/s" if report.average_busbw_gb_s is not None else ""
    detail = f"peak {peak:g} GB/s{average} over {len(report.rows)} sizes"
    floor = BUSBW_FLOORS_GB_S.get(instance.name) if instance else None
    if floor is None:
        return CheckResult(name, layer, Status.WARN, f"{detail}; no floor for "
                           f"{instance.name if instance else 'an unknown instance type'}",
                           "pass --instance-type to compare against a floor")
    if peak < floor:
        return CheckResult(name, layer, Status.FAIL, f"{detail}, below the {instance.name} floor of {floor:g} GB/s",
                           "run `clusterkit doctor` on the nodes: look for missing EFA devices, aws-ofi-nccl "
                           "not loaded (NCCL_DEBUG=INFO shows 'NET/Socket'), or a degraded node")
    return CheckResult(name, layer, Status.PASS, f"{detail}, floor {floor:g} GB/s")


def nccl_test_spec(nodes: int, *, cluster: str | None = None, instance_type: str | None = None,
                   image: str | None = None, binary: str = ALL_REDUCE_BINARY) -> JobSpec:
    """A job spec running all_reduce_perf (GPU) or nccom-test (Trainium) across `nodes` nodes."""
    from clusterkit.catalog import resolve_instance_type
    from clusterkit.jobs.spec import job_from_dict

    data: dict = {"name": "nccl-tests", "nodes": nodes, "exclusive": True, "requeue": False,
                  "logs": {"output": "logs/%x_%j.out"}}
    if cluster:
        data["cluster"] = cluster
    if instance_type:
        data["instance"] = instance_type
    if image:
        data["container"] = {"runtime": "pyxis", "image": image}
    facts = resolve_instance_type(instance_type) if instance_type else None
    if facts is not None and facts.accelerator == "neuron":
        if nodes != 1:
            raise ClusterkitError(f"--nodes {nodes}: nccom-test across nodes needs its --hosts list, which this "
                                  "command does not build yet", fix="run with --nodes 1 on Trainium")
        data.update(launcher="srun", processes_per_node=1,
                    command=["nccom-test", "-r", str(facts.neuron_cores), *NCCOM_TEST_ARGS])
    else:
        data.update(launcher="mpi", command=[binary, *ALL_REDUCE_ARGS])
    return job_from_dict(data)


def run_nccl_test(plan: JobPlan, *, timeout: float | None = None) -> tuple[JobHandle, BandwidthReport]:
    """Submit the test's plan, wait for it, and parse its output."""
    from clusterkit.jobs.submit import submit_plan

    handle = submit_plan(plan)
    handle.wait(timeout=timeout)
    return handle, parse_bus_bandwidth(handle.stdout())

"""nccl-tests output parsing (real outputs), bandwidth floors, and the validation job's script."""

from __future__ import annotations


import pytest

from clusterkit.catalog import instance_type
from clusterkit.errors import ClusterkitError
from clusterkit.jobs.render import render_sbatch
from clusterkit.stack.doctor import Status
from clusterkit.stack.nccl_tests import (ALL_REDUCE_ARGS, BUSBW_FLOORS_GB_S, BandwidthReport, judge_bandwidth,
                                         nccl_test_spec, parse_bus_bandwidth)

from tests.stack.nodes import fixture_text
from tests.tools import shellcheck


def test_parses_the_h100_two_node_run() -> None:
    report = parse_bus_bandwidth(fixture_text("nccl-tests_h100_2nodes.txt"))
    assert len(report.rows) == 31  # 8 B .. 8 GiB, factor 2
    assert report.rows[0].size_bytes == 8 and report.rows[-1].size_bytes == 8589934592
    assert report.rows[-1].busbw_gb_s == (338.82, 337.35)
    assert report.peak_busbw_gb_s == 338.82
    assert report.average_busbw_gb_s == 70.742


def test_parses_the_older_format_without_root_column() -> None:
    report = parse_bus_bandwidth(fixture_text("nccl-tests_p3dn_efa_old-format.txt"))
    assert [row.size_bytes for row in report.rows] == [1048576, 2097152, 4194304]
    assert report.rows[0].busbw_gb_s == (1.90, 3.06)
    assert report.average_busbw_gb_s is None


def test_parses_lines_tagged_by_mpirun() -> None:
    tagged = "\n".join(f"[1,0]<stdout>:{line}" for line in fixture_text("nccl-tests_h100_2nodes.txt").splitlines())
    assert parse_bus_bandwidth(tagged) == parse_bus_bandwidth(fixture_text("nccl-tests_h100_2nodes.txt"))


def test_floors_follow_the_line_rate() -> None:
    assert BUSBW_FLOORS_GB_S["p4d.24xlarge"] == 40.0  # 80 % of 400 Gbps / 8
    assert BUSBW_FLOORS_GB_S["p5.48xlarge"] == 320.0  # 80 % of 3200 Gbps / 8


def test_judge_pass_and_fail_against_the_floor() -> None:
    h100 = parse_bus_bandwidth(fixture_text("nccl-tests_h100_2nodes.txt"))
    assert judge_bandwidth(h100, instance_type("p5.48xlarge")).status is Status.PASS
    slow = parse_bus_bandwidth(fixture_text("nccl-tests_p3dn_efa_old-format.txt"))
    verdict = judge_bandwidth(slow, instance_type("p4d.24xlarge"))
    assert verdict.status is Status.FAIL
    assert "peak 6.9 GB/s" in verdict.detail and "40 GB/s" in verdict.detail and "doctor" in verdict.fix


def test_judge_without_results_or_floor() -> None:
    assert judge_bandwidth(BandwidthReport((), None), instance_type("p4d.24xlarge")).status is Status.FAIL
    h100 = parse_bus_bandwidth(fixture_text("nccl-tests_h100_2nodes.txt"))
    assert judge_bandwidth(h100, None).status is Status.WARN


def test_gpu_job_uses_mpi_with_one_task_per_gpu() -> None:
    spec = nccl_test_spec(2, instance_type="p4d", cluster="train")
    assert spec.launcher.kind == "mpi" and spec.nodes == 2 and spec.exclusive
    assert spec.command.args == ALL_REDUCE_ARGS
    script = render_sbatch(spec)
    assert "#SBATCH --ntasks-per-node=8" in script
    assert "all_reduce_perf -b 8 -e 16G -f 2 -g 1" in script


def test_trainium_job_runs_nccom_test() -> None:
    spec = nccl_test_spec(1, instance_type="trn1")
    assert spec.command.script == "nccom-test" and spec.command.args[:2] == ("-r", "32")
    with pytest.raises(ClusterkitError, match="--nodes 2"):
        nccl_test_spec(2, instance_type="trn1")


@pytest.mark.parametrize("instance,nodes,image", [("p5", 4, None), ("p4d", 2, "/fsx/images/nccl.sqsh"),
                                                  ("trn1", 1, None)])
def test_dry_run_script_passes_shellcheck(instance: str, nodes: int, image: str | None, tmp_path) -> None:
    path = tmp_path / "nccl.sbatch"
    path.write_text(render_sbatch(nccl_test_spec(nodes, instance_type=instance, image=image)))
    assert shellcheck([path]) == {"nccl.sbatch": []}

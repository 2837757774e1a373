"""nccl-tests output parsing (real outputs), bandwidth floors, and the validation job's script."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from clusterkit.catalog import INSTANCE_TYPES, instance_type
from clusterkit.jobs.nccl_tests import nccl_test_spec
from clusterkit.jobs.render import render_sbatch, rendezvous_port
from clusterkit.stack.doctor import Status
from clusterkit.stack.nccl_tests import (BUFFERS_PER_RANK, GIB, BandwidthReport, all_reduce_args,
                                         all_reduce_max_bytes, busbw_floor, judge_bandwidth, parse_bus_bandwidth)

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


def test_parses_srun_labelled_output_of_the_published_aws_runs() -> None:
    p4de = parse_bus_bandwidth(fixture_text("nccl-tests_p4de_2nodes_aws.txt"))
    assert len(p4de.rows) == 29 and p4de.peak_busbw_gb_s == 78.33
    p5 = parse_bus_bandwidth(fixture_text("nccl-tests_p5_2nodes_aws.txt"))
    assert p5.rows[-1].size_bytes == 16 * GIB and p5.peak_busbw_gb_s == 487.26


@pytest.mark.parametrize(("instance", "nodes", "floor"), [
    ("p4de.24xlarge", 2, 66.6),  # 85 % of the published healthy 2-node run (78.33), not 40
    ("p4d.24xlarge", 2, 66.6),   # p4de's fabric
    ("p5.48xlarge", 2, 414.0),   # 85 % of 487.09, not 320
    ("p5.48xlarge", 4, 320.0),   # no published figure: 80 % of the 400 GB/s line rate
    ("p4de.24xlarge", 16, 40.0),
    ("p5en.48xlarge", 2, 320.0),
])
def test_floors_per_instance_type_and_node_count(instance: str, nodes: int, floor: float) -> None:
    value, source = busbw_floor(instance_type(instance), nodes)
    assert value == floor
    assert ("awsome-distributed-training" in source) == (nodes == 2 and instance.startswith(("p4", "p5.")))


def test_published_healthy_runs_pass_and_a_degraded_one_fails() -> None:
    p4de = parse_bus_bandwidth(fixture_text("nccl-tests_p4de_2nodes_aws.txt"))
    assert judge_bandwidth(p4de, instance_type("p4de.24xlarge"), 2).status is Status.PASS
    p5 = parse_bus_bandwidth(fixture_text("nccl-tests_p5_2nodes_aws.txt"))
    assert judge_bandwidth(p5, instance_type("p5.48xlarge"), 2).status is Status.PASS
    # A p4de pair at 77 % of the healthy figure (one EFA device of four gone): the old 40 GB/s floor
    # passed it.
    degraded = BandwidthReport(tuple(row for row in p4de.rows[:-1]), None, (("st-p4de-1", "i-0abc"),))
    assert degraded.peak_busbw_gb_s == 76.86
    slower = BandwidthReport((type(p4de.rows[0])(1 << 31, (60.0, 60.1)),), None, (("st-p4de-1", "i-0abc"),
                                                                                   ("st-p4de-2", "i-0def")))
    verdict = judge_bandwidth(slower, instance_type("p4de.24xlarge"), 2)
    assert verdict.status is Status.FAIL and "66.6 GB/s" in verdict.detail
    assert "st-p4de-1=i-0abc, st-p4de-2=i-0def" in verdict.detail and "instance id" in verdict.fix


def test_judge_pass_and_fail_against_the_floor() -> None:
    gcp_h100 = parse_bus_bandwidth(fixture_text("nccl-tests_h100_2nodes.txt"))  # 339 GB/s: far below AWS's 487
    assert judge_bandwidth(gcp_h100, instance_type("p5.48xlarge"), 2).status is Status.FAIL
    assert judge_bandwidth(gcp_h100, instance_type("p5.48xlarge"), 8).status is Status.PASS  # line-rate floor
    slow = parse_bus_bandwidth(fixture_text("nccl-tests_p3dn_efa_old-format.txt"))
    verdict = judge_bandwidth(slow, instance_type("p4d.24xlarge"), 4)
    assert verdict.status is Status.FAIL
    assert "peak 6.9 GB/s" in verdict.detail and "40 GB/s" in verdict.detail and "doctor" in verdict.fix


def test_judge_without_results_or_floor() -> None:
    assert judge_bandwidth(BandwidthReport((), None), instance_type("p4d.24xlarge")).status is Status.FAIL
    h100 = parse_bus_bandwidth(fixture_text("nccl-tests_h100_2nodes.txt"))
    assert judge_bandwidth(h100, None).status is Status.WARN


def test_the_node_to_instance_map_is_read_from_the_log() -> None:
    log = ("clusterkit: node st-p5-1 is instance i-0123456789abcdef0\n"
           "1: clusterkit: node st-p5-2 is instance i-0fedcba9876543210\n"
           + fixture_text("nccl-tests_p5_2nodes_aws.txt"))
    assert parse_bus_bandwidth(log).instances == (("st-p5-1", "i-0123456789abcdef0"),
                                                  ("st-p5-2", "i-0fedcba9876543210"))


@pytest.mark.parametrize("name", sorted(n for n, t in INSTANCE_TYPES.items() if t.accelerator == "gpu"))
def test_the_largest_size_fits_the_gpus_memory(name: str) -> None:
    facts = instance_type(name)
    largest = all_reduce_max_bytes(facts)
    assert BUFFERS_PER_RANK * largest <= facts.accelerator_memory_gib * GIB - 2 * GIB  # room for CUDA and NCCL
    assert largest * 2 * BUFFERS_PER_RANK > (facts.accelerator_memory_gib - 4) * GIB or largest == 16 * GIB


@pytest.mark.parametrize(("instance", "largest"), [("p4d", "8G"), ("g5", "4G"), ("p4de", "16G"), ("p5", "16G"),
                                                   ("p5en.48xlarge", "16G")])
def test_sizes_per_gpu(instance: str, largest: str) -> None:
    args = all_reduce_args(instance_type({"p4d": "p4d.24xlarge", "g5": "g5.12xlarge", "p4de": "p4de.24xlarge",
                                          "p5": "p5.48xlarge"}.get(instance, instance)))
    assert args[args.index("-e") + 1] == largest
    assert args[args.index("-n") + 1] == "100" and args[args.index("-c") + 1] == "1"


def test_gpu_job_uses_mpi_with_one_task_per_gpu_unbound_and_names_its_instances() -> None:
    spec = nccl_test_spec(2, instance_type="p4d", cluster="train")
    assert spec.launcher.kind == "mpi" and spec.launcher.cpu_bind == "none" and spec.nodes == 2 and spec.exclusive
    script = render_sbatch(spec)
    assert "#SBATCH --ntasks-per-node=8" in script and "--cpu-bind=none" in script
    assert "all_reduce_perf -b 8 -e 8G -f 2 -g 1 -c 1 -n 100" in script
    assert "board_asset_tag" in script


def test_the_instance_line_runs_before_the_test(fake_slurm) -> None:
    script = render_sbatch(nccl_test_spec(2, instance_type="p5"))
    fake_slurm.link("uname", "/bin/uname")
    fake_slurm.link("tr", "/usr/bin/tr")
    result = fake_slurm.run(script.replace("/opt/nccl-tests/build/all_reduce_perf", "prog"),
                            extra_env={"SLURM_LOCALID": "0", "SLURMD_NODENAME": "st-p5-1"})
    assert result.returncode == 0, result.stderr
    assert "clusterkit: node st-p5-1 is instance " in result.stdout
    (prog,) = fake_slurm.calls("prog")
    assert prog.argv == ["-b", "8", "-e", "16G", "-f", "2", "-g", "1", "-c", "1", "-n", "100"]


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_trainium_job_runs_nccom_test_across_nodes(nodes: int) -> None:
    spec = nccl_test_spec(nodes, instance_type="trn1")
    words = [spec.command.script, *spec.command.args]
    text = " ".join(words)
    assert "nccom-test" in text and f"--nworkers {32 * nodes}" in text and f"--nnodes {nodes}" in text
    assert "--maxbytes 4gb" in text  # 16 GiB per NeuronCore: three 4 GiB buffers and room
    if nodes > 1:
        assert '--hosts ${hosts[@]+"${hosts[@]}"}' in text and "NEURON_RT_ROOT_COMM_ID" in text
    render_sbatch(spec)


@pytest.mark.parametrize("nodes", [1, 2])
def test_trn2_nccom_test_runs_one_worker_per_logical_neuron_core(nodes: int) -> None:
    """trn2.48xlarge's 128 physical NeuronCores are 64 at the runtime's default logical size (2), pinned in the job."""
    spec = nccl_test_spec(nodes, instance_type="trn2.48xlarge")
    text = " ".join([spec.command.script, *spec.command.args])
    assert f"--nworkers {64 * nodes}" in text
    assert "--maxbytes 4gb" in text  # 1536 GiB over 64 cores: 24 GiB each, three 4 GiB buffers and room
    assert "export NEURON_LOGICAL_NC_CONFIG=2" in render_sbatch(spec).splitlines()


def test_multi_node_nccom_test_runs_once_with_every_host(fake_slurm) -> None:
    script = render_sbatch(nccl_test_spec(2, instance_type="trn1"))
    nccom = fake_slurm.bin / "nccom-test"  # records its arguments and the root address it was given
    nccom.write_text('#!/bin/bash\nprintf "%s\\n" "$NEURON_RT_ROOT_COMM_ID" "$@" >> "$CK_SHIM_LOG/nccom"\n')
    nccom.chmod(0o755)
    result = fake_slurm.run(script, copies=2, extra_env={"SLURM_CLUSTER_NAME": "train-a"})
    assert result.returncode == 0, result.stderr
    root, *argv = (fake_slurm.log / "nccom").read_text().splitlines()
    assert argv[-3:] == ["--hosts", "node-3", "node-4"]
    assert root == f"node-3:{rendezvous_port(42, 'train-a', attempt=1)}"  # torchrun's port, once requeued


@pytest.mark.parametrize("instance,nodes,image", [("p5", 4, None), ("p4d", 2, "/fsx/images/nccl.sqsh"),
                                                  ("trn1", 1, None)])
def test_dry_run_script_passes_shellcheck(instance: str, nodes: int, image: str | None, tmp_path) -> None:
    path = tmp_path / "nccl.sbatch"
    path.write_text(render_sbatch(nccl_test_spec(nodes, instance_type=instance, image=image)))
    assert shellcheck([path]) == {"nccl.sbatch": []}


def test_nccl_test_runs_the_binary_it_is_pointed_at(tmp_path) -> None:
    """`--binary`: an all_reduce_perf of the user's (on shared storage, or elsewhere in the image) instead of
    /opt/nccl-tests/build's, quoted as one word."""
    binary = "/fsx/tools/nccl tests/all_reduce_perf"
    result = subprocess.run([sys.executable, "-m", "clusterkit", "nccl-test", "--dry-run", "--nodes", "2",
                             "--instance-type", "p5", "--binary", binary, "--output", "json"],
                            capture_output=True, text=True, env=dict(os.environ, CLUSTERKIT_HOME=str(tmp_path)))
    assert result.returncode == 0, result.stderr
    script = json.loads(result.stdout)["script"]
    assert "'/fsx/tools/nccl tests/all_reduce_perf' -b 8" in script and "/opt/nccl-tests" not in script

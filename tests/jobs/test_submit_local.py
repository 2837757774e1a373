"""Submitting to the real local cluster: specs, callables, arrays, cancel, logs, requeues, preflight."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cloudpickle
import pytest

from clusterkit.jobs.spec import job_from_dict, load_job
from clusterkit.jobs.plan import PlanRefused
from clusterkit.jobs.submit import job_handle, map_array, submit_function, submit
from clusterkit.providers.local import processes

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[2]
# The nodes cannot import this test module: ship its functions by value, as cells of a notebook are.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def clusterkit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True, cwd=cwd)


def square(x: int) -> int:
    return x * x


def whoami() -> dict:
    import socket

    return {"node": os.environ["SLURMD_NODENAME"], "host": socket.gethostname()}


def test_two_node_torchrun_allreduce_from_the_example_spec_completes(local_cluster, tmp_path):
    spec = load_job(REPO / "examples/jobs/local-allreduce.yaml")
    (tmp_path / "examples").symlink_to(REPO / "examples")
    handle = submit(spec, local_cluster.name, workdir=tmp_path)
    assert handle.result(timeout=180) == "COMPLETED"
    log = handle.stdout()
    assert "all-reduce over 4 ranks" in log and "(expected 10.0)" in log
    assert handle.attempts()[-1].node_list in ("n[1-2]", "n[2-3]", "n[3-4]", "n[1,3]", "n[1,4]", "n[2,4]")
    assert len({line.split()[-1] for line in log.splitlines() if "restart 0 nodes 2" in line}) == 1


def test_a_python_callable_returns_its_result_like_in_a_notebook(local_cluster):
    handle = submit_function(whoami, cluster=local_cluster.name, time_minutes=5)
    result = handle.result(timeout=60)
    assert result["node"] == result["host"] and result["node"].startswith("n")
    assert handle.state == "COMPLETED"


def test_a_sweep_goes_out_as_one_array_of_twenty(local_cluster):
    handles = map_array(square, range(20), cluster=local_cluster.name, time_minutes=5)
    assert len({h.job_id.split("_")[0] for h in handles}) == 1  # one sbatch call, one array
    assert [h.result(timeout=120) for h in handles] == [x * x for x in range(20)]


def test_cancel_ends_a_running_job_and_status_shows_it(local_cluster, tmp_path):
    spec = job_from_dict({"name": "sleeper", "nodes": 1, "launcher": "srun", "command": ["sleep", "300"],
                          "logs": {"output": "sleeper_%j.out"}})
    handle = submit(spec, local_cluster.name, workdir=tmp_path)
    processes.wait_until(lambda: handle.state == "RUNNING", 30, "the job to run", interval=0.2)
    result = clusterkit("cancel", handle.job_id, "--cluster", local_cluster.name)
    assert result.returncode == 0, result.stderr
    assert handle.wait(timeout=30, poll=0.2) == "CANCELLED"
    status = json.loads(clusterkit("status", handle.job_id, "--cluster", local_cluster.name, "-o", "json").stdout)
    assert status["state"] == "CANCELLED" and status["attempts"][-1]["state"].startswith("CANCELLED")


def test_submit_and_logs_through_the_cli(local_cluster, tmp_path):
    spec_file = tmp_path / "hello.yaml"
    spec_file.write_text(
        "name: hello\nnodes: 2\nlauncher: srun\ncommand: [bash, -c, 'echo \"hi from $SLURMD_NODENAME\"']\n"
        "logs: {output: logs/%x_%j.out}\n")
    result = clusterkit("submit", str(spec_file), "--cluster", local_cluster.name, "--wait", "-o", "json",
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    submitted = json.loads(result.stdout)
    assert submitted["state"] == "COMPLETED"
    logs = clusterkit("logs", submitted["job_id"], "--cluster", local_cluster.name)
    assert sorted(line for line in logs.stdout.splitlines() if line.startswith("hi")) == ["hi from n1", "hi from n2"]
    jobs = json.loads(clusterkit("jobs", "--cluster", local_cluster.name, "-o", "json").stdout)
    assert submitted["job_id"] in [job["job_id"] for job in jobs]


def test_dry_run_prints_the_script_and_submits_nothing(local_cluster, tmp_path):
    before = len(json.loads(clusterkit("jobs", "--cluster", local_cluster.name, "-o", "json").stdout))
    result = clusterkit("submit", str(REPO / "examples/jobs/local-allreduce.yaml"), "--dry-run",
                        "--cluster", local_cluster.name)
    assert result.returncode == 0, result.stderr
    # Against a local cluster (no EC2 instance type to resolve) the script is the spec's own rendering.
    assert result.stdout == (REPO / "tests/jobs/golden/local-allreduce.sbatch").read_text()
    after = len(json.loads(clusterkit("jobs", "--cluster", local_cluster.name, "-o", "json").stdout))
    assert after == before


def test_handle_follows_a_job_requeued_after_a_node_crash(local_cluster, tmp_path):
    spec = job_from_dict({"name": "survivor", "nodes": 1, "launcher": "srun", "requeue": True,
                          "command": ["bash", "-c", 'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 300; fi'],
                          "logs": {"output": "survivor_%j.out"}})
    handle = submit(spec, local_cluster.name, workdir=tmp_path)
    processes.wait_until(lambda: handle.state == "RUNNING", 30, "the job to run", interval=0.2)
    node = job_handle(handle.job_id, local_cluster.name).tracker.slurm.job_details(handle.job_id)["NodeList"]
    local_cluster.crash_node(node)
    seen = []
    try:
        def finished() -> bool:
            seen.append(handle.state)
            return seen[-1] == "COMPLETED"
        processes.wait_until(finished, 120, "the requeued job to complete", interval=0.2)
    finally:
        local_cluster.start_node(node)
    # Slurm wrote NODE_FAIL for the first attempt, but the handle never reported an end before COMPLETED.
    assert [a.base_state for a in handle.attempts()][:1] == ["NODE_FAIL"]
    assert not [s for s in seen[:-1] if s in ("NODE_FAIL", "FAILED", "CANCELLED")], seen


def test_preflight_names_what_the_cluster_cannot_give(local_cluster, tmp_path):
    spec = job_from_dict({"name": "too-big", "nodes": 9, "launcher": "srun", "command": ["true"],
                          "container": {"runtime": "pyxis", "image": "/nonexistent/img.sqsh"}})
    with pytest.raises(PlanRefused) as raised:
        submit(spec, local_cluster.name, workdir=tmp_path)
    by_path = {f.path: f for f in raised.value.findings}
    assert "partition 'compute' has 4 nodes that fit, the job asks for 9 nodes" in by_path["nodes"].message
    assert "pyxis plugin is not loaded" in by_path["container.runtime"].message
    assert "/nonexistent/img.sqsh" in by_path["container.image"].message


def test_preflight_counts_the_spares_in_what_a_job_asks_for(local_cluster, tmp_path):
    spec = job_from_dict({"name": "spares", "nodes": 4, "launcher": "srun", "command": ["true"],
                          "supervise": {"spares": 1}})
    with pytest.raises(PlanRefused) as raised:
        submit(spec, local_cluster.name, workdir=tmp_path)
    finding = {f.path: f for f in raised.value.findings}["supervise.spares"]
    assert "has 4 nodes that fit, the job asks for 5 nodes (4 and 1 spare)" in finding.message
    assert "spares included" in finding.fix


def test_preflight_catches_a_node_python_that_cannot_run_the_pickled_function(local_cluster):
    # Debian's own python3 has no submitit: submitit would start it and fail on the node, silently.
    with pytest.raises(PlanRefused) as raised:
        submit_function(square, 3, cluster=local_cluster.name, python="/usr/bin/python3", time_minutes=5)
    finding = raised.value.findings[0]
    assert finding.path == "python" and "cannot import submitit" in finding.message
    assert "/usr/bin/python3" in finding.fix


def test_preflight_passes_the_callable_through_the_same_srun_arguments(local_cluster):
    handle = submit_function(square, 4, cluster=local_cluster.name, srun_args=("--export=ALL",), time_minutes=5)
    assert handle.result(timeout=60) == 16


def test_the_script_a_dry_run_prints_is_the_script_slurm_runs(local_cluster, tmp_path):
    (tmp_path / "examples").symlink_to(REPO / "examples")
    spec = "examples/jobs/local-resilient.yaml"
    dry = clusterkit("submit", spec, "--dry-run", "--cluster", local_cluster.name, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    submitted = clusterkit("submit", spec, "--cluster", local_cluster.name, "-o", "json", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["job_id"]
    try:
        held = tmp_path / "held.sbatch"  # the batch script as Slurm keeps it for the job
        local_cluster.slurm().run("scontrol", "write", "batch_script", job_id, str(held))
        assert held.read_bytes() == dry.stdout.encode()
    finally:
        local_cluster.slurm().cancel(job_id)


def test_a_notebook_follows_the_log_and_reads_each_attempt(local_cluster, tmp_path):
    spec = job_from_dict({"name": "counter", "launcher": "srun", "command": ["bash", "-c", "for i in 1 2 3; do "
                          "echo line $i; sleep 0.5; done"], "logs": {"output": "count_%j.out"}})
    handle = submit(spec, local_cluster.name, workdir=tmp_path)
    chunks = list(handle.follow_log(poll=0.2))
    text = "".join(chunks)
    assert [line for line in text.splitlines() if line.startswith("line ")] == ["line 1", "line 2", "line 3"]
    assert handle.state == "COMPLETED"
    processes.wait_until(lambda: handle.status().attempts, 15, "accounting to list the attempt", interval=0.3)
    (attempt,) = handle.status().attempts
    assert (attempt.state, attempt.classification, attempt.attempt) == ("COMPLETED", "completed", 0)

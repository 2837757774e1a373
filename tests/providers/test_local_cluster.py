"""The local provider against real Slurm daemons: jobs, accounting, node crashes, clean deletion."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clusterkit import registry
from clusterkit.errors import AlreadyExists
from clusterkit.providers.local import processes
from clusterkit.providers.local.cluster import LocalCluster

pytestmark = pytest.mark.slurm


def wait_for(predicate, timeout: float, what: str):
    processes.wait_until(predicate, timeout, what, interval=0.2)


def sacct_states(cluster: LocalCluster, job_id: str) -> list[tuple[str, str]]:
    return [(r.base_state, r.node_list) for r in cluster.slurm().accounting([job_id])]


def clusterkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True)


def test_two_node_job_runs_on_both_nodes_and_sacct_sees_it(local_cluster, job_dir):
    out = job_dir / "out.txt"
    script = textwrap.dedent(f"""\
        #!/bin/bash
        #SBATCH --nodes=2 --output={out}
        srun bash -c 'echo "$SLURMD_NODENAME $(hostname) $(getent hosts n2 | cut -d" " -f1)"'
        """)
    job_id = local_cluster.slurm().sbatch(script)
    wait_for(lambda: sacct_states(local_cluster, job_id)[-1:][0][0] == "COMPLETED"
             if sacct_states(local_cluster, job_id) else False, 30, "the job to complete")
    lines = sorted(out.read_text().split("\n")[:-1])
    nodes = [line.split()[0] for line in lines]
    assert len(set(nodes)) == 2, lines
    # Each node has its own host name, and other nodes' names resolve inside jobs.
    assert all(line.split()[0] == line.split()[1] and line.split()[2] == "127.0.0.1" for line in lines)


def test_gpu_jobs_schedule_on_fake_gpus(local_cluster, job_dir):
    out = job_dir / "gpus.txt"
    job_id = local_cluster.slurm().sbatch(
        f"#!/bin/bash\n#SBATCH --nodes=1 --gpus-per-node=8 --output={out}\necho \"$CUDA_VISIBLE_DEVICES\"\n")
    wait_for(lambda: any(s == "COMPLETED" for s, _ in sacct_states(local_cluster, job_id)), 30, "the GPU job")
    assert out.read_text().strip() == "0,1,2,3,4,5,6,7"


def test_crashed_node_goes_down_and_its_requeueable_job_completes_elsewhere(local_cluster, job_dir):
    out = job_dir / "requeue.txt"
    script = textwrap.dedent(f"""\
        #!/bin/bash
        #SBATCH --nodes=1 --requeue --open-mode=append --output={out}
        echo "attempt ${{SLURM_RESTART_COUNT:-0}} on $SLURMD_NODENAME"
        if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then srun sleep 300; fi
        """)
    job_id = local_cluster.slurm().sbatch(script)
    wait_for(lambda: local_cluster.slurm().queue().get(job_id) == "RUNNING", 30, "the job to start")
    wait_for(lambda: out.exists() and "attempt 0" in out.read_text(), 30, "the first attempt's log")
    first_node = out.read_text().split()[-1]

    killed = local_cluster.crash_node(first_node)
    assert killed, "crash-node killed nothing"
    try:
        wait_for(lambda: {n.name: n for n in local_cluster.slurm().nodes()}[first_node].base_state == "down",
                 60, f"{first_node} to be DOWN")
        wait_for(lambda: [s for s, _ in sacct_states(local_cluster, job_id)][-1:] == ["COMPLETED"],
                 90, "the requeued job to complete")
        attempts = sacct_states(local_cluster, job_id)
        assert attempts[0] == ("NODE_FAIL", first_node)
        assert attempts[-1][1] != first_node
        assert "attempt 1" in out.read_text()
    finally:
        local_cluster.start_node(first_node)
    assert {n.name: n for n in local_cluster.slurm().nodes()}[first_node].base_state == "idle"


def test_describe_cluster_json_has_the_documented_fields(local_cluster):
    result = clusterkit("describe-cluster", local_cluster.name, "--output", "json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["name"] == local_cluster.name and info["provider"] == "local"
    assert info["status"] == "running"
    assert Path(info["slurm_conf"]).is_file()
    assert [n["name"] for n in info["nodes"]] == ["n1", "n2", "n3", "n4"]
    assert all(n["state"] for n in info["nodes"])


def test_creating_the_same_cluster_twice_is_a_clear_error(local_cluster):
    with pytest.raises(AlreadyExists):
        LocalCluster.create(local_cluster.name, nodes=1)
    result = clusterkit("create-cluster", "--provider", "local", "--name", local_cluster.name)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: a cluster named {local_cluster.name!r} already exists "
        f"(use it, or delete it first with `clusterkit delete-cluster {local_cluster.name}`)"]


def test_delete_cluster_leaves_no_process_and_no_listening_port(local_cluster):
    result = clusterkit("create-cluster", "--provider", "local", "--name", "short-lived", "--nodes", "2",
                        "--output", "json")
    assert result.returncode == 0, result.stderr
    cluster = LocalCluster.get("short-lived")
    pids, ports = list(cluster.pids.values()), cluster.config.ports
    assert all(processes.pid_alive(pid) for pid in pids)
    assert processes.port_listening(cluster.config.slurmctld_port)

    result = clusterkit("delete-cluster", "short-lived")
    assert result.returncode == 0, result.stderr
    assert not any(processes.pid_alive(pid) for pid in pids)
    assert not any(processes.port_listening(port) for port in ports)
    assert not registry.exists("short-lived")
    assert not cluster.layout.root.exists()
    # The shared cluster was not touched.
    assert local_cluster.describe().status == "running"

"""Two local clusters on one machine never meet: jobs with the same id on both, at the same time, train
in two worlds (their rendezvous ports differ by the clusters' names) and both end bit-identical."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clusterkit.jobs.render import rendezvous_port
from clusterkit.jobs.spec import job_from_dict
from clusterkit.jobs.submit import submit
from clusterkit.providers.local import processes
from clusterkit.providers.local.cluster import LocalCluster
from tests.conftest import RESILIENT_STEPS

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def next_job_id(cluster: LocalCluster) -> int:
    config = cluster.slurm().run("scontrol", "show", "config").stdout
    return int(re.search(r"^NEXT_JOB_ID\s*=\s*(\d+)", config, re.MULTILINE).group(1))


def advance_job_ids(cluster: LocalCluster, to: int) -> None:
    """Spend job ids on held jobs, cancelled at once, until the next job gets id `to`."""
    held = [cluster.slurm().run("sbatch", "--parsable", "--hold", "--wrap", "true").stdout.strip()
            for _ in range(to - next_job_id(cluster))]
    if held:
        cluster.slurm().run("scancel", *held)


def test_jobs_with_one_id_on_two_clusters_train_apart(local_cluster, own_cluster, tmp_path, uninterrupted_digest):
    clusters = (local_cluster, own_cluster)
    target = max(next_job_id(cluster) for cluster in clusters)
    for cluster in clusters:
        advance_job_ids(cluster, target)
    handles = []
    for cluster in clusters:
        workdir = tmp_path / cluster.name
        workdir.mkdir()
        workdir.chmod(0o777)
        (workdir / "examples").symlink_to(REPO / "examples")
        spec = {"name": "twin", "instance": "local", "nodes": 2, "processes_per_node": 1, "launcher": "torchrun",
                "command": ["examples/train_resilient.py"], "checkpoint_dir": "run", "time": "10",
                "env": {"TRAIN_STEPS": str(RESILIENT_STEPS), "STEP_SECONDS": "0.25"},
                "logs": {"output": "twin_%j.out"}}
        handles.append(submit(job_from_dict(spec), cluster.name, workdir=workdir))
    assert handles[0].job_id == handles[1].job_id == str(target)
    processes.wait_until(lambda: all(handle.state == "RUNNING" for handle in handles), 120,
                         "both jobs to run at once", interval=0.2)
    assert [handle.wait(timeout=180, poll=0.5) for handle in handles] == ["COMPLETED", "COMPLETED"]
    ports = []
    for cluster, handle in zip(clusters, handles):
        (line,) = [line for line in handle.stdout().splitlines() if line.startswith("clusterkit: rendezvous at ")]
        ports.append(int(line.rsplit(":", 1)[1]))
        assert ports[-1] == rendezvous_port(target, cluster.config.slurm_cluster_name)
        assert "training: world 2, starting" in handle.stdout()  # two worlds of two, not one of four
        assert (tmp_path / cluster.name / "run/final_weights.sha256").read_text().strip() == uninterrupted_digest
    assert ports[0] != ports[1]

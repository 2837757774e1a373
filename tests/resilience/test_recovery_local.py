"""HyperPod-style recovery on the real local cluster, with real PyTorch training (gloo, 2 nodes).

Each test submits examples/train_resilient.py under clusterkit's supervisor and injects one fault.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit import runtime
from clusterkit.jobs.spec import job_from_dict
from clusterkit.jobs.submit import submit
from clusterkit.providers.local import processes

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
from tests.conftest import RESILIENT_STEPS as STEPS


def training_spec(fault: str = "", hang_timeout: int = 0, app_retries: int = 1, max_restarts: int = 3,
                  **supervise: int) -> dict:
    return {
        "name": f"train-{fault or 'plain'}", "instance": "local", "nodes": 2, "processes_per_node": 1,
        "launcher": "torchrun", "command": ["examples/train_resilient.py"], "checkpoint_dir": "run",
        "max_restarts": max_restarts, "time": "10",
        "supervise": {"hang_timeout": hang_timeout, "app_retries": app_retries, **supervise},
        "env": {"TRAIN_STEPS": str(STEPS), "STEP_SECONDS": "0.15", "EXAMPLE_FAULT": fault},
        "logs": {"output": "train_%j.out"},
    }


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "examples").symlink_to(REPO / "examples")
    return tmp_path


def decisions(workdir: Path) -> list[dict]:
    return runtime.read_decisions(workdir / "run/.clusterkit/decisions.jsonl")


def wait_for_log(handle, text: str, timeout: float = 60) -> None:
    processes.wait_until(lambda: text in handle.stdout(), timeout, f"{text!r} in the job's log", interval=0.2)


def test_node_crash_resumes_from_last_checkpoint_on_healthy_nodes_bit_identical(
        local_cluster, workdir, uninterrupted_digest):
    handle = submit(job_from_dict(training_spec()), local_cluster.name, workdir=workdir)
    wait_for_log(handle, "checkpoint at step 20")
    first_nodes = local_cluster.slurm().job_details(handle.job_id)["NodeList"]
    victim = sorted(local_cluster.slurm().run("scontrol", "show", "hostnames", first_nodes).stdout.split())[-1]
    local_cluster.crash_node(victim)
    try:
        assert handle.wait(timeout=180, poll=0.5) == "COMPLETED"
    finally:
        local_cluster.start_node(victim)
        local_cluster.heal(victim)
    log = handle.stdout()
    resumed_from = int(log.split("resuming from step ")[1].split()[0])
    assert resumed_from >= 20
    attempts = handle.attempts()
    assert attempts[0].base_state == "NODE_FAIL" and attempts[-1].base_state == "COMPLETED"
    assert victim not in local_cluster.slurm().run("scontrol", "show", "hostnames",
                                                 attempts[-1].node_list).stdout.split()
    assert (workdir / "run/final_weights.sha256").read_text().strip() == uninterrupted_digest


def test_a_killed_training_process_on_healthy_nodes_is_retried_within_budget(local_cluster, workdir,
                                                                            uninterrupted_digest):
    handle = submit(job_from_dict(training_spec("crash-once")), local_cluster.name, workdir=workdir)
    assert handle.wait(timeout=180, poll=0.5) == "COMPLETED"
    made = [d["decision"] for d in decisions(workdir)]
    assert made == ["application_error", "completed"], made
    made_with = decisions(workdir)[0]
    assert "retrying the step (1 of 1)" in made_with["evidence"]
    # torchrun's report names the rank (and its host, as torchrun resolves it) and its signal: not "step exited 1"
    assert re.match(r"rank 1 on \S+ killed by SIGKILL \(out of memory\?\), step exited 1 ", made_with["evidence"])
    assert len(handle.attempts()) == 1  # retried inside the allocation, no requeue
    assert (workdir / "run/final_weights.sha256").read_text().strip() == uninterrupted_digest


def test_an_application_that_always_fails_stops_after_its_budget(local_cluster, workdir):
    handle = submit(job_from_dict(training_spec("always")), local_cluster.name, workdir=workdir)
    assert handle.wait(timeout=180, poll=0.5) == "FAILED"
    made = decisions(workdir)
    assert [d["decision"] for d in made] == ["application_error", "application_error"]
    assert "the application fails; stopping" in made[-1]["evidence"]
    assert len(handle.attempts()) == 1  # no requeue, let alone an endless one
    assert "injected application error" in handle.stdout()


def test_a_hung_rank_is_detected_and_the_step_recovers(local_cluster, workdir, uninterrupted_digest):
    handle = submit(job_from_dict(training_spec("hang-once", hang_timeout=8)), local_cluster.name,
                        workdir=workdir)
    assert handle.wait(timeout=240, poll=0.5) == "COMPLETED"
    made = decisions(workdir)
    assert [d["decision"] for d in made] == ["hang", "completed"], made
    assert "made no progress past step" in made[0]["evidence"]
    assert (workdir / "run/final_weights.sha256").read_text().strip() == uninterrupted_digest


def test_a_step_stuck_before_its_first_heartbeat_is_a_hang_and_recovers(local_cluster, workdir,
                                                                        uninterrupted_digest):
    spec = training_spec("stuck-start-once", hang_timeout=8, startup_timeout=25)
    handle = submit(job_from_dict(spec), local_cluster.name, workdir=workdir)
    assert handle.wait(timeout=240, poll=0.5) == "COMPLETED", handle.stdout()[-3000:]
    made = decisions(workdir)
    assert [d["decision"] for d in made] == ["hang", "completed"], made
    assert "no rank sent a heartbeat within 25 s of the step's start" in made[0]["evidence"]
    assert len(handle.attempts()) == 1  # retried on the same, healthy, nodes
    assert (workdir / "run/final_weights.sha256").read_text().strip() == uninterrupted_digest


def test_a_node_failing_its_health_check_is_drained_and_the_job_requeued(local_cluster, workdir,
                                                                        uninterrupted_digest):
    handle = submit(job_from_dict(training_spec("crash-once")), local_cluster.name, workdir=workdir)
    wait_for_log(handle, "checkpoint at step 10")
    nodes = local_cluster.slurm().run("scontrol", "show", "hostnames",
                                    local_cluster.slurm().job_details(handle.job_id)["NodeList"]).stdout.split()
    sick = nodes[-1]
    local_cluster.fail_health(sick, "GPU 3 fell off the bus (injected)")
    try:
        assert handle.wait(timeout=180, poll=0.5) == "COMPLETED"
        node = {n.name: n for n in local_cluster.slurm().nodes()}[sick]
        assert node.base_state == "drain" and "GPU 3 fell off the bus" in node.reason
    finally:
        local_cluster.heal(sick)
    made = decisions(workdir)
    assert made[0]["decision"] == "node_failure" and made[0]["nodes"] == [sick]
    assert made[-1]["decision"] == "completed"
    assert [a.base_state for a in handle.attempts()][-1] == "COMPLETED" and len(handle.attempts()) == 2
    assert (workdir / "run/final_weights.sha256").read_text().strip() == uninterrupted_digest


def test_watch_resubmits_a_job_slurm_did_not_requeue_without_the_bad_node(local_cluster, workdir,
                                                                          uninterrupted_digest):
    spec = training_spec()
    spec["requeue"] = False  # Slurm ends it NODE_FAIL; only the watcher can bring it back
    handle = submit(job_from_dict(spec), local_cluster.name, workdir=workdir)
    wait_for_log(handle, "checkpoint at step 20")
    nodes = local_cluster.slurm().run("scontrol", "show", "hostnames",
                                    local_cluster.slurm().job_details(handle.job_id)["NodeList"]).stdout.split()
    victim = nodes[-1]
    watcher = subprocess.Popen([sys.executable, "-m", "clusterkit", "watch", handle.job_id, "--resubmit",
                                "--cluster", local_cluster.name, "--output", "json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    local_cluster.crash_node(victim)
    try:
        out, err = watcher.communicate(timeout=240)
    finally:
        local_cluster.start_node(victim)
        local_cluster.heal(victim)
    assert watcher.returncode == 0, err
    result = json.loads(out)
    assert result["state"] == "COMPLETED" and result["resubmissions"] == 1
    assert any(f"excluding {victim}" in event for event in result["events"]), result["events"]
    status = json.loads(subprocess.run(
        [sys.executable, "-m", "clusterkit", "status", handle.job_id, "--cluster", local_cluster.name, "-o", "json"],
        capture_output=True, text=True, check=True).stdout)
    assert status["attempts"][0]["classification"] == "node_failure"
    assert (workdir / "run/final_weights.sha256").read_text().strip() == uninterrupted_digest

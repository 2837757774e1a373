"""Node replacement as clustermgtd does it, on a real local cluster whose replacer runs (`--replace-nodes`):
a failed node is terminated and a fresh one of the same name boots, so a job that needs every node resumes at
full size."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit import ClusterRequest, create_cluster
from clusterkit.jobs.attempts import merge_attempts
from clusterkit.jobs.spec import job_from_dict
from clusterkit.jobs.submit import submit
from clusterkit.pids import pid_alive
from clusterkit.providers.local import processes
from clusterkit.providers.local.cluster import LocalCluster
from clusterkit.providers.local.replacer import REPLACE_REASON, read_log
from clusterkit.slurm import AccountingRecord
from tests.resilience.resilience_helpers import assert_the_ledger_adds_up
from tests.conftest import uninterrupted_digest_of
from tests.resilience.test_recovery_local import training_spec, wait_for_log

REPO = Path(__file__).resolve().parents[2]
BOOT_DELAY = 2.0


@pytest.fixture
def replacing_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """Two nodes (or as the test's `nodes` parameter says), test timings, with the replacer (1 s loop) and a boot
    delay of its own."""
    cluster = create_cluster(ClusterRequest("repl", provider="local", nodes=getattr(request, "param", 2),
                                            replace_nodes=True, boot_delay=BOOT_DELAY))
    try:
        yield cluster
    finally:
        pids = list(LocalCluster.get("repl").pids.values())
        LocalCluster.get("repl").delete()
        assert not [pid for pid in pids if pid_alive(pid)]


def state(cluster: LocalCluster, node: str) -> str:
    return {n.name: n for n in cluster.slurm().nodes()}[node].state


def seconds_between(start: str, end: str) -> float:
    return (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()


@pytest.mark.slurm
def test_a_crashed_node_is_replaced_after_the_boot_delay_and_a_merely_silent_one_is_not(replacing_cluster):
    cluster = replacing_cluster
    described = json.loads(subprocess.run([sys.executable, "-m", "clusterkit", "describe-cluster", "repl", "-o",
                                           "json"], capture_output=True, text=True, check=True).stdout)
    assert described["daemons"]["replacer"] and described["timings"]["replace_nodes"]
    old_slurmd = cluster.pids["slurmd-n2"]
    cluster.fail_health("n2", "a fault the replacement must not inherit")
    cluster.crash_node("n2")
    processes.wait_until(lambda: "n2" in cluster.replacements(), 30, "the replacer to take n2", interval=0.2)
    processes.wait_until(lambda: not cluster.replacements()["n2"].in_progress, 30, "n2's replacement to boot",
                         interval=0.2)
    replacement = cluster.replacements()["n2"]
    assert replacement.ready_at is not None
    assert seconds_between(replacement.terminated_at, replacement.ready_at) >= BOOT_DELAY - 1  # stamps are whole s
    assert replacement.replaced_because.startswith("down")
    processes.wait_until(lambda: state(cluster, "n2") == "idle", 20, "n2 to serve", interval=0.2)
    fresh = LocalCluster.get("repl").pids["slurmd-n2"]
    assert fresh != old_slurmd and pid_alive(fresh)
    assert not (cluster.layout.faults / "n2").exists()  # a fresh node has no fault

    # Silent, not down: a frozen node is Slurm's to judge; the replacer waits until Slurm marks it down.
    cluster.freeze_node("n1")
    time.sleep(2)
    assert "n1" not in cluster.replacements()
    processes.wait_until(lambda: "n1" in cluster.replacements(), 40, "n1, once down, to be replaced", interval=0.2)
    processes.wait_until(lambda: state(cluster, "n1") == "idle", 40, "n1's replacement to serve", interval=0.2)
    log = (cluster.layout.log / "replacements.jsonl").read_text().splitlines()
    assert [(json.loads(line)["node"], json.loads(line)["event"]) for line in log] == [
        ("n2", "terminated"), ("n2", "ready"), ("n1", "terminated"), ("n1", "ready")]


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.parametrize("replacing_cluster", [4], indirect=True)
def test_a_job_that_needs_every_node_resumes_at_full_size_on_the_replacement_bit_identical(
        replacing_cluster, tmp_path):
    cluster = replacing_cluster
    (tmp_path / "examples").symlink_to(REPO / "examples")
    spec = training_spec()
    spec["nodes"] = 4  # every node of this cluster
    handle = submit(job_from_dict(spec), cluster.name, workdir=tmp_path)
    uninterrupted = uninterrupted_digest_of(4, tmp_path / "uninterrupted")  # meanwhile, the same run never stopped
    wait_for_log(handle, "checkpoint at step 20", timeout=120)
    cluster.crash_node("n3")
    processes.wait_until(lambda: "n3" in cluster.replacements(), 60, "n3's replacement to start", interval=0.2)
    assert handle.wait(timeout=240, poll=0.5) == "COMPLETED", handle.stdout()[-3000:]
    attempts = handle.attempts()
    assert attempts[0].base_state == "NODE_FAIL" and attempts[-1].base_state == "COMPLETED"
    assert cluster.slurm().hostnames(attempts[-1].node_list) == ["n1", "n2", "n3", "n4"]  # full size, n3 fresh
    log = handle.stdout()
    assert "training: world 4, resuming from step " in log
    assert int(log.split("resuming from step ")[1].split()[0]) >= 20
    assert (tmp_path / "run/final_weights.sha256").read_text().strip() == uninterrupted
    assert {n.name: n for n in cluster.slurm().nodes()}["n2"].reason != REPLACE_REASON
    # status explains the recovery: n3 marked, its replacement ready, training on from the checkpoint it loaded.
    [recovery] = [r for attempt in handle.status().attempts for r in attempt.recoveries]
    resumed_from = int(log.split("resuming from step ")[1].split()[0])
    assert "n3" in recovery.nodes and recovery.action == "requeued", recovery
    assert recovery.replacement_ready_at is not None and recovery.resumed_at is not None, recovery
    assert recovery.resumed_from_step == resumed_from and recovery.seconds_to_resume > 0, recovery
    assert recovery.steps_lost == recovery.last_step_before - resumed_from >= 0, recovery
    assert assert_the_ledger_adds_up(handle)["recovery"] >= BOOT_DELAY  # the wait for the replacement is recovery


def test_status_says_a_pending_job_waits_for_the_replacement_of_the_node_it_needs(tmp_path):
    log = tmp_path / "replacements.jsonl"
    log.write_text(json.dumps({"node": "n3", "event": "terminated", "at": "2026-01-01T00:00:00+00:00",
                               "ready_by": "2026-01-01T00:00:30+00:00", "because": "down*: Not responding"}) + "\n"
                   + json.dumps({"node": "n1", "event": "terminated", "at": "2026-01-01T00:00:00+00:00",
                                 "ready_by": "2026-01-01T00:00:30+00:00"}) + "\n"
                   + json.dumps({"node": "n1", "event": "ready", "at": "2026-01-01T00:00:31+00:00"}) + "\n"
                   + '{"node": "n4", "event": "termin')  # cut short by a crash of the replacer
    replacements = read_log(log)
    assert tuple(node for node, replacement in replacements.items() if replacement.in_progress) == ("n3",)
    controller = {"JobState": "PENDING", "Restarts": "1", "StartTime": "Unknown",
                  "Reason": "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_"
                            "partitions"}
    accounting = [AccountingRecord("7", "train", "NODE_FAIL", "1:0", "n[1-4]", "2026-01-01T00:00:00", "x"),
                  AccountingRecord("7", "train", "PENDING", "0:0", "None assigned", "Unknown", "Unknown")]
    pending = merge_attempts("7", accounting, controller, [], replacements)[-1]
    assert pending.classification == ("pending: Nodes required for job are DOWN, DRAINED or reserved for jobs in "
                                      "higher priority partitions; waiting for n3's replacement")
    # Waiting for something else (its priority), a replacement elsewhere is no part of the story.
    other = merge_attempts("7", accounting, {**controller, "Reason": "Priority"}, [], replacements)[-1]
    assert other.classification == "pending: Priority"

"""The replace drill of SageMaker HyperPod, on a real local cluster standing in for HyperPod's node recovery
(`--replacement hyperpod`): the node is marked `State=FAIL Reason=Action:Replace` as HyperPod's health agent marks
it while the training runs on; clusterkit's supervisor (which knows HyperPod by the resource config the cluster's
nodes carry) sees the mark, has the ranks save, and requeues the job without marking the node again; the replacer
replaces the node once the job has left it, and the job resumes at full size from the checkpoint it saved.
Then HyperPod's other request, `Action:Reboot`, and a plain DOWN node, which HyperPod's replacement leaves alone."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from clusterkit import ClusterRequest, create_cluster
from clusterkit.jobs.spec import job_from_dict
from clusterkit.jobs.submit import submit
from clusterkit.pids import pid_alive
from clusterkit.providers.local import processes
from clusterkit.providers.local.cluster import LocalCluster
from clusterkit.slurm import REBOOT_REASON, REPLACE_REASON
from tests.resilience.resilience_helpers import assert_the_ledger_adds_up
from tests.resilience.test_recovery_local import decisions, training_spec, wait_for_log
from tests.resilience.test_replacement_local import REPO, state

BOOT_DELAY = 2.0
NAME = "hprepl"


@pytest.fixture
def hyperpod_cluster() -> Iterator[LocalCluster]:
    """Two nodes at test timings whose replacer acts as HyperPod's node recovery (1 s loop, a 2 s boot)."""
    cluster = create_cluster(ClusterRequest(NAME, provider="local", nodes=2, replacement="hyperpod",
                                            boot_delay=BOOT_DELAY))
    try:
        yield cluster
    finally:
        pids = list(LocalCluster.get(NAME).pids.values())
        LocalCluster.get(NAME).delete()
        assert not [pid for pid in pids if pid_alive(pid)]


def reasons_set(cluster: LocalCluster, node: str) -> list[str]:
    """Every reason the controller was asked to give `node`, in order (slurmctld's log)."""
    log = (cluster.layout.log / "slurmctld.log").read_text()
    return re.findall(rf"update_node: node {node} reason set to: (.*)", log)


def training_processes(cluster: LocalCluster, node: str) -> list[int]:
    def command(pid: int) -> str:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                return handle.read().decode(errors="replace")
        except OSError:
            return ""

    return [pid for pid in cluster.node_processes(node) if "train_resilient.py" in command(pid)]


@pytest.mark.slurm
@pytest.mark.slow
def test_a_node_marked_for_hyperpods_replacement_is_replaced_once_the_job_left_it_and_the_job_resumes_bit_identical(
        hyperpod_cluster, tmp_path, uninterrupted_digest):
    cluster = hyperpod_cluster
    assert cluster.describe().details["timings"]["replacement"] == "hyperpod"  # type: ignore[index]
    (tmp_path / "examples").symlink_to(REPO / "examples")
    spec = training_spec()
    # The supervisor reads the marks every MARK_CHECK_S (5 s): the 20 steps left after the mark take longer than that,
    # else the run can finish before it moves (and then rightly stays).
    spec["env"]["STEP_SECONDS"] = "0.5"
    handle = submit(job_from_dict(spec), cluster.name, workdir=tmp_path)  # 2 nodes: every node
    wait_for_log(handle, "checkpoint at step 20", timeout=120)
    assert state(cluster, "n2") in ("alloc", "mix")
    assert training_processes(cluster, "n2")
    cluster.slurm().update_node("n2", "FAIL", REPLACE_REASON)  # as HyperPod's health agent marks a faulty node
    assert state(cluster, "n2") in ("fail", "failg")  # sinfo: `fail` for a node the job uses in part
    # HyperPod replaces the node only once no job holds it (the replacer's unit tests): the supervisor has the ranks
    # save, then moves the run off it.
    wait_for_log(handle, "saving and moving off it", timeout=30)
    processes.wait_until(lambda: "n2" in cluster.replacements(), 60, "n2's replacement to start", interval=0.2)
    assert handle.wait(timeout=240, poll=0.5) == "COMPLETED", handle.stdout()[-3000:]
    replacement = cluster.replacements()["n2"]
    assert replacement.ready_at is not None and replacement.replaced_because == f"fail: {REPLACE_REASON}"
    attempts = handle.attempts()
    assert len(attempts) == 2 and attempts[-1].base_state == "COMPLETED"
    assert cluster.slurm().hostnames(attempts[-1].node_list) == ["n1", "n2"]  # full size, n2 fresh
    log = handle.stdout()
    resumed_from = int(log.split("resuming from step ")[1].split()[0])
    assert "training: world 2, resuming from step " in log and resumed_from >= 20
    assert "stopping at step " in log, log[-3000:]
    saved_at = int(log.split("stopping at step ")[1].split()[0])
    assert resumed_from == saved_at, log[-3000:]  # saved on the way off the node: no step lost
    assert (tmp_path / "run/final_weights.sha256").read_text().strip() == uninterrupted_digest
    # The supervisor knew HyperPod (the node's resource config): it left HyperPod's mark alone, and spent one restart.
    assert reasons_set(cluster, "n2") == [REPLACE_REASON]
    [failure] = [made for made in decisions(tmp_path) if made["decision"] == "node_failure"]
    assert "n2" in failure["evidence"] and "fail" in failure["evidence"], failure
    # status explains the recovery: n2 marked, its replacement ready, training on from the checkpoint it loaded.
    [recovery] = [r for attempt in handle.status().attempts for r in attempt.recoveries]
    assert "n2" in recovery.nodes and recovery.action == "requeued", recovery
    assert recovery.replacement_ready_at is not None and recovery.resumed_at is not None, recovery
    assert recovery.resumed_from_step == resumed_from and recovery.seconds_to_resume > 0, recovery
    assert recovery.steps_lost == 0, recovery
    assert assert_the_ledger_adds_up(handle)["recovery"] >= BOOT_DELAY  # the wait for the replacement is recovery
    assert state(cluster, "n2") == "idle"

    # A node merely DOWN is not HyperPod's to replace (clustermgtd's would be); marked for a reboot, it is started
    # again as the same node: its fault stays, where a replacement's fresh node has none.
    cluster.fail_health("n1", "a fault a reboot keeps")
    old_slurmd = cluster.pids["slurmd-n1"]
    cluster.slurm().update_node("n1", "DOWN", "clusterkit: a fault a reboot keeps")
    time.sleep(2.5)
    assert "n1" not in cluster.replacements() and state(cluster, "n1") == "down"
    cluster.slurm().update_node("n1", "FAIL", REBOOT_REASON)
    processes.wait_until(lambda: "n1" in cluster.replacements() and cluster.replacements()["n1"].ready_at, 30,
                         "n1's reboot", interval=0.2)
    processes.wait_until(lambda: state(cluster, "n1") == "idle", 20, "n1 to serve", interval=0.2)
    assert LocalCluster.get(NAME).pids["slurmd-n1"] != old_slurmd and not pid_alive(old_slurmd)
    assert (cluster.layout.faults / "n1").read_text() == "a fault a reboot keeps\n"
    assert not (cluster.layout.faults / "n2").exists()

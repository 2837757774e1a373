"""A silent node found in seconds at ParallelCluster's own Slurm timings (SlurmdTimeout 180 s, MessageTimeout 60 s,
cred_expire 70 s), on a real local cluster: by the supervisor for a node of the step, by the cluster agent for the
batch host. A frozen node stands for a real loss (silence, not a reset): Slurm alone would take minutes."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from clusterkit import ClusterRequest, create_cluster, runtime
from clusterkit.jobs.handle import JobHandle
from clusterkit.jobs.recoveries import parse_tries
from clusterkit.jobs.spec import job_from_dict
from clusterkit.jobs.submit import submit
from clusterkit.providers.local.cluster import LocalCluster
from clusterkit.resilience.agent import AgentEvent, read_agent_log

from tests.resilience.resilience_helpers import assert_the_ledger_adds_up
from tests.resilience.test_recovery_local import decisions, training_spec, wait_for_log, workdir  # noqa: F401

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture(scope="module")
def production_cluster() -> Iterator[LocalCluster]:
    cluster = create_cluster(ClusterRequest("prod", provider="local", nodes=4, timings="parallelcluster",
                                            replace_nodes=False))
    try:
        yield cluster
    finally:
        LocalCluster.get("prod").delete()


def started_again(log: str) -> float:
    """When the supervisor last started the step (its own line: 'starting the step ... at UNIX')."""
    return float(re.findall(r"starting the step \(attempt [^)]*\) on \S+ at ([\d.]+)", log)[-1])


def with_a_spare_past_step_20(cluster: LocalCluster, workdir) -> tuple[JobHandle, list[str], str]:  # noqa: ANN001
    """The training on 2 nodes and a spare, once it saved at step 20: its handle, the nodes it holds, its batch host."""
    handle = submit(job_from_dict(training_spec(spares=1)), cluster.name, workdir=workdir)
    wait_for_log(handle, "checkpoint at step 20", timeout=120)
    details = cluster.slurm().job_details(handle.job_id)
    return handle, cluster.slurm().hostnames(details["NodeList"]), details["BatchHost"]


def thaw(cluster: LocalCluster, node: str) -> None:
    cluster.thaw_node(node)
    cluster.slurm().update_node(node, "RESUME")


def frozen_until_done(cluster: LocalCluster, handle: JobHandle, node: str) -> tuple[float, list[AgentEvent]]:
    """Freeze `node` until the job completes: when it froze, and what the agent did about the job."""
    frozen = time.time()
    cluster.freeze_node(node)
    try:
        assert handle.wait(timeout=240, poll=0.5) == "COMPLETED", handle.stdout()[-3000:]
    finally:
        thaw(cluster, node)
    return frozen, [event for event in read_agent_log(cluster.agent_log) if event.job == handle.job_id]


def test_a_frozen_step_node_is_marked_down_and_the_spare_takes_over_within_20_s(
        production_cluster, workdir, uninterrupted_digest):  # noqa: F811
    cluster = production_cluster
    handle, held, batch_host = with_a_spare_past_step_20(cluster, workdir)
    (victim,) = [node for node in held[:2] if node != batch_host]
    frozen = time.time()
    cluster.freeze_node(victim)
    try:
        assert handle.wait(timeout=180, poll=0.5) == "COMPLETED", handle.stdout()[-3000:]
        (gone,) = [node for node in cluster.slurm().nodes() if node.name == victim]
        assert gone.base_state == "down" and "liveness beacon silent" in gone.reason, gone
    finally:
        thaw(cluster, victim)
    made = decisions(workdir)
    assert [d["decision"] for d in made] == ["node_failure", "completed"], made
    assert made[0]["action"] == "relaunch" and made[0]["marked_down"] == [victim]
    assert f"{victim}'s liveness beacon silent" in made[0]["evidence"]
    log = handle.stdout()
    assert started_again(log) - frozen <= 20, log[-3000:]  # Slurm alone: SlurmdTimeout, 180 s
    assert int(log.split("resuming from step ")[1].split()[0]) >= 20
    assert (workdir / "run/final_weights.sha256").read_text().strip() == uninterrupted_digest


def test_a_frozen_batch_host_is_marked_down_by_the_agent_and_the_job_resumes_elsewhere_within_45_s(
        production_cluster, workdir, uninterrupted_digest):  # noqa: F811
    cluster = production_cluster
    handle = submit(job_from_dict(training_spec()), cluster.name, workdir=workdir)
    wait_for_log(handle, "checkpoint at step 20", timeout=120)
    batch_host = cluster.slurm().job_details(handle.job_id)["BatchHost"]
    frozen, acts = frozen_until_done(cluster, handle, batch_host)
    marked = [event for event in acts if event.event == "marked_down"]
    assert [event.node for event in marked] == [batch_host], acts
    assert marked[0].unix - frozen <= 15 and "liveness beacon silent" in marked[0].evidence
    log = handle.stdout()
    assert "ended NODE_FAIL and Slurm requeued the job" in log
    assert started_again(log) - frozen <= 45, (log[-3000:], acts)  # Slurm alone: minutes
    assert (workdir / "run/final_weights.sha256").read_text().strip() == uninterrupted_digest
    # status tells the story though the supervisor that saw it begin died: the agent's evidence, when training
    # went on and from which checkpoint.
    [recovery] = [r for attempt in handle.status().attempts for r in attempt.recoveries]
    assert recovery.marked_down == (batch_host,) and "liveness beacon silent" in recovery.evidence, recovery
    assert 0 < recovery.seconds_to_resume <= 45 and recovery.resumed_from_step >= 20, recovery
    assert recovery.steps_lost == recovery.last_step_before - recovery.resumed_from_step >= 0, recovery
    spent = assert_the_ledger_adds_up(handle)
    assert spent["detection"] > 0 and spent["recovery"] > 0, spent


def test_a_frozen_batch_host_of_a_job_with_a_spare_frees_its_other_nodes_at_once_and_the_job_resumes_within_45_s(
        production_cluster, workdir, uninterrupted_digest):  # noqa: F811
    # The requeued job needs 3 of the 3 nodes left, 2 of which hold step daemons that report to the frozen host and
    # would wait for it 6 x MessageTimeout (360 s); the agent ends them and lets the nodes go at once.
    cluster = production_cluster
    handle, held, batch_host = with_a_spare_past_step_20(cluster, workdir)
    frozen, acts = frozen_until_done(cluster, handle, batch_host)
    let_go = {event.node for event in acts if event.event == "let_go"}
    returned = {event.node for event in acts if event.event == "returned"}
    assert let_go == returned == set(held) - {batch_host}, acts
    assert all("stale step daemons ended" in event.evidence for event in acts if event.event == "returned"), acts
    log = handle.stdout()
    assert started_again(log) - frozen <= 45, (log[-3000:], acts)  # waiting them out: 360 s and more
    assert not [r for r in cluster.slurm().run("scontrol", "show", "reservation").stdout.splitlines()
                if "clusterkit-linger" in r]
    assert (workdir / "run/final_weights.sha256").read_text().strip() == uninterrupted_digest


def test_a_hung_rank_with_every_slurmd_alive_is_found_within_the_hang_timeout_and_the_step_retried(
        production_cluster, workdir, uninterrupted_digest):  # noqa: F811
    # Slurm and clustermgtd see nothing here (every slurmd answers); PyTorch's watchdog would wait 480-600 s.
    handle = submit(job_from_dict(training_spec("hang-once", hang_timeout=15)), production_cluster.name,
                    workdir=workdir)
    assert handle.wait(timeout=240, poll=0.5) == "COMPLETED", handle.stdout()[-3000:]
    made = decisions(workdir)
    assert [d["decision"] for d in made] == ["hang", "completed"], made
    hung, retried = parse_tries(runtime.read_decisions(workdir / "run" / ".clusterkit" / runtime.TRIES_FILE))
    # Seen once the timeout passed (on the supervisor's clock, from when it saw the last step), then decided after
    # a 2 s stop (the ranks wait in a collective: nothing to save) and the nodes' health check.
    assert 15 <= int(re.search(r"for (\d+) s", made[0]["evidence"]).group(1)) <= 17, made[0]
    assert made[0]["unix"] - hung.last_time <= 15 + 15, (made[0], hung)
    assert retried.first_time - hung.last_time <= 60, (made[0], hung, retried)  # and the restart
    assert retried.resumed_from is not None and retried.resumed_from <= hung.last_step
    acts = [event.event for event in read_agent_log(production_cluster.agent_log) if event.job == handle.job_id]
    assert "marked_down" not in acts and "nodes" not in made[0], (acts, made[0])  # no node was judged bad
    assert 15 <= assert_the_ledger_adds_up(handle)["hang"] <= 30
    assert (workdir / "run/final_weights.sha256").read_text().strip() == uninterrupted_digest

"""Recovery inside the allocation on the real local cluster: a 2-node job with a spare (3 nodes held, --no-kill)
loses a node of its step and goes on on the healthy node and the spare, in the same job, without a requeue."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from clusterkit.jobs.spec import job_from_dict
from clusterkit.jobs.submit import submit

from tests.resilience.resilience_helpers import assert_the_ledger_adds_up
from tests.resilience.test_recovery_local import decisions, training_spec, wait_for_log, workdir  # noqa: F401

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_a_crashed_step_node_is_replaced_by_the_spare_in_the_same_allocation_bit_identical(
        local_cluster, workdir, uninterrupted_digest):  # noqa: F811
    spec = training_spec(spares=1)
    handle = submit(job_from_dict(spec), local_cluster.name, workdir=workdir)
    wait_for_log(handle, "checkpoint at step 20")
    slurm = local_cluster.slurm()
    details = slurm.job_details(handle.job_id)
    held = slurm.hostnames(details["NodeList"])
    batch_host = details["BatchHost"]
    step_nodes, spare = held[:2], held[2]
    assert len(held) == 3 and batch_host in step_nodes, (held, batch_host)
    # The batch host keeps the supervisor: the other node of the step dies.
    (victim,) = [node for node in step_nodes if node != batch_host]
    local_cluster.crash_node(victim)
    try:
        assert handle.wait(timeout=120, poll=0.5) == "COMPLETED", handle.stdout()[-3000:]
    finally:
        local_cluster.start_node(victim)
        local_cluster.heal(victim)
    made = decisions(workdir)
    assert [d["decision"] for d in made] == ["node_failure", "completed"], made
    relaunch = made[0]
    assert relaunch["action"] == "relaunch" and relaunch["nodes"] == [victim], relaunch
    assert relaunch["relaunched_on"] == [batch_host, spare] and "in the same allocation" in relaunch["evidence"]
    assert relaunch["attempt"] == made[1]["attempt"] == f"{handle.job_id}.0"
    # One attempt, no requeue: accounting's other record is the part before Slurm took the dead node out of the
    # allocation (RESIZING): the node went back.
    assert [a.base_state for a in handle.attempts()] == ["RESIZING", "COMPLETED"]
    log = handle.stdout()
    assert int(log.split("resuming from step ")[1].split()[0]) >= 20  # at most one checkpoint interval lost
    assert (workdir / "run/final_weights.sha256").read_text().strip() == uninterrupted_digest
    status = json.loads(subprocess.run(
        [sys.executable, "-m", "clusterkit", "status", handle.job_id, "--cluster", local_cluster.name, "-o", "json"],
        capture_output=True, text=True, check=True).stdout)
    (only,) = status["attempts"]
    assert only["classification"] == "completed"
    (recovery,) = only["recoveries"]
    assert recovery["action"] == "relaunched" and recovery["relaunched_on"] == [batch_host, spare], recovery
    assert victim in recovery["nodes"] and recovery["resumed_from_step"] >= 20, recovery
    assert 0 < recovery["seconds_to_resume"] < 60 and recovery["steps_lost"] >= 0, recovery
    table = subprocess.run([sys.executable, "-m", "clusterkit", "status", handle.job_id, "--cluster",
                            local_cluster.name], capture_output=True, text=True, check=True).stdout
    assert f"relaunched on {batch_host},{spare}; resumed " in table and re.search(r"\d+ steps? lost", table), table
    assert assert_the_ledger_adds_up(handle)["detection"] > 0

"""clusterkit's supervisor and SageMaker HyperPod's recovery do not fight: one failure spends the restart budget once.

The design: under the supervisor the step is rendered without HyperPod's `--auto-resume=1` (tests/jobs: its golden
file), so the supervisor alone restarts the step; HyperPod's part is the node's replacement, which the supervisor asks
for (node_marks.py) unless HyperPod's health agent marked the node first. Both orders are run here with real step
processes and a scripted Slurm, for a node failure and for an application error, across the requeue."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.jobs.render import render_sbatch
from clusterkit.resilience import decisions
from clusterkit.resilience.decisions import Action, Health, Kind, Outcome, decide
from clusterkit.resilience.run_state import RunState
from clusterkit.resilience.supervisor import Supervisor
from clusterkit.slurm import REPLACE_REASON, Flavor

from tests.fakes import ScriptedSlurm
from tests.resilience.test_supervisor_decisions import in_a_job  # noqa: F401  (autouse: in a job)
from tests.resilience.test_supervisor_decisions import supervise as supervise_on_slurm
from tests.jobs.helpers import make_spec


def supervise(tmp_path: Path, step: str, slurm: ScriptedSlurm, **settings: object) -> tuple[int, list[dict]]:
    """The supervisor on HyperPod (test_supervisor_decisions' helper, in a job there too)."""
    return supervise_on_slurm(tmp_path, step, slurm, **{"flavor": Flavor.HYPERPOD, **settings})


def failures(tmp_path: Path) -> int:
    return RunState(tmp_path / "state").load().failures


def test_the_supervised_step_leaves_restarting_to_the_supervisor():
    supervised = render_sbatch(make_spec(nodes=2, supervise=True, checkpoint_dir="/fsx/ck"), Flavor.HYPERPOD)
    assert "--auto-resume" not in supervised
    assert "srun --auto-resume=1" in render_sbatch(make_spec(nodes=2), Flavor.HYPERPOD)


def test_decide_spends_one_restart_for_a_node_hyperpod_marked_for_replacement():
    budget = decisions.Budget(max_restarts=3, app_retries=1)
    health = Health(bad_nodes=(("n2", "Slurm reports n2 failg"),))
    made = decide(Outcome(1, ("n1", "n2")), budget, health)
    assert (made.kind, made.action, made.budget.failures) == (Kind.NODE_FAILURE, Action.REQUEUE, 1)


def test_hyperpod_first_a_node_its_agent_marked_spends_the_budget_once(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    # HyperPod's health agent marked n2 for replacement while it ran the step, whose ranks there died.
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    slurm.node_states["n2"] = ("failg", REPLACE_REASON)
    code, made = supervise(tmp_path, "raise SystemExit(1)", slurm)
    assert [d["decision"] for d in made] == ["node_failure"] and made[0]["nodes"] == ["n2"]
    assert slurm.requeued == ["42"] and failures(tmp_path) == 1
    assert slurm.marks == []  # being replaced already: not marked again (a change could fail HyperPod's replacement)
    # The requeued attempt on the replacement: Slurm also recorded the first attempt NODE_FAIL. Nothing more is spent.
    slurm.node_states.clear()
    slurm.attempts["42"] = ["NODE_FAIL", "RUNNING"]
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    code, made = supervise(tmp_path, "raise SystemExit(0)", slurm)
    assert code == 0 and [d["decision"] for d in made] == ["node_failure", "completed"]
    assert failures(tmp_path) == 1


def test_supervisor_first_it_asks_for_the_replacement_and_spends_the_budget_once(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch):
    # The supervisor's health check finds n1 bad beside the step: it asks HyperPod to replace it, and requeues.
    slurm = ScriptedSlurm(sick={"n1": "GPU 3 fell off the bus"}, queued={"42": "RUNNING"})
    code, made = supervise(tmp_path, "import time; time.sleep(30)", slurm, precheck=True)
    assert [d["decision"] for d in made] == ["node_failure"] and made[0]["nodes"] == ["n1"]
    assert "GPU 3 fell off the bus" in made[0]["evidence"]  # the evidence is in the decision, not the node's reason
    assert slurm.marks == [("n1", "FAIL", "Action:Replace")] and slurm.requeued == ["42"]
    assert failures(tmp_path) == 1
    # HyperPod replaced n1 while the job was still there: Slurm ended that attempt NODE_FAIL. Spent once all the same.
    slurm.sick.clear()
    slurm.attempts["42"] = ["NODE_FAIL", "RUNNING"]
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    code, made = supervise(tmp_path, "raise SystemExit(0)", slurm)
    assert code == 0 and [d["decision"] for d in made] == ["node_failure", "completed"]
    assert failures(tmp_path) == 1 and slurm.marks == [("n1", "FAIL", "Action:Replace")]


def test_an_application_error_on_hyperpod_spends_once_per_failure_and_asks_for_no_replacement(tmp_path: Path):
    slurm = ScriptedSlurm(queued={"42": "RUNNING"})
    code, made = supervise(tmp_path, "raise SystemExit(3)", slurm)
    assert code == 3 and [d["decision"] for d in made] == ["application_error", "application_error"]
    # One retry spent one restart; the second failure stopped the run (app retries spent) without spending more.
    assert failures(tmp_path) == 1 and slurm.marks == [] and slurm.requeued == []

"""On SageMaker HyperPod the supervisor and the cluster agent ask HyperPod for a node's replacement, not only a drain:
the exact scontrol commands, through fake Slurm binaries, and how the on-cluster code knows it runs on HyperPod."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterkit import slurm as slurm_module
from clusterkit.resilience import agent as agent_module
from clusterkit.resilience import beacon
from clusterkit.resilience.agent import Agent, QueuedJob
from clusterkit.resilience.heartbeat import HEARTBEAT_DIR_ENV, heartbeat
from clusterkit.resilience.node_marks import NodeMark, marked_by_clusterkit, marks_for
from clusterkit.resilience.supervisor import Supervisor
from clusterkit.slurm import REPLACE_REASON, Flavor, Slurm, flavor_of
from clusterkit.transport import LOCAL

from tests.fakes import FakeSlurm, ScriptedSlurm


def test_stock_slurm_drains_a_sick_node_and_downs_a_gone_one_with_the_evidence():
    assert marks_for("n2", "GPU 3 fell off the bus", False, Flavor.STOCK) == (
        NodeMark("n2", "DRAIN", "clusterkit: GPU 3 fell off the bus"),)
    assert marks_for("n2", "silent", True, Flavor.STOCK, who="clusterkit agent") == (
        NodeMark("n2", "DOWN", "clusterkit agent: silent"),)


def test_hyperpod_marks_a_sick_node_fail_with_exactly_action_replace():
    assert marks_for("ip-10-1-2-3", "GPU 3 fell off the bus", False, Flavor.HYPERPOD) == (
        NodeMark("ip-10-1-2-3", "FAIL", "Action:Replace"),)


def test_hyperpod_marks_a_gone_node_down_with_the_evidence_first_then_fail_for_replacement():
    assert marks_for("ip-10-1-2-3", "beacon silent 4 s", True, Flavor.HYPERPOD) == (
        NodeMark("ip-10-1-2-3", "DOWN", "clusterkit: beacon silent 4 s"),
        NodeMark("ip-10-1-2-3", "FAIL", "Action:Replace"))


def test_evidence_is_cut_to_200_characters_and_the_next_attempt_reads_either_reason_as_clusterkits():
    (mark,) = marks_for("n1", "x" * 1000, False, Flavor.STOCK)
    assert len(mark.reason) == 200
    assert marked_by_clusterkit(mark.reason) and marked_by_clusterkit(REPLACE_REASON)
    assert not marked_by_clusterkit("Action:Replace.") and not marked_by_clusterkit("Not responding")


def test_a_node_knows_it_is_hyperpods_by_hyperpods_resource_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    config = tmp_path / "opt/ml/config/resource_config.json"
    monkeypatch.setattr(slurm_module, "HYPERPOD_RESOURCE_CONFIG", str(config))
    assert flavor_of(LOCAL) is Flavor.STOCK
    config.parent.mkdir(parents=True)
    config.write_text('{"InstanceGroups": []}')
    assert flavor_of(LOCAL) is Flavor.HYPERPOD
    assert flavor_of() is Flavor.HYPERPOD  # this machine's, by default
    # The supervisor and the agent take this node's flavor unless told.
    supervisor = Supervisor(["true"], tmp_path / "state", 3, 1, 0, 10, False, slurm=ScriptedSlurm())
    assert supervisor.flavor is Flavor.HYPERPOD


@pytest.fixture
def fake_scontrol(fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    """Slurm() runs the fake binaries: each scontrol call's argv is recorded."""
    monkeypatch.setenv("PATH", str(fake_slurm.bin))
    monkeypatch.setenv("CK_SHIM_LOG", str(fake_slurm.log))
    return fake_slurm


def scontrol_updates(fake: FakeSlurm) -> list[list[str]]:
    return sorted(call.argv for call in fake.calls("scontrol") if call.argv[:1] == ["update"])


@pytest.mark.parametrize(("flavor", "expected"), [
    (Flavor.STOCK, [["update", "NodeName=n2", "State=DRAIN", "Reason=clusterkit: EFA 2 of 4"]]),
    (Flavor.HYPERPOD, [["update", "NodeName=n2", "State=FAIL", "Reason=Action:Replace"]]),
])
def test_the_supervisor_asks_hyperpod_to_replace_a_sick_node(fake_scontrol: FakeSlurm, tmp_path: Path,
                                                              flavor: Flavor, expected: list[list[str]]):
    supervisor = Supervisor(["true"], tmp_path / "state", 3, 1, 0, 10, False, slurm=Slurm(), flavor=flavor)
    supervisor.drain((("n2", "EFA 2 of 4"),))
    assert scontrol_updates(fake_scontrol) == expected


def test_the_supervisor_downs_a_gone_node_then_asks_hyperpod_to_replace_it(fake_scontrol: FakeSlurm, tmp_path: Path):
    supervisor = Supervisor(["true"], tmp_path / "state", 3, 1, 0, 10, False, slurm=Slurm(), flavor=Flavor.HYPERPOD)
    supervisor.drain((("n2", "n2's beacon silent for 4 s"),), down=("n2",))
    assert scontrol_updates(fake_scontrol) == [
        ["update", "NodeName=n2", "State=DOWN", "Reason=clusterkit: n2's beacon silent for 4 s"],
        ["update", "NodeName=n2", "State=FAIL", "Reason=Action:Replace"]]
    # In that order: DOWN first, so that Slurm lets go of the node at once.
    scripted = ScriptedSlurm()
    in_order = Supervisor(["true"], tmp_path / "state2", 3, 1, 0, 10, False, slurm=scripted, flavor=Flavor.HYPERPOD)
    in_order.drain((("n2", "gone"),), down=("n2",))
    assert [state for _, state, _ in scripted.marks] == ["DOWN", "FAIL"]


class _AgentSlurm(ScriptedSlurm):
    """What the agent asks of Slurm: its config, and a probe that gets no answer."""

    def config(self) -> dict[str, str]:
        return {"AuthInfo": "cred_expire=70", "MessageTimeout": "10 sec"}


@pytest.mark.parametrize(("flavor", "states"), [(Flavor.STOCK, ["DOWN"]), (Flavor.HYPERPOD, ["DOWN", "FAIL"])])
def test_the_agent_asks_hyperpod_to_replace_a_silent_batch_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  flavor: Flavor, states: list[str]):
    slurm = _AgentSlurm(nodes=("ip-10-1-2-3",))
    monkeypatch.setattr(beacon, "probe", lambda *_args, **_kw: "srun on ip-10-1-2-3 got no answer within 3 s")
    agent = Agent(slurm, tmp_path / "agent.jsonl", silence_s=0.01, flavor=flavor)  # type: ignore[arg-type]
    monkeypatch.setattr(agent, "_requeue", lambda job: None)
    beacons = tmp_path / "beacons"
    beacons.mkdir()
    beacon.beat(beacons, "ip-10-1-2-3", 0)
    job = QueuedJob("42", "RUNNING", "ip-10-1-2-3", "None", "", "ip-10-1-2-3", str(beacons))
    agent._watch_nodes(job)  # its beat is new
    assert slurm.marks == []
    time.sleep(0.05)
    agent._watch_nodes(job)
    assert [state for _, state, _ in slurm.marks] == states
    assert slurm.marks[0][2].startswith("clusterkit agent: ")
    if flavor is Flavor.HYPERPOD:
        assert slurm.marks[1] == ("ip-10-1-2-3", "FAIL", "Action:Replace")
    (event,) = agent_module.read_agent_log(tmp_path / "agent.jsonl")
    assert event.event == "marked_down" and event.node == "ip-10-1-2-3"


def test_a_node_hyperpod_marked_for_replacement_is_a_bad_node_to_the_supervisor(tmp_path: Path):
    slurm = ScriptedSlurm(nodes=("n1", "n2"))
    slurm.node_states["n2"] = ("failg", REPLACE_REASON)  # FAILING: marked FAIL while it runs the job
    supervisor = Supervisor([sys.executable, "-c", "pass"], tmp_path / "state", 3, 1, 0, 10, False, slurm=slurm,
                            flavor=Flavor.HYPERPOD)
    bad = supervisor.unhealthy_nodes(["n1", "n2"])
    assert list(bad) == ["n2"] and "failg" in bad["n2"]


@pytest.mark.parametrize("reason", [REPLACE_REASON, "Action:Reboot"])
def test_a_step_node_hyperpod_marks_while_the_step_runs_on_has_the_ranks_save_then_moves_the_run_off_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reason: str):
    # HyperPod replaces a marked node only once no job holds it: a run that kept training on it would keep it (and
    # its fault) for days. The step is asked to save and stop (no stop listener here: SIGTERM), then it is a node
    # failure like any other, the node left as HyperPod marked it.
    from clusterkit.resilience import supervisor as supervisor_module

    monkeypatch.setattr(supervisor_module, "MARK_CHECK_S", 0.0)
    slurm = ScriptedSlurm(nodes=("n1", "n2", "n3"))
    slurm.node_states["n3"] = ("fail", REPLACE_REASON)  # not the step's: no reason to stop it
    supervisor = Supervisor(["true"], tmp_path / "state", 3, 1, 0, 10, False, slurm=slurm, flavor=Flavor.HYPERPOD)
    step = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        slurm.node_states["n2"] = ("mix", "")
        # Unmarked, the step runs on (until it ends by itself here).
        quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
        assert supervisor._watch(quick, tmp_path, None, (), ("n1", "n2")).exit_code == 0
        slurm.node_states["n2"] = ("failg", reason)
        outcome = supervisor._watch(step, tmp_path, None, (), ("n1", "n2"))
        stopped = step.poll()
    finally:
        step.kill()
    assert stopped == -signal.SIGTERM  # stopped by the supervisor
    assert outcome.exit_code is None and [node for node, _ in outcome.bad_nodes] == ["n2"]
    assert reason in outcome.bad_nodes[0][1] and not outcome.unreachable
    assert slurm.marks == []  # HyperPod's mark stays as it is


def test_a_step_that_finished_its_training_as_its_node_was_marked_is_not_moved(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch):
    # The mark is read every MARK_CHECK_S: the last steps can run meanwhile. A finished run is not requeued for it.
    from clusterkit.resilience import supervisor as supervisor_module

    monkeypatch.setattr(supervisor_module, "MARK_CHECK_S", 0.0)
    monkeypatch.setenv(HEARTBEAT_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    slurm = ScriptedSlurm(nodes=("n1", "n2"))
    slurm.node_states["n2"] = ("failg", REPLACE_REASON)
    supervisor = Supervisor(["true"], tmp_path / "state", 3, 1, 0, 10, False, slurm=slurm, flavor=Flavor.HYPERPOD)
    # Its one rank (world 1) said it finished; asked to stop, it exits 0.
    finished = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; "
                                 "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); time.sleep(60)"])
    heartbeat(40, done=True)
    outcome = supervisor._watch(finished, tmp_path, None, (), ("n1", "n2"))
    assert outcome.exit_code == 0 and not outcome.bad_nodes
    # One that has not finished is moved off the node, though it too exits 0 once it saved.
    (tmp_path / "rank-00000.hb").unlink()
    saved = subprocess.Popen(finished.args)
    outcome = supervisor._watch(saved, tmp_path, None, (), ("n1", "n2"))
    assert outcome.exit_code is None and [node for node, _ in outcome.bad_nodes] == ["n2"]


def test_on_stock_slurm_the_supervisor_does_not_read_node_states_while_the_step_runs(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch):
    from clusterkit.resilience import supervisor as supervisor_module

    monkeypatch.setattr(supervisor_module, "MARK_CHECK_S", 0.0)
    slurm = ScriptedSlurm(nodes=("n1", "n2"))
    slurm.node_states["n2"] = ("failg", REPLACE_REASON)
    supervisor = Supervisor(["true"], tmp_path / "state", 3, 1, 0, 10, False, slurm=slurm, flavor=Flavor.STOCK)
    quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    outcome = supervisor._watch(quick, tmp_path, None, (), ("n1", "n2"))
    assert outcome.exit_code == 0 and not outcome.bad_nodes

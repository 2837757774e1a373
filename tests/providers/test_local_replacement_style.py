"""Which nodes a local cluster's replacer takes, and what it does to them, under each replacement style: clustermgtd's
(every DOWN or DRAINED node) and SageMaker HyperPod's (only a node marked FAIL with HyperPod's exact reason, once
no job runs on it). Pure: nodes as `sinfo` shows them in, the replacer's work out."""

from __future__ import annotations

import json

import pytest

from clusterkit.errors import ClusterkitError
from clusterkit.providers import ClusterRequest, provider_named
from clusterkit.providers.base import NodeAction
from clusterkit.providers.local.cluster import LocalCluster
from clusterkit.providers.local.config import TIMINGS, LocalClusterState, ReplacementStyle, timings_named
from clusterkit.providers.local.replacer import NodeWork, work_for
from clusterkit.slurm import HYPERPOD_RESOURCE_CONFIG, NodeInfo

CLUSTERMGTD, HYPERPOD = ReplacementStyle.CLUSTERMGTD, ReplacementStyle.HYPERPOD
REPLACE, REBOOT = NodeWork.REPLACE, NodeWork.REBOOT

# (sinfo's short state, the reason) -> what clustermgtd's replacer does, what HyperPod's does.
CASES = [
    (("idle", ""), None, None),
    (("alloc", ""), None, None),
    (("mix", ""), None, None),
    (("down*", "Not responding"), REPLACE, None),  # a crashed node: clustermgtd's, not HyperPod's (no mark)
    (("down", "clusterkit: Xid 79"), REPLACE, None),
    (("drain", "clusterkit: health check failed"), REPLACE, None),
    (("drng", "clusterkit: health check failed"), None, None),  # still runs a job
    (("fail", "Action:Replace"), REPLACE, REPLACE),
    (("fail*", "Action:Replace"), REPLACE, REPLACE),  # its slurmd gone meanwhile
    (("failg", "Action:Replace"), None, REPLACE),  # busy=False: its job has ended (squeue); see below
    (("fail", "Action:Reboot"), REPLACE, REBOOT),
    (("failg", "Action:Reboot"), None, REBOOT),
    (("down", "Action:Replace"), REPLACE, REPLACE),  # the documented last resort: DOWN ends the node's jobs at once
    (("down*", "Action:Reboot"), REPLACE, REBOOT),
    (("fail", "operator: bad DIMM"), REPLACE, None),  # FAIL with another reason is no request to HyperPod
    (("drain", "Action:Replace"), REPLACE, None),  # HyperPod reads the reason on FAIL (or DOWN) only
    (("fail", "action:replace"), REPLACE, None),  # the reason must be exact: case,
    (("fail", "Action: Replace"), REPLACE, None),  # spaces,
    (("fail", "Action:Replace."), REPLACE, None),  # punctuation
]


def node(state: str, reason: str) -> NodeInfo:
    return NodeInfo(name="n3", state=state, cpus=2, gres="", reason=reason)


@pytest.mark.parametrize(("seen", "clustermgtd", "hyperpod"), CASES, ids=[f"{s}-{r}" for (s, r), _, _ in CASES])
def test_what_each_replacement_style_does_to_a_node(seen: tuple[str, str], clustermgtd, hyperpod) -> None:
    assert work_for(node(*seen), CLUSTERMGTD) is clustermgtd
    assert work_for(node(*seen), HYPERPOD) is hyperpod


@pytest.mark.parametrize("state", ["fail", "failg", "down", "fail*"])
def test_hyperpod_waits_while_a_job_holds_the_node_and_clustermgtd_does_not_ask(state: str) -> None:
    # sinfo says `fail` for a FAIL node a job uses in part: only squeue knows that the job still runs there.
    assert work_for(node(state, "Action:Replace"), HYPERPOD, busy=True) is None
    assert work_for(node(state, "Action:Replace"), HYPERPOD, busy=False) is REPLACE
    # clustermgtd's replaces a DOWN node whatever runs there (DOWN has ended its jobs), and so never asks.
    assert work_for(node(state, "Action:Replace"), CLUSTERMGTD, busy=True) is \
        work_for(node(state, "Action:Replace"), CLUSTERMGTD, busy=False)


def test_clustermgtds_replacement_stays_the_default_and_hyperpods_turns_the_replacer_on() -> None:
    assert TIMINGS["test"].replacement is CLUSTERMGTD and TIMINGS["parallelcluster"].replacement is CLUSTERMGTD
    assert timings_named("parallelcluster").replacement is CLUSTERMGTD
    chosen = timings_named("test", replacement="hyperpod")
    assert (chosen.replace_nodes, chosen.replacement, chosen.boot_delay_s) == (True, HYPERPOD, 0.0)
    assert not timings_named("test").replace_nodes


@pytest.mark.parametrize(("replacement", "replace_nodes", "said"), [
    ("HyperPod", None, "--replacement 'HyperPod' is not a way of replacing nodes"),
    ("hyperpod\n$(reboot)", None, "--replacement 'hyperpod\\n$(reboot)' is not a way of replacing nodes"),
    ("hyperpod", False, "--replacement hyperpod with --no-replace-nodes: nothing would replace nodes"),
])
def test_a_bad_replacement_is_refused_naming_it(replacement: str, replace_nodes, said: str) -> None:
    with pytest.raises(ClusterkitError) as raised:
        timings_named("test", replace_nodes=replace_nodes, replacement=replacement)
    assert said in raised.value.message and raised.value.fix


def test_the_style_survives_the_record_and_an_older_record_replaces_as_clustermgtd() -> None:
    plan = provider_named("local").plan(ClusterRequest("hp", provider="local", nodes=2, replacement="hyperpod"))
    state = LocalClusterState(plan.details.config)
    assert LocalClusterState.from_json("hp", json.loads(json.dumps(state.to_json()))).config.timings.replacement \
        is HYPERPOD
    older = state.to_json()
    del older["timings"]["replacement"]  # type: ignore[union-attr]
    assert LocalClusterState.from_json("hp", older).config.timings.replacement is CLUSTERMGTD


def test_a_hyperpod_stand_ins_plan_gives_its_nodes_hyperpods_resource_config_and_others_do_not() -> None:
    local = provider_named("local")
    plan = local.plan(ClusterRequest("hp", provider="local", nodes=2, replacement="hyperpod", boot_delay=3))
    assert plan.details.plan_fields()["details"]["timings"]["replacement"] == "hyperpod"  # type: ignore[index]
    [config_path] = [path for path in plan.files if path.endswith(HYPERPOD_RESOURCE_CONFIG.removeprefix("/opt"))]
    document = json.loads(plan.files[config_path])
    assert [i["InstanceName"] for i in document["InstanceGroups"][0]["Instances"]] == ["n1", "n2"]
    slurmd = [action for action in plan.actions if " slurmd -D -N " in action]
    assert len(slurmd) == 2 and all("mount -t overlay overlay" in action and config_path.split("/ml/")[0] in action
                                    for action in slurmd)
    plain = local.plan(ClusterRequest("st", provider="local", nodes=2, replace_nodes=True))
    assert not [path for path in plain.files if "resource_config" in path]
    assert not [action for action in plain.actions if "overlay" in action]


@pytest.mark.parametrize("home", ["a,b", "a:b"])
def test_a_home_the_nodes_overlay_cannot_name_is_refused_before_anything_is_made(tmp_path, monkeypatch, home) -> None:
    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path / home))
    with pytest.raises(ClusterkitError) as raised:
        provider_named("local").plan(ClusterRequest("hp", provider="local", nodes=2, replacement="hyperpod"))
    assert "--replacement hyperpod cannot give the nodes" in raised.value.message and home in raised.value.message
    assert raised.value.fix == "set CLUSTERKIT_HOME to a directory without them"
    assert list(tmp_path.iterdir()) == []
    provider_named("local").plan(ClusterRequest("st", provider="local", nodes=2, replace_nodes=True))  # no overlay


@pytest.mark.parametrize(("action", "reason"), [(NodeAction.REPLACE, "Action:Replace"),
                                                (NodeAction.REBOOT, "Action:Reboot")])
def test_replace_node_on_a_hyperpod_stand_in_says_how_hyperpod_is_asked(action: NodeAction, reason: str) -> None:
    plan = provider_named("local").plan(ClusterRequest("hp", provider="local", nodes=2, replacement="hyperpod"))
    with pytest.raises(ClusterkitError) as raised:
        LocalCluster.from_config(plan.details.config).plan_node_action(action, ["n2"])
    assert raised.value.fix.endswith(f"scontrol update NodeName=NODE State=FAIL Reason={reason}")
    plain = provider_named("local").plan(ClusterRequest("st", provider="local", nodes=2, replace_nodes=True))
    with pytest.raises(ClusterkitError) as raised:
        LocalCluster.from_config(plain.details.config).plan_node_action(action, ["n2"])
    assert "a DOWN node is replaced" in raised.value.fix

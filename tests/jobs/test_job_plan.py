"""Job plans as values: the cluster resolved once, the script rendered once, nothing done before submit."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from clusterkit import registry
from clusterkit.cluster import preset, render_config
from clusterkit.errors import ClusterkitError
from clusterkit.findings import Level
from clusterkit.jobs.plan import PlanRefused, plan_job, submit
from clusterkit.providers.aws.cluster import queue_instance_types

from tests.golden import assert_matches_golden
from tests.jobs.helpers import REPO_ROOT, make_spec

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CLUSTERKIT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CLUSTERKIT_CLUSTER", raising=False)
    return tmp_path


def register_aws_cluster(name: str, preset_name: str) -> None:
    """An AWS cluster made from a preset, as `create-cluster` records it (no AWS needed to plan jobs)."""
    registry.save(registry.ClusterRecord(name=name, provider="aws", created="2026-11-30T00:00:00+00:00", details={
        "region": "us-east-1", "stack_id": "arn:aws:cloudformation:us-east-1:1:stack/x/y", "config_file": "x",
        "queues": queue_instance_types(render_config(preset(preset_name)))}))


def test_a_job_on_a_g5_preset_cluster_gets_the_preset_machine(home: Path) -> None:
    register_aws_cluster("g5", "g5")
    spec = make_spec(name="g5-preset", nodes=2, exclusive=True)  # no instance: the cluster's
    plan = plan_job(spec, "g5", workdir=home, need_cluster=False)
    assert plan.spec is not None and plan.spec.instance == "g5.12xlarge" and plan.spec.processes == 4
    assert "--nproc_per_node=4" in (plan.script or "")
    # The same script as a spec that names the preset's machine itself.
    assert_matches_golden(plan.script or "", GOLDEN / "g5-preset.sbatch")
    (info,) = [f for f in plan.findings if f.rule == "job.cluster-instance"]
    assert info.level is Level.INFO and "partition 'gpu' of cluster 'g5'" in info.message


def test_an_instance_the_partition_does_not_run_is_an_error(home: Path) -> None:
    register_aws_cluster("g5", "g5")
    plan = plan_job(make_spec(instance="g5.48xlarge"), "g5", workdir=home, need_cluster=False)
    assert not plan.ok and plan.script is None
    (error,) = [f for f in plan.findings if f.level is Level.ERROR]
    assert error.path == "instance" and "runs g5.12xlarge, not g5.48xlarge" in error.message


def test_an_aws_cluster_plans_offline_but_says_where_jobs_are_submitted(home: Path) -> None:
    register_aws_cluster("train", "p4de")
    plan = plan_job(make_spec(partition="train"), "train", workdir=home, need_cluster=False)
    assert plan.ok and plan.spec.instance == "p4de.24xlarge" and plan.slurm is None
    assert any("head node" in f.message for f in plan.findings if f.rule == "job.cluster")
    with pytest.raises(ClusterkitError, match="no cluster to submit to"):
        submit(plan)
    with pytest.raises(ClusterkitError, match="submitted from its head node"):
        plan_job(make_spec(), "train", workdir=home)


def test_a_dry_run_needs_no_cluster_and_a_submission_does(home: Path) -> None:
    plan = plan_job(make_spec(), "nowhere", workdir=home, need_cluster=False)
    assert plan.cluster is None and plan.script is not None and plan.script.startswith("#!/bin/bash\n")
    with pytest.raises(ClusterkitError, match="no cluster named 'nowhere'"):
        plan_job(make_spec(), "nowhere", workdir=home)


def test_a_plan_with_errors_has_no_script_and_submit_refuses_it(home: Path) -> None:
    plan = plan_job(make_spec(nodes=0, time="4 hours"), None, workdir=home, need_cluster=False)
    assert plan.script is None and not plan.ok
    with pytest.raises(PlanRefused) as refused:
        submit(plan)
    assert {f.path for f in refused.value.findings if f.level is Level.ERROR} == {"nodes", "time"}


def test_the_run_state_directory_is_decided_once(home: Path) -> None:
    spec = make_spec(checkpoint_dir="runs/x", supervise=True)
    plan = plan_job(spec, None, workdir=home, need_cluster=False)
    assert plan.run_state_dir == str(home.resolve() / "runs/x/.clusterkit")
    assert "--state-dir=runs/x/.clusterkit" in (plan.script or "")  # the same place, seen from the job's workdir


def test_a_resubmission_is_the_same_script_kept_off_bad_nodes(home: Path) -> None:
    plan = plan_job(make_spec(), None, workdir=home, need_cluster=False)
    again = plan.with_exclusions(["n2", "n3"], resubmitted_from="7")
    assert again.script == plan.script and again.sbatch_args == ("--exclude=n2,n3",)
    assert again.resubmitted_from == "7" and dataclasses.replace(again, sbatch_args=()) != plan


def test_examples_plan_without_errors(home: Path) -> None:
    from clusterkit.jobs.spec import load_job

    for path in sorted((REPO_ROOT / "examples" / "jobs").glob("*.yaml")):
        plan = plan_job(load_job(path), None, workdir=home, need_cluster=False)
        assert plan.script is not None, [str(f) for f in plan.findings]

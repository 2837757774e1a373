"""Job plans as values: the cluster resolved once, the script rendered once, nothing done before submit."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit import registry
from clusterkit.cluster import preset, render_config
from clusterkit.errors import ClusterkitError
from clusterkit.findings import Level
from clusterkit.jobs.plan import PlanRefused, SyncSet, apply, files_to_sync, plan_job
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


@pytest.mark.parametrize(("plugin", "returncode", "shown"), [
    ("1.7.1", 1, "error: stack.aws_ofi_nccl: p5.48xlarge needs aws-ofi-nccl 1.7.2 or later, not 1.7.1: "),
    ("1.7.2", 0, "warning: stack.aws_ofi_nccl: aws-ofi-nccl 1.7.3 or later is recommended on p5.48xlarge, not "),
])
def test_the_rules_see_the_machine_the_cluster_gives(home: Path, plugin: str, returncode: int, shown: str) -> None:
    # No instance in the spec: the p5 preset's partition gives p5.48xlarge, whose version floors then hold.
    register_aws_cluster("p5", "p5")
    spec = home / "job.yaml"
    spec.write_text(f'name: old-plugin\ncommand: [train.py]\nnodes: 2\nstack: {{aws_ofi_nccl: "{plugin}"}}\n')
    result = subprocess.run([sys.executable, "-m", "clusterkit", "submit", "--dry-run", "--cluster", "p5", str(spec)],
                            capture_output=True, text=True, cwd=home)
    assert result.returncode == returncode and "Traceback" not in result.stderr, result.stdout + result.stderr
    lines = (result.stdout + result.stderr).splitlines()
    assert [line for line in lines if line.startswith(shown.split(":")[0] + ": stack.")] == \
        [line for line in lines if line.startswith(shown)] != []


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
        apply(plan)
    with pytest.raises(ClusterkitError, match="submitted from its head node"):
        plan_job(make_spec(), "train", workdir=home)


def test_a_job_planned_for_a_hyperpod_cluster_renders_auto_resume_unless_supervised(home: Path) -> None:
    from clusterkit.providers.hyperpod.plan import HyperPodClusterState

    registry.save(registry.ClusterRecord("hp", "hyperpod", "2026-12-04T00:00:00+00:00", HyperPodClusterState(
        region="us-east-1", request_file=str(home / "r.json"), queues={"train": ["p5.48xlarge"]})))
    plan = plan_job(make_spec(partition="train", nodes=2), "hp", workdir=home, need_cluster=False)
    assert plan.ok and plan.spec.instance == "p5.48xlarge" and "srun --auto-resume=1 \"$@\"" in plan.script
    supervised = plan_job(make_spec(partition="train", nodes=2, supervise=True, checkpoint_dir="/fsx/ck"), "hp",
                          workdir=home, need_cluster=False)
    assert supervised.ok and "--auto-resume" not in supervised.script
    register_aws_cluster("train", "p5")  # ParallelCluster's Slurm: no auto-resume there
    assert "--auto-resume" not in plan_job(make_spec(partition="train"), "train", workdir=home,
                                           need_cluster=False).script


def test_a_dry_run_needs_no_cluster_and_a_submission_does(home: Path) -> None:
    plan = plan_job(make_spec(), "nowhere", workdir=home, need_cluster=False)
    assert plan.cluster is None and plan.script is not None and plan.script.startswith("#!/bin/bash\n")
    with pytest.raises(ClusterkitError, match="no cluster named 'nowhere'"):
        plan_job(make_spec(), "nowhere", workdir=home)


def test_a_plan_with_errors_has_no_script_and_submit_refuses_it(home: Path) -> None:
    plan = plan_job(make_spec(nodes=0, time="4 hours"), None, workdir=home, need_cluster=False)
    assert plan.script is None and not plan.ok
    with pytest.raises(PlanRefused) as refused:
        apply(plan)
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


def refused_reasons(synced) -> dict[str, str]:  # noqa: ANN001 - a SyncSet
    return dict(synced.refused)


def test_a_walk_keeps_links_inside_as_links_and_refuses_every_other(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "src" / "pkg").mkdir(parents=True)
    (work / "src" / "pkg" / "model.py").write_text("x = 1\n")
    (work / "src" / "latest.py").symlink_to("pkg/model.py")
    (work / "src" / "lib").symlink_to("pkg")  # a directory link: kept, not entered
    (work / "src" / "abs.py").symlink_to(work / "src" / "pkg" / "model.py")  # would not hold on the cluster
    (work / "src" / "around.py").symlink_to("../../work/src/pkg/model.py")  # back in through this directory's name
    (work / "src" / "gone.py").symlink_to("nothing-here.py")
    (work / "src" / "a").symlink_to("b")
    (work / "src" / "b").symlink_to("a")
    (work / "src" / "root").symlink_to("/")
    os.mkfifo(work / "src" / "pipe")  # opened, a FIFO would block the copy
    (work / "src" / "__pycache__").mkdir()
    (work / "src" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    findings: list = []
    synced = files_to_sync(work, ["src"], findings)
    assert synced.names == ("src/latest.py", "src/lib", "src/pkg/model.py") and synced.links == 2
    assert synced.size == len("x = 1\n")
    assert refused_reasons(synced) == {
        "src/a": "a link loop", "src/b": "a link loop", "src/abs.py": "a link with an absolute target",
        "src/around.py": "a link that leaves the directory", "src/gone.py": "a link to nothing",
        "src/root": "a link that leaves the directory", "src/pipe": "not a regular file"}
    assert all(f.level is Level.WARNING and f.rule == "job.sync-refused" for f in findings)
    assert any("a link loop: src/a, src/b" in f.message and f.fix == "remove the loop" for f in findings)


@pytest.mark.parametrize(("name", "problem"), [
    ("", "an empty path names nothing to copy"),
    ("/etc/hostname", "is outside"),
    ("../work2", "is outside"),
    ("src/../..", "is outside"),
    ("missing.py", "is not a file or directory"),
    ("out", "a link that leaves the directory"),
    ("out/x", "under a link"),
])
def test_a_sync_path_that_cannot_go_is_an_error_naming_it(tmp_path: Path, name: str, problem: str) -> None:
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (tmp_path / "work2").mkdir()
    (tmp_path / "work2" / "x").write_text("not the job's\n")
    (work / "out").symlink_to(tmp_path / "work2")
    findings: list = []
    synced = files_to_sync(work, [name], findings)
    (error,) = findings
    assert synced.names == () and error.level is Level.ERROR and error.rule == "job.sync" and error.path == "sync"
    assert problem in error.message and error.value == name and error.fix


def test_sync_paths_are_taken_relative_to_the_directory_once_each(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print(1)\n")
    findings: list = []
    synced = files_to_sync(tmp_path, [str(tmp_path / "src" / "train.py"), "src", "./src/train.py", "."], findings)
    assert synced.names == ("src/train.py",) and findings == []


def test_more_than_the_cap_is_an_error_naming_the_largest_files(tmp_path: Path) -> None:
    for name, size in (("small.py", 10), ("weights.bin", 3000), ("data.bin", 2000)):
        with open(tmp_path / name, "wb") as stream:
            stream.truncate(size)
    findings: list = []
    files_to_sync(tmp_path, ["."], findings, max_bytes=4096)
    (error,) = findings
    assert error.level is Level.ERROR and error.rule == "job.sync-size" and "more than 4.0 KiB" in error.message
    assert "weights.bin (2.9 KiB), data.bin (2.0 KiB)" in error.message and "--sync PATH" in error.fix


def test_without_sync_only_git_tracked_files_go_and_the_untracked_are_named(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("a\n")
    (tmp_path / "train.py").write_text("t\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / "big.bin").write_bytes(b"\0" * 100)
    # A tracked directory swapped for a link since: what git lists under it is not read through the link.
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "pkg").rename(tmp_path / "elsewhere" / "pkg")
    (tmp_path / "pkg").symlink_to(tmp_path / "elsewhere" / "pkg")
    findings: list = []
    synced = files_to_sync(tmp_path, None, findings)
    assert synced.names == ("train.py",) and synced.size == 2
    assert dict(synced.skipped) == {"elsewhere/": "untracked", "notes.txt": "untracked", "pkg": "untracked",
                                    "scratch/": "untracked"}
    assert refused_reasons(synced) == {"pkg/a.py": "under a link"}
    (untracked,) = [f for f in findings if f.rule == "job.sync-untracked"]
    assert untracked.level is Level.WARNING and "4 untracked path(s)" in untracked.message
    assert "git add" in untracked.fix


def test_the_summary_counts_files_links_and_bytes_and_names_what_stayed() -> None:
    synced = SyncSet(names=("a.py", "b.py", "lib"), size=12_600, links=1,
                     refused=tuple((f"x{i}", "a link loop") for i in range(7)))
    assert synced.summary("host:/runs/r") == ("copied 2 files and 1 link, 12.3 KiB to host:/runs/r; "
                                              "refused 7: x0, x1, x2, x3, x4 and 2 more")
    assert SyncSet(names=("a.py",), size=812).summary("h:/r") == "copied 1 file, 812 B to h:/r"


def test_one_submit_takes_a_plan_as_it_is_and_refuses_options_the_plan_already_holds(home: Path) -> None:
    from clusterkit.jobs.submit import submit

    plan = plan_job(make_spec(), "nowhere", workdir=home, need_cluster=False)
    for options in ({"cluster": "dev"}, {"workdir": home}, {"sync": ["src"]}, {"preflight": False}):
        with pytest.raises(ClusterkitError, match="a plan already holds its") as refused:
            submit(plan, **options)
        assert next(iter(options)) in str(refused.value)
    with pytest.raises(ClusterkitError, match="no cluster to submit to"):  # the plan itself goes to apply
        submit(plan)

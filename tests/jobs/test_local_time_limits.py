"""On the real local cluster: Slurm's warning before the time limit ends in a checkpoint (the ranks asked
through the stop request) and a requeue, supervised or not, and the run completes bit-identical, while a warning
after the last step requeues nothing; two jobs sharing their first node meet in two
rendezvous stores; hostile spec values stay inert in a real job of every launcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit import runtime
from clusterkit.jobs.render import rendezvous_port
from clusterkit.jobs.spec import job_from_dict
from clusterkit.jobs.submit import submit
from clusterkit.providers.local import processes

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[2]
STEPS = 150
VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "examples").symlink_to(REPO / "examples")
    tmp_path.chmod(0o777)
    return tmp_path


@pytest.fixture(scope="module")
def uninterrupted_digest(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The final weights of a run that never stopped (same world size, no Slurm)."""
    run = tmp_path_factory.mktemp("uninterrupted")
    env = dict(os.environ, TRAIN_STEPS=str(STEPS), STEP_SECONDS="0", CHECKPOINT_EVERY="100000",
               CLUSTERKIT_CHECKPOINT_DIR=str(run))
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                    str(REPO / "examples/train_resilient.py")], env=env, check=True, capture_output=True, timeout=300)
    return (run / "final_weights.sha256").read_text().strip()


def timed_spec(name: str, **fields: object) -> dict:
    """2 nodes, a 2-minute limit, the warning 60 s before it; ~75 s of training in all. Checkpoints are
    written only when the job is asked to stop, so every resume proves a save on the signal."""
    return {"name": name, "instance": "local", "nodes": 2, "processes_per_node": 1, "launcher": "torchrun",
            "command": ["examples/train_resilient.py"], "checkpoint_dir": "run", "time": "2", "signal": "USR1@60",
            "env": {"TRAIN_STEPS": str(STEPS), "STEP_SECONDS": "0.5", "CHECKPOINT_EVERY": "100000"},
            "logs": {"output": "train_%j.out"}, **fields}


def assert_checkpointed_requeued_and_identical(handle, workdir: Path, digest: str) -> str:
    assert handle.wait(timeout=600, poll=1) == "COMPLETED", handle.stdout()[-3000:]
    log = handle.stdout()
    stops = [line for line in log.splitlines() if "on the stop request; checkpoint saved" in line]
    resumes = [line for line in log.splitlines() if "resuming from step" in line]
    assert stops and len(resumes) == len(stops), log[-3000:]
    starts = [line for line in log.splitlines() if line.startswith("clusterkit: job ")]
    assert [line.split(" restart ")[1].split()[0] for line in starts] == [str(n) for n in range(len(starts))]
    assert (workdir / "run/final_weights.sha256").read_text().strip() == digest
    return log


@pytest.fixture(scope="module")
def timed_runs(local_cluster, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Both time-limit jobs, submitted at once (they run side by side, two nodes each): name -> (handle, workdir).
    The supervised one has a restart budget of one and trains long enough (~105 s) for at least two requeues
    at the limit: planned requeues spend none of the budget."""
    runs = {}
    long_env = {"TRAIN_STEPS": str(STEPS), "STEP_SECONDS": "0.7", "CHECKPOINT_EVERY": "100000"}
    for spec in (timed_spec("timed"), timed_spec("timed-supervised", supervise=True, max_restarts=1, env=long_env)):
        workdir = tmp_path_factory.mktemp(spec["name"])
        (workdir / "examples").symlink_to(REPO / "examples")
        workdir.chmod(0o777)
        runs[spec["name"]] = (submit(job_from_dict(spec), local_cluster.name, workdir=workdir), workdir)
    return runs


@pytest.mark.slow
def test_an_unsupervised_job_checkpoints_and_requeues_at_each_limit(timed_runs, uninterrupted_digest):
    handle, workdir = timed_runs["timed"]
    log = assert_checkpointed_requeued_and_identical(handle, workdir, uninterrupted_digest)
    # The example reads stop requests: it is asked through one, and no signal reaches torchrun.
    assert "asking the step's ranks to save and stop" in log and "requeueing job" in log
    assert "asking the step to save and stop (SIGTERM)" not in log


@pytest.mark.slow
def test_a_supervised_job_checkpoints_and_requeues_at_each_limit(timed_runs, uninterrupted_digest):
    handle, workdir = timed_runs["timed-supervised"]
    assert_checkpointed_requeued_and_identical(handle, workdir, uninterrupted_digest)
    decisions = [entry["decision"] for entry in runtime.read_decisions(workdir / "run/.clusterkit/decisions.jsonl")]
    assert decisions[-1] == "completed" and set(decisions[:-1]) == {"time_limit"}, decisions
    assert len(decisions) - 1 >= 2, decisions  # more requeues than a budget of failures would allow


@pytest.mark.slow
@pytest.mark.parametrize("supervised", [True, False], ids=["supervised", "unsupervised"])
def test_a_warning_that_lands_after_the_last_step_does_not_requeue_a_finished_run(local_cluster, workdir,
                                                                                  uninterrupted_digest, supervised):
    # Rank 0 takes 10 s to exit after its last step (a slow teardown); the warning before the time limit lands
    # then, as Slurm's does when a run ends close to its limit.
    spec = timed_spec("finished-when-warned", supervise=supervised,
                      env={"TRAIN_STEPS": str(STEPS), "STEP_SECONDS": "0.1", "EXAMPLE_FAULT": "slow-exit"})
    handle = submit(job_from_dict(spec), local_cluster.name, workdir=workdir)
    processes.wait_until(lambda: f"done: {STEPS} steps" in handle.stdout(), 120, "the last step", interval=0.2)
    local_cluster.slurm().run("scancel", "--batch", "--signal=USR1", handle.job_id)
    assert handle.wait(timeout=120, poll=0.5) == "COMPLETED", handle.stdout()[-3000:]
    if supervised:
        made = runtime.read_decisions(workdir / "run/.clusterkit/decisions.jsonl")
        assert [d["decision"] for d in made] == ["completed"], made
        assert "every rank finished its training" in made[0]["evidence"]
        assert "before the warning" in made[0]["evidence"]
    else:  # it never took the request (its training had ended): the script sees it ran to its end
        assert "the step ended by itself (exit 0) before the warning stopped it: no requeue" in handle.stdout()
    assert len(handle.attempts()) == 1
    assert (workdir / "run/final_weights.sha256").read_text().strip() == uninterrupted_digest


def test_two_jobs_sharing_their_first_node_meet_in_two_stores(local_cluster, workdir):
    jobs = []
    for index in range(2):
        spec = {"name": f"share-{index}", "instance": "local", "nodes": 1, "processes_per_node": 2,
                "launcher": "torchrun", "command": ["examples/train_resilient.py"], "checkpoint_dir": f"run{index}",
                "sbatch": ["--nodelist=n3"], "time": "10",
                "env": {"TRAIN_STEPS": "40", "STEP_SECONDS": "0.25", "CHECKPOINT_EVERY": "100000"},
                "logs": {"output": f"share{index}_%j.out"}}
        jobs.append(submit(job_from_dict(spec), local_cluster.name, workdir=workdir))
    processes.wait_until(lambda: all(job.state == "RUNNING" for job in jobs), 60, "both jobs to run on n3",
                         interval=0.2)
    assert [job.wait(timeout=180, poll=0.5) for job in jobs] == ["COMPLETED", "COMPLETED"]
    cluster_name = local_cluster.config.slurm_cluster_name
    ports = []
    for job in jobs:
        (line,) = [line for line in job.stdout().splitlines() if line.startswith("clusterkit: rendezvous at ")]
        ports.append(int(line.rsplit(":", 1)[1]))
        assert ports[-1] == rendezvous_port(int(job.job_id), cluster_name)
        assert "done: 40 steps" in job.stdout()
    assert ports[0] != ports[1]


HOSTILE_ARGS = ["$(touch {canary})", "`touch {canary}`", "; touch {canary}", "it's \"q\"", "two\nlines",
                "x\u2028y", "%x %j"]

PRINT_ARGS = "import json, sys; open(sys.argv[1], 'a').write(json.dumps(sys.argv[2:]) + '\\n')"


@pytest.mark.parametrize("launcher", ["torchrun", "srun", "mpi", "neuron"])
def test_a_real_job_keeps_hostile_values_inert(local_cluster, workdir, launcher: str):
    canary = workdir / "canary"
    args = [value.format(canary=canary) for value in HOSTILE_ARGS]
    (workdir / "print_args.py").write_text(PRINT_ARGS)
    out = workdir / "args.jsonl"
    spec = {"name": f"hostile-{launcher} $(touch {canary.name}) `id`; 'q'", "nodes": 1, "launcher": launcher,
            "processes_per_node": 1, "command": {"script": "print_args.py", "args": [str(out), *args]},
            "env": {"HOSTILE": args[0], "PATH": f"{VENV_BIN}:/usr/bin:/bin"}, "time": "5",
            "logs": {"output": "hostile_%j.out"}}
    if launcher == "neuron":  # Trainium's launcher: neuron_parallel_compile and torchrun, here plain torchrun
        fake = workdir / "bin"
        fake.mkdir()
        (fake / "neuron_parallel_compile").write_text('#!/bin/bash\nexec "$@"\n')
        (fake / "neuron_parallel_compile").chmod(0o755)
        spec.update(instance="trn1", processes_per_node=1, launcher={"type": "neuron", "compile_cache": str(workdir)})
        spec["env"]["PATH"] = f"{fake}:{spec['env']['PATH']}"
    handle = submit(job_from_dict(spec), local_cluster.name, workdir=workdir)
    state = handle.wait(timeout=120, poll=0.5)
    assert not canary.exists()
    if launcher == "mpi" and "can not load PMIx library" in handle.stdout():
        pytest.skip("srun --mpi=pmix needs the PMIx library on the nodes (Debian: libpmix2); the script ran inert")
    assert state == "COMPLETED", handle.stdout()[-2000:]
    runs = [json.loads(line) for line in out.read_text().splitlines()]
    assert runs and all(run == args for run in runs)  # byte for byte, compile pass included


def test_submit_prints_warnings_and_json_carries_them(local_cluster, workdir):
    spec = workdir / "warned.yaml"
    spec.write_text("name: warned\nlauncher: srun\ncommand: [true]\ncheckpoint_dir: ckpt\n"
                    "logs: {output: warned_%j.out}\n")
    table = subprocess.run([sys.executable, "-m", "clusterkit", "submit", str(spec), "--cluster", local_cluster.name],
                           capture_output=True, text=True, cwd=workdir, timeout=60)
    assert table.returncode == 0, table.stderr
    assert "warning: checkpoint_dir: is relative" in table.stderr
    as_json = subprocess.run([sys.executable, "-m", "clusterkit", "submit", str(spec), "--cluster",
                              local_cluster.name, "-o", "json"], capture_output=True, text=True, cwd=workdir,
                             timeout=60)
    assert as_json.returncode == 0, as_json.stderr
    assert [w["path"] for w in json.loads(as_json.stdout)["warnings"]] == ["checkpoint_dir"]

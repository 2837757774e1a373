"""sbatch rendering: golden files, determinism, directives and what the script does at run time."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.errors import ClusterkitError
from clusterkit.jobs.render import render_sbatch
from clusterkit.jobs.spec import Command, job_from_dict, load_job
from clusterkit.slurm import Flavor

from tests.golden import assert_matches_golden
from tests.jobs.helpers import REPO_ROOT, make_spec

HERE = Path(__file__).resolve().parent
GOLDEN_DIR = HERE / "golden"
SPEC_FILES = sorted((REPO_ROOT / "examples" / "jobs").glob("*.yaml")) + sorted((HERE / "specs").glob("*.yaml"))


@pytest.mark.parametrize("spec_file", SPEC_FILES, ids=lambda path: path.stem)
def test_golden(spec_file: Path) -> None:
    assert_matches_golden(render_sbatch(load_job(spec_file)), GOLDEN_DIR / f"{spec_file.stem}.sbatch")


# Rendered for a SageMaker HyperPod cluster: unsupervised (HyperPod's auto-resume restarts the step) and supervised
# (the supervisor does, and asks HyperPod for the node's replacement).
HYPERPOD_SPECS = [REPO_ROOT / "examples" / "jobs" / name for name in ("p5-train.yaml", "local-resilient.yaml")]


@pytest.mark.parametrize("spec_file", HYPERPOD_SPECS, ids=lambda path: path.stem)
def test_golden_for_hyperpod(spec_file: Path) -> None:
    assert_matches_golden(render_sbatch(load_job(spec_file), Flavor.HYPERPOD),
                          GOLDEN_DIR / "hyperpod" / f"{spec_file.stem}.sbatch")


def test_only_an_unsupervised_step_on_hyperpod_gets_auto_resume() -> None:
    plain, supervised = make_spec(nodes=2), make_spec(nodes=2, supervise=True, checkpoint_dir="/fsx/ck")
    assert "--auto-resume" not in render_sbatch(plain) + render_sbatch(supervised)
    assert "srun --auto-resume=1 \"$@\"" in render_sbatch(plain, Flavor.HYPERPOD)
    hyperpod_supervised = render_sbatch(supervised, Flavor.HYPERPOD)
    assert "--auto-resume" not in hyperpod_supervised
    # Beside one comment, the supervised script is the one stock Slurm gets.
    changed = set(hyperpod_supervised.splitlines()) ^ set(render_sbatch(supervised).splitlines())
    assert changed and all(line.startswith("#") for line in changed)


def test_every_golden_file_has_a_spec() -> None:
    assert sorted(path.stem for path in GOLDEN_DIR.glob("*.sbatch")) == sorted(path.stem for path in SPEC_FILES)


def test_rendering_is_deterministic() -> None:
    data = {"name": "d", "instance": "p4de", "nodes": 2, "command": ["t.py"],
            "env": {"B": "2", "A": "1", "NCCL_DEBUG": "WARN"}}
    first = render_sbatch(job_from_dict(data))
    reordered = dict(reversed(list(data.items())))
    reordered["env"] = dict(reversed(list(data["env"].items())))
    assert render_sbatch(job_from_dict(reordered)) == first
    assert render_sbatch(job_from_dict(data)) == first


def directives(script: str) -> list[str]:
    return [line.split(" ", 1)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]


def test_default_directives() -> None:
    lines = directives(render_sbatch(make_spec(instance="p4de", nodes=2, exclusive=True)))
    assert lines == ["--job-name=test-job", "--nodes=2", "--ntasks-per-node=1", "--exclusive",
                     "--wait-all-nodes=1", "--requeue", "--output=logs/%x_%j.out", "--open-mode=append"]


def test_optional_directives() -> None:
    spec = make_spec(instance="p4de", gpus_per_node=4, requeue=False, signal="B:USR1@90", time=90,
                     partition="gpu", workdir="/fsx/w", logs={"error": "logs/%x_%j.err"},
                     sbatch=["--account=ml", "--hint=nomultithread"])
    lines = directives(render_sbatch(spec))
    for expected in ("--gpus-per-node=4", "--no-requeue", "--signal=B:USR1@90", "--time=90", "--partition=gpu",
                     "--chdir=/fsx/w", "--error=logs/%x_%j.err", "--account=ml", "--hint=nomultithread"):
        assert expected in lines
    assert "--requeue" not in lines
    assert "--ntasks-per-node=1" in lines  # torchrun: one task per node, 4 processes each
    assert "--nproc_per_node=4" in render_sbatch(spec)


def test_gpus_per_node_only_when_asked() -> None:
    assert not any("gpus" in line for line in directives(render_sbatch(make_spec(instance="p5"))))


@pytest.mark.parametrize(("launcher", "instance", "tasks", "processes"), [
    ("torchrun", "p4de", 1, 8), ("neuron", "trn1", 1, 32), ("mpi", "p5", 8, None), ("srun", "local", 1, None),
])
def test_tasks_and_processes_per_node(launcher: str, instance: str, tasks: int, processes: int | None) -> None:
    script = render_sbatch(make_spec(instance=instance, launcher=launcher))
    assert f"--ntasks-per-node={tasks}" in directives(script)
    if processes:
        assert f"--nproc_per_node={processes}" in script


def test_run_identity_is_exported_only_when_set() -> None:
    bare = render_sbatch(make_spec())
    assert "export CLUSTERKIT_" not in bare
    script = render_sbatch(make_spec(run_id="r1", checkpoint_dir="/fsx/ckpt", max_restarts=0))
    for line in ("export CLUSTERKIT_RUN_ID=r1", "export CLUSTERKIT_CHECKPOINT_DIR=/fsx/ckpt",
                 "export CLUSTERKIT_MAX_RESTARTS=0"):
        assert line in script.splitlines()


@pytest.mark.parametrize(("layout", "found"), [
    ("amazon/ofi-nccl/lib/x86_64-linux-gnu", "amazon/ofi-nccl/lib/x86_64-linux-gnu"),  # EFA installer, Debian-style
    ("amazon/ofi-nccl/lib", "amazon/ofi-nccl/lib"),  # EFA installer, RPM-style
    ("aws-ofi-nccl/lib", "aws-ofi-nccl/lib"),  # built from source
    ("nothing", None),
])
def test_the_plugin_directory_is_found_on_the_node(fake_slurm, layout: str, found: str | None) -> None:
    opt = fake_slurm.root / "opt"
    (opt / layout).mkdir(parents=True)
    script = render_sbatch(make_spec(instance="p4de", launcher="srun", command=["env"])).replace("/opt/", f"{opt}/")
    fake_slurm.link("env", "/usr/bin/env")
    result = fake_slurm.run(script, extra_env={"LD_LIBRARY_PATH": "/usr/lib/mine", "HOSTTYPE": "x86_64"})
    assert result.returncode == 0, result.stderr
    expected = f"{opt}/{found}:/usr/lib/mine" if found else "/usr/lib/mine"
    assert f"LD_LIBRARY_PATH={expected}\n" in result.stdout


def test_library_path_only_on_bare_hosts() -> None:
    assert "LD_LIBRARY_PATH" in render_sbatch(make_spec(instance="p4de"))
    in_container = make_spec(instance="p4de", container={"runtime": "pyxis", "image": "/fsx/a.sqsh"})
    assert "LD_LIBRARY_PATH" not in render_sbatch(in_container)


def test_docker_gets_the_nodes_devices_and_environment_names(fake_slurm) -> None:
    script = render_sbatch(make_spec(instance="trn1", launcher="neuron", env={"MY_VAR": "x"},
                                     container={"runtime": "docker", "image": "example.com/neuron:1",
                                                "mounts": ["/fsx"]}))
    assert "--env MY_VAR" in script and "--env NEURON_CC_FLAGS" in script
    assert "--gpus all" not in script
    # Devices are those the node has, not the catalog's count.
    dev = fake_slurm.root / "dev"
    for device in ("infiniband/uverbs0", "infiniband/uverbs1", "neuron0"):
        (dev / device).parent.mkdir(parents=True, exist_ok=True)
        (dev / device).touch()
    script = script.replace("/dev/infiniband", f"{dev}/infiniband").replace("/dev/neuron", f"{dev}/neuron")
    result = fake_slurm.run(script,
                            extra_env={"SLURM_RESTART_COUNT": "0"})
    assert result.returncode == 0, result.stderr
    runs = [call.argv for call in fake_slurm.calls("docker") if call.argv[0] == "run"]
    assert len(runs) == 2  # compile pass and training
    for argv in runs:
        devices = [argv[i + 1] for i, word in enumerate(argv) if word == "--device"]
        assert devices == [f"{dev}/infiniband/uverbs0", f"{dev}/infiniband/uverbs1", f"{dev}/neuron0"]


def test_a_spec_with_errors_is_not_rendered() -> None:
    with pytest.raises(ClusterkitError, match="container.image"):
        render_sbatch(make_spec(container={"runtime": "pyxis"}))


def test_importing_the_spec_stays_light() -> None:
    code = ("import sys, clusterkit.jobs.spec, clusterkit.jobs.environment, clusterkit.jobs; "
            "heavy = {'jinja2', 'yaml', 'torch', 'submitit', 'boto3'} & set(sys.modules); "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT, timeout=60)


@pytest.mark.slow
def test_local_example_all_reduces_across_two_nodes(fake_slurm, unused_tcp_port: int) -> None:
    """The local example end to end, minus Slurm: two 'nodes' (srun copies), real torchrun and gloo."""
    torchrun = Path(sys.executable).parent / "torchrun"
    pytest.importorskip("torch")
    example = load_job(REPO_ROOT / "examples" / "jobs" / "local-allreduce.yaml")
    # Run from a scratch directory, on a free port (other tests may hold 29500).
    spec = dataclasses.replace(
        example, command=Command(str(REPO_ROOT / example.command.script)),
        launcher=dataclasses.replace(example.launcher, port=unused_tcp_port))
    fake_slurm.remove("torchrun")
    fake_slurm.link("torchrun", str(torchrun))
    result = fake_slurm.run(render_sbatch(spec), nodelist="localhost", copies=2, timeout=180,
                            extra_env={"GLOO_SOCKET_IFNAME": "lo"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "all-reduce over 4 ranks" in result.stdout
    assert "[10.0, 10.0, 10.0, 10.0] (expected 10.0)" in result.stdout


@pytest.fixture
def unused_tcp_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_docker_container_runs_as_the_user_who_runs_the_job() -> None:
    """The task's own uid and gid go to `docker run --user` (run here as nobody, through the fake Slurm)."""
    import os
    import shutil
    import tempfile

    from tests.fakes import make_fake_slurm

    setpriv = shutil.which("setpriv")
    if os.getuid() != 0 or not setpriv:
        pytest.skip("needs root and setpriv to run the script as another user")
    root = Path(tempfile.mkdtemp(prefix="ck-uid-"))
    try:
        root.chmod(0o777)
        fake = make_fake_slurm(root)
        for path in (fake.bin, fake.log):
            path.chmod(0o777)
        script = root / "job.sbatch"
        script.write_text(render_sbatch(make_spec(container={"runtime": "docker", "image": "example.com/x:1"},
                                                  launcher="srun", command=["prog"])))
        env = {"PATH": str(fake.bin), "CK_SHIM_LOG": str(fake.log), "SLURM_JOB_ID": "42",
               "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "localhost", "HOME": str(root)}
        result = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/bash",
                                 str(script)], env=env, cwd=root, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
        (run,) = [call.argv for call in fake.calls("docker") if call.argv[0] == "run"]
        assert run[run.index("--user") + 1] == "65534:65534"
        assert "--init" in run and run[run.index("--name") + 1] == "clusterkit-slurm-42-0-0"
    finally:
        shutil.rmtree(root, ignore_errors=True)

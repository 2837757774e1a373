"""Every preset x every job kind clusterkit renders for it: the preflight passes against a head node that has what
the preset installs, and refuses with a fix what the nodes would lack (a runtime or tool no node script installs, or
a cluster made without the script that does)."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
import yaml

from clusterkit.catalog import find_instance_type
from clusterkit.cluster import preset, preset_names, render_config
from clusterkit.cluster.node_scripts import DOCKER, PYXIS_ENROOT, queue_scripts
from clusterkit.findings import errors
from clusterkit.jobs import preflight
from clusterkit.jobs.nccl_tests import nccl_test_spec
from clusterkit.jobs.spec import JobSpec, job_from_dict
from clusterkit.slurm import Slurm

PYXIS_HELP = "  --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH\n  --container-env=NAME[,NAME...]\n"


class HeadNode(Slurm):
    """A ParallelCluster head node: its copy of the cluster's config (the file the preflight reads), and Slurm's
    commands answering as that config makes them (srun knows pyxis's flags once the head node enabled it)."""

    def __init__(self, config: dict, config_path: Path) -> None:
        super().__init__()
        config_path.write_text(yaml.safe_dump(config))
        self.cluster_config = config

    def run(self, command: str, *args: str, **_: object) -> subprocess.CompletedProcess[str]:
        if (command, args) == ("srun", ("--help",)):
            head = self.cluster_config["HeadNode"].get("CustomActions", {}).get("OnNodeConfigured", {})
            pyxis = any(str(action.get("Script", "")).endswith("/" + PYXIS_ENROOT)
                        for action in head.get("Sequence", [head]))
            out = "  --mpi=TYPE\n" + (PYXIS_HELP if pyxis else "")
        elif (command, args) == ("scontrol", ("show", "config")):
            out = "JobRequeue = 1\nAccountingStorageType = accounting_storage/slurmdbd\n"
        elif command == "sinfo":
            rows = []
            for index, queue in enumerate(self.cluster_config["Scheduling"]["SlurmQueues"]):
                for compute in queue["ComputeResources"]:
                    facts = find_instance_type(compute["InstanceType"])
                    gres = f"gpu:{facts.accelerator_count}" if facts and facts.accelerator == "gpu" else "(null)"
                    rows.append(f"{queue['Name']}{'*' if index == 0 else ''}|{compute['MaxCount']}|{gres}|96")
            out = "\n".join(rows) + "\n"
        else:
            raise AssertionError(f"the preflight ran {command} {args}")
        return subprocess.CompletedProcess([command, *args], 0, out, "")


def job_kinds(name: str) -> dict[str, JobSpec]:
    """The jobs clusterkit renders for a preset's training queue: each container runtime with the queue's
    launcher, an MPI job, and the nccl-tests job (bare and in an image)."""
    spec = preset(name)
    instance = spec.queues[0].compute[0].instance_type
    neuron = find_instance_type(instance).accelerator == "neuron"
    launcher = "neuron" if neuron else "torchrun"
    base = {"name": "train", "command": ["train.py"], "nodes": 2, "instance": instance, "launcher": launcher,
            "exclusive": True}
    images = {"none": None, "pyxis": "nvcr.io#nvidia/pytorch:25.01-py3",
              "docker": "public.ecr.aws/hpc-cloud/nccl-tests:latest", "apptainer": "docker://nvcr.io/nvidia/pytorch"}
    kinds = {f"{launcher}-{runtime}": job_from_dict({**base, "container": {"runtime": runtime, "image": image}}
                                                    if image else base)
             for runtime, image in images.items()}
    kinds["mpi-none"] = job_from_dict({**base, "launcher": "mpi", "command": ["./hello"]})
    kinds["nccl-tests-image"] = nccl_test_spec(2, instance_type=instance, image=images["pyxis"])
    kinds["nccl-tests-bare"] = nccl_test_spec(2, instance_type=instance)
    return kinds


# What no preset installs, refused on every preset with a fix: apptainer, and nccl-tests outside an image (the
# default all_reduce_perf lives in clusterkit's GPU image; Trainium's nccom-test comes with the Neuron tools).
NEVER_INSTALLED = {"torchrun-apptainer", "neuron-apptainer"}


def _refused(kind: str, name: str) -> bool:
    neuron = find_instance_type(preset(name).queues[0].compute[0].instance_type).accelerator == "neuron"
    return kind in NEVER_INSTALLED or (kind == "nccl-tests-bare" and not neuron)


CASES = [(name, kind) for name in preset_names() for kind in job_kinds(name)]


@pytest.fixture
def config_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cluster-config.yaml"
    monkeypatch.setattr(preflight, "PARALLELCLUSTER_CONFIG", str(path))
    return path


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_a_preset_runs_every_job_kind_or_the_preflight_refuses_it(name: str, kind: str, config_path: Path,
                                                                   tmp_path: Path) -> None:
    spec = job_kinds(name)[kind]
    head = HeadNode(render_config(preset(name)), config_path)
    found = errors(preflight.preflight(spec, head, tmp_path))
    if not _refused(kind, name):
        assert found == [], found
    else:
        (finding,) = found
        assert finding.fix and ("--image" in finding.fix or "runtime: pyxis" in finding.fix)


@pytest.mark.parametrize(("name", "kind"), [(name, kind) for name, kind in CASES
                                            if "pyxis" in kind or "docker" in kind or kind == "nccl-tests-image"])
def test_a_cluster_made_without_the_node_script_is_refused_with_a_fix(name: str, kind: str, config_path: Path,
                                                                      tmp_path: Path) -> None:
    spec = job_kinds(name)[kind]
    cluster = preset(name)
    cluster.pyxis.enabled = False
    cluster.docker.install = False
    config = render_config(cluster)
    assert DOCKER not in queue_scripts(config, cluster.queues[0].name)
    (finding,) = errors(preflight.preflight(spec, HeadNode(config, config_path), tmp_path))
    assert finding.path == "container.runtime" and finding.fix
    assert ("docker.install: true" in finding.fix) if "docker" in kind else ("enable pyxis" in finding.fix)


def test_docker_without_nvidias_toolkit_on_a_gpu_queue_is_refused(config_path: Path, tmp_path: Path) -> None:
    config = render_config(preset("p5"))
    for action in config["Scheduling"]["SlurmQueues"][0]["CustomActions"]["OnNodeConfigured"]["Sequence"]:
        if action["Script"].endswith("/" + DOCKER):
            action["Args"] = action["Args"][:2]  # --docker VERSION only
    (finding,) = errors(preflight.preflight(job_kinds("p5")["torchrun-docker"], HeadNode(config, config_path),
                                            tmp_path))
    assert "without NVIDIA's container toolkit" in finding.message and "docker.install: true" in finding.fix
    # On the CPU queue, which has no GPUs, docker alone will do.
    cpu = job_from_dict({"name": "prep", "command": ["prep.py"], "partition": "cpu", "launcher": "srun",
                         "container": {"runtime": "docker", "image": "python:3.12"}})
    assert errors(preflight.preflight(cpu, HeadNode(config, config_path), tmp_path)) == []


def test_a_custom_ami_may_bring_docker_so_the_preflight_only_warns(config_path: Path, tmp_path: Path) -> None:
    cluster = preset("p5")
    cluster.image.custom_ami = "ami-0123456789abcdef0"  # e.g. a Deep Learning AMI, which has docker
    config = render_config(cluster)
    findings = preflight.preflight(job_kinds("p5")["torchrun-docker"], HeadNode(config, config_path), tmp_path)
    assert errors(findings) == []
    assert any(f.rule == "preflight.container-engine" and "custom AMI may bring it" in f.message for f in findings)


def _fake_commands(directory: Path, *names: str) -> str:
    directory.mkdir()
    for name in names:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    return str(directory)


@pytest.mark.parametrize(("runtime", "instance", "commands", "missing"), [
    ("docker", "p5", ("docker", "nvidia-container-cli"), None),
    ("docker", "p5", ("docker",), "NVIDIA's container toolkit"),
    ("docker", "trn1", ("docker",), None),
    ("docker", "local", (), "docker"),
    ("apptainer", "p5", ("apptainer",), None),
    ("apptainer", "local", ("docker",), "apptainer"),
])
def test_without_parallelclusters_config_the_commands_jobs_find_decide(runtime: str, instance: str,
                                                                      commands: tuple[str, ...], missing: str | None,
                                                                      config_path: Path, tmp_path: Path) -> None:
    """A local cluster (or one ParallelCluster did not make): the PATH the cluster's jobs get must have the engine."""
    spec = job_from_dict({"name": "j", "command": ["train.py"], "instance": instance,
                          "container": {"runtime": runtime, "image": "docker://python:3.12"
                                        if runtime == "apptainer" else "python:3.12"}})
    slurm = Slurm(extra_env={"PATH": _fake_commands(tmp_path / "bin", *commands)})
    found = preflight.container_engine(spec, slurm, {}, tmp_path)
    if missing is None:
        assert found == []
    else:
        (finding,) = found
        assert f"no {missing}" in finding.message and "install" in finding.fix and "runtime: pyxis" in finding.fix


def test_nccl_tests_find_a_binary_on_shared_storage(config_path: Path, tmp_path: Path) -> None:
    binary = tmp_path / "fsx" / "all_reduce_perf"
    spec = nccl_test_spec(2, instance_type="p5", binary=str(binary))
    head = HeadNode(render_config(preset("p5")), config_path)
    (finding,) = errors(preflight.preflight(spec, head, tmp_path))
    assert finding.path == "command" and "--binary PATH" in finding.fix and "--image" in finding.fix
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    assert errors(preflight.preflight(spec, head, tmp_path)) != []  # not executable
    binary.chmod(0o755)
    assert errors(preflight.preflight(spec, head, tmp_path)) == []

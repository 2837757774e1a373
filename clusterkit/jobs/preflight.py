"""Checks before a submission: does the cluster give the job what it relies on?

Each check is a small rule (id `preflight.NAME`) returning findings (level, field path, message, fix), run
against the live cluster's commands; nothing is changed. Without them
these problems surface silently or hours later: a job whose log directory does not exist dies
without a log, pyxis flags are ignored where the plugin is not loaded, sacct-less clusters never
show a job end.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path

from clusterkit.catalog import find_instance_type
from clusterkit.cluster.node_scripts import DOCKER, PARALLELCLUSTER_CONFIG, queue_scripts
from clusterkit.errors import ClusterkitError
from clusterkit.findings import Finding, error, shorten, warning
from clusterkit.jobs.spec import JobSpec
from clusterkit.rules import RuleBook
from clusterkit.slurm import Slurm
from clusterkit.transport import Transport, can_create, is_readable_file

PREFLIGHT_RULES: RuleBook[JobSpec] = RuleBook("preflight")
rule = PREFLIGHT_RULES.rule


@rule
def requeue(spec: JobSpec, slurm: Slurm, config: dict[str, str], workdir: Path) -> list[Finding]:
    if spec.requeue or config.get("JobRequeue") == "1":
        return []
    return [warning("requeue", "the job is not requeueable and the cluster's JobRequeue is 0: "
                    "a node failure ends it NODE_FAIL", fix="set requeue: true", value=spec.requeue)]


@rule
def accounting(spec: JobSpec, slurm: Slurm, config: dict[str, str], workdir: Path) -> list[Finding]:
    storage = config.get("AccountingStorageType", "")
    if storage and not storage.endswith("/none"):
        return []
    return [error("cluster", "the cluster has no job accounting (AccountingStorageType is "
                  f"{storage or 'unset'}): sacct cannot tell when or how a job ended",
                  fix="configure slurmdbd (ParallelCluster: Scheduling.SlurmSettings.Database)", value=storage)]


@rule
def pyxis(spec: JobSpec, slurm: Slurm, config: dict[str, str], workdir: Path) -> list[Finding]:
    if spec.container.runtime != "pyxis":
        return []
    help_text = slurm.run("srun", "--help", check=False).stdout
    if "--container-image" not in help_text:
        return [error("container.runtime", "the pyxis plugin is not loaded on this cluster: "
                      "srun does not know --container-image", fix="enable pyxis (plugstack.conf), or use "
                      "runtime: docker, apptainer or none", value="pyxis")]
    if "--container-env" not in help_text:
        return [error("container.runtime", "this cluster's pyxis has no --container-env: the "
                      "image's environment would override the job's presets and env", fix="upgrade pyxis "
                      "(NVIDIA/pyxis), or use runtime: apptainer or docker", value="pyxis")]
    return []


@rule
def image(spec: JobSpec, slurm: Slurm, config: dict[str, str], workdir: Path) -> list[Finding]:
    image = spec.container.image
    if not image or spec.container.runtime == "none" or not (image.startswith("/") or image.startswith(".")):
        return []  # a registry reference: pulled on the nodes
    path = workdir / image
    if is_readable_file(slurm.transport, path):
        return []
    return [error("container.image", f"image file {str(path)!r} is missing or not readable",
                  fix="import it first (enroot import -o NAME.sqsh dockerd://IMAGE) onto shared storage",
                  value=image)]


def parallelcluster_config(transport: Transport) -> dict | None:
    """ParallelCluster's configuration of the cluster, read on its head node; None where there is none (a local
    cluster, one ParallelCluster did not make) or it cannot be read as one."""
    result = transport.run(["cat", "--", PARALLELCLUSTER_CONFIG])
    if result.returncode != 0:
        return None
    import yaml  # lazy: only a container job on a cluster reads it

    try:
        config = yaml.safe_load(result.stdout.decode(errors="replace"))
    except yaml.YAMLError:
        return None
    return config if isinstance(config, dict) else None


def _queue(config: dict, partition: str | None) -> tuple[str, list[str]]:
    """The job's queue (the named partition, else the first queue: Slurm's default) and its instance types."""
    queues = [q for q in config.get("Scheduling", {}).get("SlurmQueues", []) or [] if isinstance(q, dict)]
    queue = next((q for q in queues if q.get("Name") == partition), None) if partition else (queues or [None])[0]
    if queue is None:
        return partition or "", []
    types = [str(instance.get("InstanceType")) for compute in queue.get("ComputeResources", []) or []
             for instance in ([compute] + list(compute.get("Instances", []) or [])) if instance.get("InstanceType")]
    return str(queue.get("Name")), types


_CONTAINER_FIX = ("use runtime: pyxis (the same image through enroot: dockerd://IMAGE or a .sqsh file), "
                  "or create the cluster with docker.install: true (clusterkit's docker node script)")


@rule
def container_engine(spec: JobSpec, slurm: Slurm, config: dict[str, str], workdir: Path) -> list[Finding]:
    """docker (with NVIDIA's container toolkit on GPUs) or apptainer must be on the nodes the job runs on: read
    from the node scripts ParallelCluster runs on the job's queue, else (a local cluster, one ParallelCluster
    did not make) from the commands the cluster's jobs find."""
    runtime = spec.container.runtime
    if runtime not in ("docker", "apptainer"):
        return []
    cluster_config = parallelcluster_config(slurm.transport)
    if cluster_config is None:
        return _engine_commands(spec, slurm)
    queue, types = _queue(cluster_config, spec.partition)
    gpu = any(facts is not None and facts.accelerator == "gpu" for facts in map(find_instance_type, types))
    docker = queue_scripts(cluster_config, queue).get(DOCKER)
    if runtime == "docker" and docker is not None and (not gpu or "--nvidia-container-toolkit" in docker):
        return []
    if runtime == "docker" and docker is not None:
        problem = ("installs docker without NVIDIA's container toolkit on its GPU nodes: `docker run --gpus all` "
                   "would fail")
    elif runtime == "docker":
        problem = "installs no docker on its nodes (clusterkit's docker node script is not among their actions)"
    else:
        problem = "installs no apptainer on its nodes (no clusterkit node script does)"
    fix = (_CONTAINER_FIX if runtime == "docker" else
           "use runtime: pyxis or docker, or boot a custom AMI that has apptainer")
    message = f"queue {queue!r} of this ParallelCluster cluster {problem}"
    if cluster_config.get("Image", {}).get("CustomAmi"):
        return [warning("container.runtime", f"{message}; its custom AMI may bring it", fix=fix, value=runtime)]
    return [error("container.runtime", f"{message}: the job would fail at its start", fix=fix, value=runtime)]


# The commands a container runtime runs on the nodes; `nvidia-container-cli` is what docker's --gpus calls.
_ENGINE_COMMANDS = {"docker": ("docker",), "apptainer": ("apptainer",)}
_GPU_COMMANDS = {"docker": ("nvidia-container-cli",), "apptainer": ()}
_COMMANDS_PROBE = 'for c in "$@"; do command -v -- "$c" >/dev/null 2>&1 || echo "$c"; done'


def _engine_commands(spec: JobSpec, slurm: Slurm) -> list[Finding]:
    runtime = spec.container.runtime
    facts = spec.instance_facts
    commands = _ENGINE_COMMANDS[runtime] + (_GPU_COMMANDS[runtime] if facts and facts.accelerator == "gpu" else ())
    result = slurm.transport.run(["/bin/sh", "-c", _COMMANDS_PROBE, "sh", *commands], env=slurm.env)
    missing = result.stdout.decode(errors="replace").split()
    if not missing:
        return []
    what = ("NVIDIA's container toolkit (nvidia-container-cli)" if missing == ["nvidia-container-cli"]
            else " and ".join(missing))
    alternative = "pyxis" if runtime == "docker" else "pyxis or docker"
    return [error("container.runtime", f"{slurm.transport.label} has no {what} on the PATH jobs get: the job would "
                  "fail at its start", fix=f"install {what} on every node, or use runtime: {alternative}",
                  value=runtime)]


@rule
def nccl_tests_binary(spec: JobSpec, slurm: Slurm, config: dict[str, str], workdir: Path) -> list[Finding]:
    """`clusterkit nccl-test` without an image runs all_reduce_perf from the nodes' file system: it must be there
    (checked where the cluster's commands run: the local cluster's nodes, or a ParallelCluster head node, which sees
    shared storage but no compute node's /opt)."""
    from clusterkit.jobs.nccl_tests import bare_all_reduce_binary

    binary = bare_all_reduce_binary(spec)
    if binary is None:
        return []
    result = slurm.transport.run(["/bin/sh", "-c", 'test -f "$1" && test -x "$1"', "sh", binary], env=slurm.env)
    if result.returncode == 0:
        return []
    return [error("command", f"all_reduce_perf {shorten(binary, PATH_SHOWN_CHARS)!r} is missing or not executable "
                  f"on {slurm.transport.label}; no clusterkit preset installs nccl-tests on the nodes",
                  fix="pass --image IMAGE (a GPU image of `clusterkit container dockerfile`, which builds nccl-tests "
                  "into /opt/nccl-tests), or --binary PATH to an all_reduce_perf on shared storage (/fsx)",
                  value=binary)]


# Runs the supervisor's interpreter as the batch script will: from the job's working directory (which is on
# `python -m`'s path, and which a relative path starts from; `/` until a remote run's directory is made), with
# the cluster's PATH and the jobs' environment. 127: no such program; 3: it runs, but without clusterkit
# (find_spec imports none of it).
PATH_SHOWN_CHARS = 240  # an interpreter's path shown whole in the message, up to what a person reads
_SUPERVISOR_PROBE = 'cd -- "$3" 2>/dev/null || cd /; command -v -- "$1" >/dev/null 2>&1 || exit 127; exec "$1" -c "$2"'
_FINDS_CLUSTERKIT = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('clusterkit') else 3)"
_SUPERVISOR_FIX = ("set supervise.python to a Python with clusterkit installed that every node has (an absolute path "
                   "on shared storage), or install clusterkit for {python}")


@rule
def supervisor_python(spec: JobSpec, slurm: Slurm, config: dict[str, str], workdir: Path) -> list[Finding]:
    if spec.supervise is None:
        return []
    python = spec.supervise.python or "python3"  # what the script runs without one (render's default)
    result = slurm.transport.run(["/bin/sh", "-c", _SUPERVISOR_PROBE, "sh", python, _FINDS_CLUSTERKIT, str(workdir)],
                                 env=slurm.env)
    if result.returncode == 0:
        return []
    shown, where = repr(shorten(python, PATH_SHOWN_CHARS)), slurm.transport.label
    if result.returncode == 127:
        problem = f"{shown} is no program on {where}: the job would end at its start (exit 127)"
    elif result.returncode == 3:
        problem = f"{shown} on {where} cannot import clusterkit: the supervisor would not start"
    else:
        detail = (result.stderr.decode(errors="replace").strip().splitlines() or [f"exit {result.returncode}"])[-1]
        problem = f"{shown} does not run on {where}: {detail}"
    return [error("supervise.python", f"the supervisor's interpreter {problem}",
                  fix=_SUPERVISOR_FIX.format(python=shown), value=python)]


def log_directories(spec: JobSpec, workdir: Path) -> list[tuple[str, Path]]:
    """(field, directory) of each log file pattern whose directory is fixed before the job runs."""
    found = []
    for field_path, pattern in (("logs.output", spec.logs.output), ("logs.error", spec.logs.error)):
        directory = (workdir / pattern).parent if pattern else None
        if directory is not None and "%" not in str(directory):
            found.append((field_path, directory))
    return found


@rule
def log_directory(spec: JobSpec, slurm: Slurm, config: dict[str, str], workdir: Path) -> list[Finding]:
    return [error(field_path, f"log directory {str(directory)!r} cannot be created: Slurm "
                  "would start the job and lose its output", fix="use a writable directory on shared storage",
                  value=str(directory))
            for field_path, directory in log_directories(spec, workdir)
            if not can_create(slurm.transport, directory)]


@rule
def checkpoint_directory(spec: JobSpec, slurm: Slurm, config: dict[str, str],
                               workdir: Path) -> list[Finding]:
    if not spec.checkpoint_dir or can_create(slurm.transport, workdir / spec.checkpoint_dir):
        return []
    return [error("checkpoint_dir", f"checkpoint directory {spec.checkpoint_dir!r} cannot be "
                  "created", fix="use a writable directory on storage every node sees (/fsx on ParallelCluster)",
                  value=spec.checkpoint_dir)]


def _gpus(gres: str) -> int:
    match = re.search(r"gpu(?::[^:(,]+)?:(\d+)", gres)
    return int(match.group(1)) if match else 0


@rule
def partition(spec: JobSpec, slurm: Slurm, config: dict[str, str], workdir: Path) -> list[Finding]:
    rows = slurm.partitions()
    wanted = spec.partition
    if wanted:
        rows_here = [r for r in rows if r["name"].rstrip("*") == wanted]
        if not rows_here:
            names = sorted({r["name"].rstrip("*") for r in rows})
            return [error("partition", f"no partition {wanted!r} on this cluster",
                          fix=f"use one of: {', '.join(names)}", value=wanted)]
    else:
        rows_here = [r for r in rows if r["name"].endswith("*")] or rows
    gpus_needed = spec.gpus_per_node or 0
    fitting = sum(int(r["nodes"]) for r in rows_here if _gpus(r["gres"]) >= gpus_needed)
    allocated = spec.allocated_nodes  # the step's nodes and its spares
    if fitting >= allocated:
        return []
    partition = wanted or (rows_here[0]["name"].rstrip("*") if rows_here else "default")
    spares = allocated - spec.nodes
    what = (f"{allocated} nodes" + (f" ({spec.nodes} and {spares} spare)" if spares else "")
            + (f" with {gpus_needed} GPUs each" if gpus_needed else ""))
    fix = (f"ask for at most {fitting} nodes, spares included" if spares else f"ask for at most {fitting} nodes")
    return [error("supervise.spares" if spares and spec.nodes <= fitting else "nodes",
                  f"partition {partition!r} has {fitting} nodes that fit, the job asks for {what}: it would pend "
                  "forever", fix=fix, value=spares if spares and spec.nodes <= fitting else spec.nodes)]


def preflight(spec: JobSpec, slurm: Slurm, workdir: Path) -> list[Finding]:
    """Run every check against the live cluster; all findings are reported together."""
    return PREFLIGHT_RULES.check(spec, slurm, slurm.config(), workdir)


# What a node must be able to do to run a submitit job: import submitit and cloudpickle, with the
# submitter's Python minor version (pickles of functions do not travel between minor versions) and,
# better, the same cloudpickle (its format changes between releases).
_CALLABLE_PROBE = ("import sys, json, submitit, cloudpickle; print(json.dumps({'python': '%d.%d' % "
                   "sys.version_info[:2], 'cloudpickle': cloudpickle.__version__}))")


def check_callable_runtime(slurm: Slurm, python: str, srun_args: tuple[str, ...] = ()) -> list[Finding]:
    """Run the interpreter that will run a pickled callable, on a node, the way submitit will."""
    return list(_callable_runtime_findings(slurm.slurm_conf, tuple(sorted(slurm.extra_env.items())),
                                           slurm.transport, python, srun_args))


@functools.lru_cache(maxsize=32)
def _callable_runtime_findings(slurm_conf: Path | None, extra_env: tuple[tuple[str, str], ...], transport: Transport,
                               python: str, srun_args: tuple[str, ...]) -> tuple[Finding, ...]:
    slurm = Slurm(slurm_conf, extra_env=dict(extra_env), transport=transport)
    argv = ["-N1", "-n1", "--quiet", *srun_args, python, "-c", _CALLABLE_PROBE]
    try:
        result = slurm.run("srun", *argv, check=False, timeout=120)
    except ClusterkitError as failure:
        return (error("python", f"could not start {python!r} on a node: {failure}",
                      fix="check that the cluster has free nodes", value=python),)
    ours = "%d.%d" % sys.version_info[:2]
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
        missing = re.search(r"No module named '([^']+)'", result.stderr)
        if missing:
            return (error("python", f"{python!r} on the nodes cannot import {missing.group(1)}, "
                          "which runs the pickled function", fix=f"install submitit and cloudpickle for "
                          f"{python!r} (in the image, for containers), or pass python= one that has them",
                          value=python),)
        return (error("python", f"{python!r} does not run on the nodes: {detail}",
                      fix="pass python= an interpreter the nodes (or the container) have", value=python),)
    try:
        theirs = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return (error("python", f"{python!r} on the nodes printed no versions: "
                      f"{result.stdout.strip()[-200:]!r}", fix="check the interpreter", value=python),)
    if theirs.get("python") != ours:
        return (error("python", f"the nodes' {python!r} is Python {theirs.get('python')}, this one "
                      f"is {ours}: a pickled function does not travel between Python versions",
                      fix=f"use Python {ours} on the nodes (or in the image)", value=python),)
    import cloudpickle

    if theirs.get("cloudpickle") != cloudpickle.__version__:
        return (warning("python", f"the nodes' {python!r} has cloudpickle {theirs.get('cloudpickle')}, "
                        f"this one {cloudpickle.__version__}: a function pickled here may not load there",
                        fix=f"install cloudpickle=={cloudpickle.__version__} on both sides", value=python),)
    return ()

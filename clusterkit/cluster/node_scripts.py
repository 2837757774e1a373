"""clusterkit's own node set-up scripts: shipped in the package, uploaded at create, pinned by content hash.

A node script runs as root on the nodes it is configured for (a ParallelCluster custom action). Its
S3 key names the SHA-256 of its bytes (`clusterkit/node-scripts/sha256-<hex>/<name>`), so a config
runs exactly the bytes this clusterkit shipped, and a changed script gets a new URL: there is no moving
branch to follow. Adding a script is adding a file to the top-level `node-scripts/` directory and
naming it in the config (`node_script(NAME).url(bucket)`); `uploads(config)` finds it there and
`AwsProvider.apply` uploads it before the cluster is created.

Arguments reach a script as separate argv words (ParallelCluster runs `[script] + Args` without a
shell); the scripts validate every argument again before using it.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from clusterkit.cluster.spec import DEFAULT_SHARED_DIR, EPHEMERAL_MOUNT_DIR
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.resources import data_dir

DATA_DIR = "node-scripts"
KEY_PREFIX = "clusterkit/node-scripts"
PYXIS_ENROOT = "pyxis-enroot.sh"
NEURON = "neuron.sh"
CLUSTERKIT_VENV = "clusterkit-venv.sh"
CLUSTERKIT_AGENT = "clusterkit-agent.sh"
DOCKER = "docker.sh"

# Docker's engine and NVIDIA's container toolkit on the compute nodes (docker.sh), for `runtime: docker` jobs.
DOCKER_VERSION = "28.5.2"
NVIDIA_CONTAINER_TOOLKIT_VERSION = "1.18.2"
# Where ParallelCluster keeps the cluster's configuration on its head node (and every node): the preflight reads
# which of clusterkit's node scripts each queue runs there.
PARALLELCLUSTER_CONFIG = "/opt/parallelcluster/shared/cluster-config.yaml"
# SageMaker HyperPod's lifecycle scripts: node-scripts/hyperpod/ and the node scripts they call. HyperPod fetches a
# whole S3 prefix and runs one file of it, so the set is uploaded under one key named by the SHA-256 of all of it.
HYPERPOD_LIFECYCLE = "hyperpod"
LIFECYCLE_KEY_PREFIX = "clusterkit/hyperpod-lifecycle"

# The Neuron packages of Neuron SDK 2.28.0 (Trn1): the driver the node needs, and the runtime,
# collectives and tools for jobs run without a container. The container recipes pin the same release
# (clusterkit.stack.recipes.NEURON_DEFAULTS); a test keeps the two equal.
NEURON_SDK = "2.28.0"
NEURON_PACKAGES = {
    "dkms": "2.26.5.0",  # aws-neuronx-dkms
    "runtime": "2.30.51.0",  # aws-neuronx-runtime-lib
    "collectives": "2.30.59.0",  # aws-neuronx-collectives
    "tools": "2.28.23.0",  # aws-neuronx-tools
}

# The one list of system directories. No root node script creates, makes world-writable or replaces one of
# SYSTEM_TREES or anything below it, nor of SYSTEM_DIRS, nor a directory that holds one (`/`, `/opt`, `/var`),
# and no storage is mounted on any of them. Each node script that takes a directory holds the same lists (a test
# keeps them equal), so that it refuses them on its own when run by hand.
SYSTEM_TREES = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root", "/run", "/sbin", "/sys",
    "/tmp", "/usr", "/opt/amazon", "/opt/aws", "/opt/intel", "/opt/parallelcluster", "/opt/slurm", "/var/adm",
    "/var/cache", "/var/crash", "/var/db", "/var/empty", "/var/lib", "/var/local", "/var/lock", "/var/log",
    "/var/mail", "/var/opt", "/var/run", "/var/spool", "/var/tmp", "/var/yp",
)
# Refused themselves, their subdirectories free: ParallelCluster's reserved mount directories outside SYSTEM_TREES.
SYSTEM_DIRS = ("/media", "/mnt", "/srv")
# Mount points of every ParallelCluster node, whatever the spec mounts: the instance store and the shared /home.
NODE_MOUNT_POINTS = (EPHEMERAL_MOUNT_DIR, DEFAULT_SHARED_DIR)


def system_dir_problem(path: str) -> str | None:
    """Why an absolute, normalised path belongs to the system (it is one of the system directories, lies inside
    one of SYSTEM_TREES, or holds one of them), or None."""
    for system in SYSTEM_TREES + SYSTEM_DIRS:
        if path == system:
            return f"{path} is a system directory"
        if system in SYSTEM_TREES and path.startswith(system + "/"):
            return f"{path} is inside the system directory {system}"
        if system.startswith(path.rstrip("/") + "/"):
            return f"{path} holds the system directory {system}"
    return None


_URL_RE = re.compile(rf"s3://(?P<bucket>[a-z0-9.-]+)/{KEY_PREFIX}/sha256-(?P<sha>[0-9a-f]{{64}})/(?P<name>[a-z0-9.-]+)")


@lean_dataclass(frozen=True)
class NodeScript:
    """A node script shipped in the package, named by the SHA-256 of its content."""

    name: str  # the file name in node-scripts/
    path: Path
    sha256: str

    @property
    def key(self) -> str:
        return f"{KEY_PREFIX}/sha256-{self.sha256}/{self.name}"

    def url(self, bucket: str) -> str:
        return f"s3://{bucket}/{self.key}"


@functools.lru_cache(maxsize=None)
def node_script(name: str) -> NodeScript:
    path = data_dir(DATA_DIR) / name
    return NodeScript(name=name, path=path, sha256=hashlib.sha256(path.read_bytes()).hexdigest())


def lifecycle_scripts() -> dict[str, Path]:
    """File name -> shipped file, for every script of HyperPod's lifecycle set (the set's own and the node
    scripts it calls)."""
    directory = data_dir(DATA_DIR) / HYPERPOD_LIFECYCLE
    found = {path.name: path for path in sorted(directory.iterdir()) if path.is_file()}
    for name in (CLUSTERKIT_VENV, CLUSTERKIT_AGENT):
        found[name] = node_script(name).path
    return found


def set_digest(files: Mapping[str, bytes]) -> str:
    """One SHA-256 over the names and contents of a set of files: the name of a prefix holding exactly them."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{hashlib.sha256(files[name]).hexdigest()}\n".encode())
    return digest.hexdigest()


def _scripts(config: Any) -> Iterator[str]:
    """Every custom-action script URL anywhere in a ParallelCluster config."""
    if isinstance(config, dict):
        for key, value in config.items():
            if key == "Script" and isinstance(value, str):
                yield value
            else:
                yield from _scripts(value)
    elif isinstance(config, list):
        for item in config:
            yield from _scripts(item)


def uploads(config: dict[str, Any]) -> dict[str, NodeScript]:
    """URL -> clusterkit node script, for every one of clusterkit's scripts the config runs."""
    found = {}
    for url in _scripts(config):
        match = _URL_RE.fullmatch(url)
        if match is None or not (data_dir(DATA_DIR) / match["name"]).is_file():
            continue  # not one of the scripts this clusterkit ships
        script = node_script(match["name"])
        if script.sha256 == match["sha"]:
            found[url] = script
    return found


def queue_scripts(config: dict[str, Any], queue: str) -> dict[str, list[str]]:
    """clusterkit's node scripts (by name, any version) that a queue's nodes run when configured, with their args."""
    found: dict[str, list[str]] = {}
    for rendered in config.get("Scheduling", {}).get("SlurmQueues", []) or []:
        if not isinstance(rendered, dict) or rendered.get("Name") != queue:
            continue
        actions = (rendered.get("CustomActions") or {}).get("OnNodeConfigured") or {}
        for action in actions.get("Sequence", [actions]) if isinstance(actions, dict) else []:
            match = _URL_RE.fullmatch(str(action.get("Script", ""))) if isinstance(action, dict) else None
            if match is not None:
                found[match["name"]] = [str(arg) for arg in action.get("Args", []) or []]
    return found


def installed_python(config: dict[str, Any]) -> str | None:
    """The Python of the virtualenv the config's head node installs clusterkit into, if it does."""
    actions = config.get("HeadNode", {}).get("CustomActions", {}).get("OnNodeConfigured", {})
    for action in actions.get("Sequence", [actions]):
        args = list(action.get("Args", []))
        name = _URL_RE.fullmatch(str(action.get("Script", "")))
        if name is not None and name["name"] == CLUSTERKIT_VENV and "--venv" in args[:-1]:
            return f"{args[args.index('--venv') + 1]}/bin/python"
    return None

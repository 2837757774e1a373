"""Container run flags derived from the devices a node has: GPUs, Neuron devices, EFA devices.

`discover_devices` reads /dev under a (possibly fake) system root; `run_flags` is pure.
"""

from __future__ import annotations

import re
from pathlib import Path

from clusterkit.errors import ClusterkitError
from clusterkit.lean_dataclass import lean_dataclass

RUNTIMES = ("docker", "apptainer")

# Flags every training container needs, whatever the devices: host networking for EFA and NCCL's
# socket bootstrap, the host IPC namespace for NCCL's shared memory, unlimited locked memory for
# RDMA registration, and a larger stack as NVIDIA recommends for deep learning containers.
DOCKER_COMMON_FLAGS = ("--network", "host", "--ipc", "host", "--ulimit", "memlock=-1:-1",
                       "--ulimit", "stack=67108864")


@lean_dataclass(frozen=True)
class NodeDevices:
    """Device nodes under /dev, as absolute paths in numeric order."""

    gpus: tuple[str, ...] = ()  # /dev/nvidia0 ...
    neuron: tuple[str, ...] = ()  # /dev/neuron0 ...
    efa: tuple[str, ...] = ()  # /dev/infiniband/uverbs0 ...

    @property
    def accelerator(self) -> str:
        return "gpu" if self.gpus else "neuron" if self.neuron else "none"


def _numbered(root: Path, directory: str, stem: str) -> tuple[str, ...]:
    pattern = re.compile(rf"^{stem}(\d+)$")
    base = root / directory.lstrip("/")
    try:
        names = [entry.name for entry in base.iterdir()]
    except OSError:
        return ()
    numbered = sorted((int(match.group(1)), name) for name in names if (match := pattern.match(name)))
    return tuple(f"{directory}/{name}" for _, name in numbered)


def discover_devices(root: str | Path = "/") -> NodeDevices:
    """The GPU, Neuron and EFA device nodes under `root`/dev."""
    root = Path(root)
    return NodeDevices(gpus=_numbered(root, "/dev", "nvidia"), neuron=_numbered(root, "/dev", "neuron"),
                       efa=_numbered(root, "/dev/infiniband", "uverbs"))


def run_flags(devices: NodeDevices, runtime: str = "docker") -> list[str]:
    """Flags for `docker run` or `apptainer exec|run` that expose the node's accelerators and EFA."""
    if runtime == "docker":
        flags = ["--gpus", "all"] if devices.gpus else []
        for device in (*devices.neuron, *devices.efa):
            flags += ["--device", device]
        return flags + list(DOCKER_COMMON_FLAGS)
    if runtime == "apptainer":
        # Apptainer shares the host's /dev, network and IPC unless told otherwise: Neuron and EFA
        # devices are visible as they are; GPUs need the driver libraries bound in with --nv.
        return ["--nv"] if devices.gpus else []
    raise ClusterkitError(f"unknown container runtime {runtime!r}", fix=f"use one of: {', '.join(RUNTIMES)}")

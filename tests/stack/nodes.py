"""Fake nodes for the stack tests: a system root with device nodes, libraries and recorded outputs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from clusterkit.stack.probe import RECORDED_COMMANDS_DIR, strip_source

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_text(name: str) -> str:
    """A recorded output without its SOURCE: header."""
    return strip_source((FIXTURES / name).read_text()) or ""


def build_root(root: Path, *, devices: list[str] = (), files: Mapping[str, str] | None = None,
               commands: Mapping[str, str] | None = None) -> Path:
    """Create `devices` (empty files standing for /dev nodes and /sys entries), `files` and recorded
    `commands` ("fi_info -p efa" -> its output) under `root`."""
    for device in devices:
        path = root / device.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    for name, text in (files or {}).items():
        path = root / name.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    recorded = root / RECORDED_COMMANDS_DIR
    recorded.mkdir(parents=True, exist_ok=True)
    for command, output in (commands or {}).items():
        (recorded / "__".join(command.split())).write_text(output)
    return root


def p4d_devices(gpus: int = 8, efa: int = 4) -> list[str]:
    names = ["rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27"]
    return ([f"/dev/nvidia{i}" for i in range(gpus)] + ["/dev/nvidiactl", "/dev/nvidia-uvm"]
            + [f"/dev/infiniband/uverbs{i}" for i in range(efa)]
            + [f"/sys/class/infiniband/{names[i]}" for i in range(min(efa, len(names)))])


# Libraries as the GPU recipe lays them out (empty files: loading is the probe's job).
P4D_LIBRARIES = {
    "/opt/nccl/build/lib/libnccl.so.2.29.3": "",
    "/opt/nccl/build/lib/libnccl.so.2": "",
    "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so": "",
    "/opt/amazon/ofi-nccl/lib/libnccl-net.so": "",
    "/opt/amazon/efa/lib/libfabric.so.1": "",
    "/usr/lib/x86_64-linux-gnu/libcudnn.so.9.1.0": "",
    "/usr/local/cuda/version.json": '{"cuda": {"name": "CUDA SDK", "version": "12.4.1"}}',
}
# /proc/self/limits of a ParallelCluster node's job (slurmd runs with LimitMEMLOCK=infinity).
NODE_LIMITS = {"/proc/self/limits": (
    "Limit                     Soft Limit           Hard Limit           Units     \n"
    "Max open files            131072               131072               files     \n"
    "Max locked memory         unlimited            unlimited            bytes     \n")}
P4D_ENVIRON = {"LD_LIBRARY_PATH": "/opt/amazon/ofi-nccl/lib:/opt/nccl/build/lib:/opt/amazon/efa/lib"}


def p4d_commands() -> dict[str, str]:
    return {
        "nvidia-smi": fixture_text("nvidia-smi_p4d.txt"),
        "fi_info -p efa -t FI_EP_RDM": fixture_text("fi_info-efa_p4d.txt"),
        # Minimal answers of systemctl and nvidia-ctk (their whole output for these flags).
        "systemctl is-active nvidia-fabricmanager": "active\n",
        "nvidia-ctk --version": "NVIDIA Container Toolkit CLI version 1.17.4\n",
        # The doctor's torch probe prints: version, cuda available, device count.
        "torch-devices": "2.6.0+cu124 True 8\n",
    }

"""`clusterkit doctor`: check each layer of the stack on a node, or inside the container it runs in.

Each check is a small function over a `Probe` returning a `CheckResult` (pass, warn, fail or skip,
with a fix for every failure). `run_checks` is the API the resilience work reuses for node health.
Nothing here raises for a missing tool: a missing tool is a finding.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable

from clusterkit.catalog import InstanceType, find_instance_type, resolve_instance_type
from clusterkit.errors import ClusterkitError
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.slurm import controller_version, release
from clusterkit.stack.probe import Probe
from clusterkit.versions import version_tuple

ACCELERATORS = ("auto", "gpu", "neuron")

# Where the EFA installer (/opt/amazon/ofi-nccl) and a source build (/opt/aws-ofi-nccl) put the plugin.
OFI_NCCL_DIRS = ("/opt/amazon/ofi-nccl/lib", "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu",
                 "/opt/amazon/ofi-nccl/lib64", "/opt/aws-ofi-nccl/lib")
LIBRARY_DIRS = ("/opt/nccl/build/lib", "/usr/local/nccl/lib", "/usr/local/cuda/lib64", "/usr/local/cuda/lib",
                "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/lib")
# pip wheels (torch's nvidia-* dependencies) carry NCCL and cuDNN in site-packages.
WHEEL_LIBRARY_GLOBS = ("/usr/local/lib/python3*/dist-packages/nvidia/*/lib",
                       "/usr/lib/python3*/site-packages/nvidia/*/lib",
                       "/opt/conda/lib/python3*/site-packages/nvidia/*/lib")
EFA_LIBFABRIC_GLOBS = ("/opt/amazon/efa/lib/libfabric.so*", "/opt/amazon/efa/lib64/libfabric.so*")
NEURON_LIBRARY_DIR = "/opt/aws/neuron/lib"
CONTAINER_MARKERS = ("/.dockerenv", "/run/.containerenv", "/.singularity.d/runscript")
# On EC2 Nitro instances the DMI product name is the instance type.
DMI_PRODUCT_NAME = "/sys/devices/virtual/dmi/id/product_name"

EFA_FIX = ("launch the node with all its EFA interfaces (ParallelCluster: Efa: Enabled: true), and in a container "
           "pass every /dev/infiniband/uverbsN (see `clusterkit container run-flags`)")


class Status(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@lean_dataclass(frozen=True)
class CheckResult:
    """One check's verdict. `layer` is where the piece belongs: "ami" (host) or "container"."""

    name: str
    layer: str
    status: Status
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "layer": self.layer, "status": self.status.value, "detail": self.detail,
                "fix": self.fix}


@lean_dataclass(frozen=True)
class NvidiaSmi:
    driver_version: str | None
    cuda_version: str | None  # the newest CUDA the driver supports
    gpu_count: int


@lean_dataclass(frozen=True)
class Node:
    """What the checks share about the node under examination."""

    accelerator: str  # "gpu", "neuron" or "none"
    instance: InstanceType | None
    instance_source: str  # how the instance type was learnt, for messages
    in_container: bool
    nvidia_smi: NvidiaSmi | None
    nvidia_smi_message: str | None = None  # what nvidia-smi printed when it found no driver


Check = Callable[[Probe, Node], CheckResult]


# ---------------------------------------------------------------------------------------------
# Parsing tool output

_GPU_ROW = re.compile(r"^\|\s+(\d+)\s+(.+?)\s{2,}(?:On|Off)\s+\|\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:", re.MULTILINE)


def parse_nvidia_smi(text: str) -> NvidiaSmi | None:
    """Driver version, its newest CUDA, and the GPU count from `nvidia-smi` (table or -q output)."""
    driver = re.search(r"Driver Version\s*:\s*([0-9.]+)", text)
    if driver is None:
        return None
    cuda = re.search(r"CUDA Version\s*:\s*([0-9.]+)", text)
    attached = re.search(r"Attached GPUs\s*:\s*(\d+)", text)
    count = int(attached.group(1)) if attached else len(_GPU_ROW.findall(text))
    return NvidiaSmi(driver.group(1), cuda.group(1) if cuda else None, count)


def parse_fi_info(text: str) -> list[dict[str, str]]:
    """The entries of `fi_info` output, each a dict of its fields (provider, fabric, domain, ...)."""
    entries: list[dict[str, str]] = []
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue
        if key == "provider":
            entries.append({})
        if entries:
            entries[-1][key.strip()] = value.strip()
    return entries


def parse_fi_info_providers(text: str) -> list[str]:
    """Provider names from `fi_info -l` ("name:" lines followed by "version: ..." lines)."""
    return [line.strip().rstrip(":") for line in text.splitlines()
            if line.strip().endswith(":") and not line.startswith((" ", "\t"))]


def parse_neuron_ls(text: str) -> tuple[str | None, int]:
    """The instance type neuron-ls reports, and how many Neuron devices it lists."""
    instance = re.search(r"^instance-type:\s*(\S+)", text, re.MULTILINE)
    devices = {int(m.group(1)) for m in re.finditer(r"^\|\s*(\d+)\s*\|\s*\d+\s*\|", text, re.MULTILINE)}
    return (instance.group(1) if instance else None), len(devices)


# ---------------------------------------------------------------------------------------------
# Finding things on the node

def _library_dirs(probe: Probe, extra: tuple[str, ...] = ()) -> list[str]:
    from_env = [d for d in probe.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    from_wheels = [d for pattern in WHEEL_LIBRARY_GLOBS for d in probe.glob(pattern)]
    ordered = [*from_env, *extra, *LIBRARY_DIRS, *from_wheels]
    return list(dict.fromkeys(ordered))


def _find_libraries(probe: Probe, dirs: list[str], pattern: str, exclude: str | None = None) -> list[str]:
    found = []
    for directory in dirs:
        for path in probe.glob(f"{directory.rstrip('/')}/{pattern}"):
            if exclude is None or not re.search(exclude, path.rsplit("/", 1)[-1]):
                found.append(path)
    return found


def _soname_version(paths: list[str], stem: str) -> str | None:
    """The longest version in file names like libnccl.so.2.29.3."""
    versions = [m.group(1) for p in paths if (m := re.search(rf"{re.escape(stem)}\.so\.([0-9.]+)$", p))]
    return max(versions, key=lambda v: version_tuple(v) or (), default=None)


def _run_first(probe: Probe, *commands: list[str]) -> str | None:
    for argv in commands:
        output = probe.run(argv)
        if output is not None:
            return output
    return None


def _efa_counts(probe: Probe) -> tuple[int, int]:
    """EFA devices seen in /sys/class/infiniband and as /dev/infiniband/uverbs* nodes."""
    return len(probe.glob("/sys/class/infiniband/*")), len(probe.glob("/dev/infiniband/uverbs*"))


# ---------------------------------------------------------------------------------------------
# GPU checks

def check_nvidia_driver(probe: Probe, node: Node) -> CheckResult:
    name, layer = "nvidia driver", "ami"
    smi = node.nvidia_smi
    if smi is None:
        where = "in the container" if node.in_container else "on the host"
        said = f": {node.nvidia_smi_message}" if node.nvidia_smi_message else ""
        return CheckResult(name, layer, Status.FAIL, f"nvidia-smi is missing or reports no driver {where}{said}",
                           "run with --gpus all (docker) or --nv (apptainer)" if node.in_container else
                           "install the NVIDIA driver on the AMI (a Deep Learning AMI has it)")
    detail = f"driver {smi.driver_version}, supports CUDA {smi.cuda_version or '?'}, {smi.gpu_count} GPU(s)"
    expected = node.instance.accelerator_count if node.instance and node.instance.accelerator == "gpu" else None
    if expected is not None and smi.gpu_count < expected:
        return CheckResult(name, layer, Status.FAIL, f"{detail}; {node.instance.name} has {expected}",
                           "check `nvidia-smi` and the kernel log for failed GPUs (XID errors); replace the node")
    return CheckResult(name, layer, Status.PASS, detail)


def check_fabric_manager(probe: Probe, node: Node) -> CheckResult:
    name, layer = "fabric manager", "ami"
    if node.instance is None:
        return CheckResult(name, layer, Status.SKIP, "instance type unknown: pass --expect-instance-type")
    if not node.instance.nvswitch:
        return CheckResult(name, layer, Status.SKIP, f"{node.instance.name} has no NVSwitch")
    if node.in_container:
        return CheckResult(name, layer, Status.SKIP, "runs on the host; check it there")
    state = probe.run(["systemctl", "is-active", "nvidia-fabricmanager"])
    if state is None:
        return CheckResult(name, layer, Status.WARN, "systemctl not available; cannot tell",
                           "check `nvidia-smi -q` shows Fabric State: Completed")
    if state.strip() == "active":
        return CheckResult(name, layer, Status.PASS, "nvidia-fabricmanager is active")
    return CheckResult(name, layer, Status.FAIL, f"nvidia-fabricmanager is {state.strip() or 'not active'}",
                       "install nvidia-fabricmanager matching the driver version and "
                       "`systemctl enable --now nvidia-fabricmanager`")


def check_container_toolkit(probe: Probe, node: Node) -> CheckResult:
    name, layer = "container toolkit", "ami"
    if node.in_container:
        return CheckResult(name, layer, Status.SKIP, "inside a container; the host runs the toolkit")
    output = _run_first(probe, ["nvidia-ctk", "--version"], ["nvidia-container-cli", "--version"])
    if output is None:
        return CheckResult(name, layer, Status.WARN, "neither nvidia-ctk nor nvidia-container-cli found",
                           "install nvidia-container-toolkit on the AMI to run GPU containers (docker --gpus all)")
    version = re.search(r"version\s+([0-9][0-9.]*)", output, re.IGNORECASE)
    return CheckResult(name, layer, Status.PASS, f"version {version.group(1) if version else '?'}")


def check_nccl(probe: Probe, node: Node) -> CheckResult:
    name, layer = "nccl", "container"
    found = _find_libraries(probe, _library_dirs(probe), "libnccl.so*")
    if not found:
        return CheckResult(name, layer, Status.FAIL, "libnccl.so not found on LD_LIBRARY_PATH or in the usual places",
                           "install NCCL in the image (`clusterkit container dockerfile` builds it into "
                           "/opt/nccl/build/lib) and put its directory on LD_LIBRARY_PATH")
    error = probe.load_library(found[0])
    if error:
        return CheckResult(name, layer, Status.FAIL, f"{found[0]} does not load: {error}",
                           "rebuild NCCL against this image's CUDA, or fix LD_LIBRARY_PATH")
    version = _soname_version(found, "libnccl")
    return CheckResult(name, layer, Status.PASS, f"{found[0]} (version {version or '?'})")


def check_ofi_nccl(probe: Probe, node: Node) -> CheckResult:
    name, layer = "aws-ofi-nccl plugin", "container"
    if node.instance is not None and not node.instance.efa:
        return CheckResult(name, layer, Status.SKIP, f"{node.instance.name} has no EFA")
    found = _find_libraries(probe, _library_dirs(probe, OFI_NCCL_DIRS), "libnccl-net*.so*")
    if not found:
        return CheckResult(name, layer, Status.FAIL, "libnccl-net*.so not found: NCCL falls back to TCP sockets",
                           "install the EFA installer in the image (it puts the plugin in /opt/amazon/ofi-nccl/lib) "
                           "and add that directory to LD_LIBRARY_PATH")
    plugin = found[0]
    error = probe.load_library(plugin)
    if error:
        return CheckResult(name, layer, Status.FAIL, f"{plugin} does not load: {error}",
                           "put /opt/amazon/efa/lib (libfabric) and the CUDA libraries on LD_LIBRARY_PATH")
    directory = plugin.rsplit("/", 1)[0]
    searched = [d.rstrip("/") for d in probe.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    configured = any(directory in (probe.read_text(conf) or "") for conf in probe.glob("/etc/ld.so.conf.d/*.conf"))
    if directory not in searched and not configured and "NCCL_NET_PLUGIN" not in probe.environ:
        return CheckResult(name, layer, Status.WARN, f"{plugin} exists but {directory} is not on LD_LIBRARY_PATH",
                           f"export LD_LIBRARY_PATH={directory}:$LD_LIBRARY_PATH so NCCL finds the plugin")
    return CheckResult(name, layer, Status.PASS, plugin)


def _container_cuda(probe: Probe) -> str | None:
    manifest = probe.read_text("/usr/local/cuda/version.json")
    if manifest:
        try:
            return json.loads(manifest)["cuda"]["version"]
        except (ValueError, KeyError, TypeError):
            pass
    text = probe.read_text("/usr/local/cuda/version.txt") or ""
    match = re.search(r"CUDA Version\s+([0-9.]+)", text)
    return match.group(1) if match else probe.environ.get("CUDA_VERSION")


def check_cuda_driver(probe: Probe, node: Node) -> CheckResult:
    name, layer = "cuda vs driver", "container"
    cuda = _container_cuda(probe)
    if cuda is None:
        return CheckResult(name, layer, Status.SKIP, "no CUDA toolkit found (/usr/local/cuda, CUDA_VERSION)")
    if node.nvidia_smi is None or node.nvidia_smi.cuda_version is None:
        return CheckResult(name, layer, Status.SKIP, f"CUDA {cuda}; driver unknown")
    have, driver_max = version_tuple(cuda) or (0,), version_tuple(node.nvidia_smi.cuda_version) or (0,)
    detail = f"CUDA {cuda} in the image; driver {node.nvidia_smi.driver_version} supports up to " \
             f"{node.nvidia_smi.cuda_version}"
    fix = (f"use an image with CUDA <= {node.nvidia_smi.cuda_version}, or a newer NVIDIA driver on the AMI "
           "(or the cuda-compat package in the image)")
    if have[0] > driver_max[0]:
        return CheckResult(name, layer, Status.FAIL, detail, fix)
    if have[:2] > driver_max[:2]:
        # Minor-version compatibility runs most CUDA 12.x code on any 12.x driver, but not newer PTX.
        return CheckResult(name, layer, Status.WARN, detail + " (minor-version compatibility only)", fix)
    return CheckResult(name, layer, Status.PASS, detail)


def check_cudnn(probe: Probe, node: Node) -> CheckResult:
    name, layer = "cudnn", "container"
    found = _find_libraries(probe, _library_dirs(probe), "libcudnn.so*")
    if not found:
        return CheckResult(name, layer, Status.WARN, "libcudnn.so not found",
                           "use a cudnn image flavour or install the framework's nvidia-cudnn wheel")
    return CheckResult(name, layer, Status.PASS, f"{found[0]} (version {_soname_version(found, 'libcudnn') or '?'})")


def check_torch_devices(probe: Probe, node: Node) -> CheckResult:
    name, layer = "framework devices", "container"
    output = probe.torch_devices()
    if output is None:
        return CheckResult(name, layer, Status.SKIP, "torch is not importable here")
    words = output.split()
    if len(words) < 3 or not words[2].isdigit():
        return CheckResult(name, layer, Status.WARN, f"unexpected answer from torch: {output!r}",
                           "run python -c 'import torch; print(torch.cuda.device_count())' to see why")
    version, available, count = words[0], words[1] == "True", int(words[2])
    if not available or count == 0:
        return CheckResult(name, layer, Status.FAIL, f"torch {version} sees no GPU",
                           "install a CUDA build of torch (not +cpu) and run the container with --gpus all")
    expected = node.nvidia_smi.gpu_count if node.nvidia_smi else count
    status = Status.PASS if count >= expected else Status.WARN
    fix = "" if status is Status.PASS else "check CUDA_VISIBLE_DEVICES and the container's --gpus flag"
    return CheckResult(name, layer, status, f"torch {version} sees {count} of {expected} GPU(s)", fix)


# ---------------------------------------------------------------------------------------------
# EFA checks (GPU and Neuron)

def check_efa_devices(probe: Probe, node: Node) -> CheckResult:
    name, layer = "efa devices", "ami"
    if node.instance is not None and not node.instance.efa:
        return CheckResult(name, layer, Status.SKIP, f"{node.instance.name} has no EFA")
    in_sys, in_dev = _efa_counts(probe)
    counts = [count for count in (in_sys, in_dev) if count]
    found = min(counts) if counts else 0
    detail = f"{in_sys} in /sys/class/infiniband, {in_dev} /dev/infiniband/uverbs*"
    if node.instance is None:
        if found:
            return CheckResult(name, layer, Status.PASS, f"{detail} (instance type unknown: count not checked)")
        if node.accelerator == "none":
            return CheckResult(name, layer, Status.SKIP, "no EFA devices and no accelerator")
        return CheckResult(name, layer, Status.WARN, f"no EFA devices: multi-node traffic would use TCP ({detail})",
                           EFA_FIX)
    expected = node.instance.efa_interfaces
    if found < expected:
        return CheckResult(name, layer, Status.FAIL, f"{found} of {expected} EFA devices on {node.instance.name} "
                           f"({detail})", EFA_FIX)
    return CheckResult(name, layer, Status.PASS, f"{found} of {expected} EFA devices ({detail})")


# EFA registers the memory it sends from: below this locked-memory limit libfabric's registrations fail. AWS's GPU
# cluster health check warns below 16 GiB (awsome-distributed-ai 4.validation_and_observability/
# 2.gpu-cluster-healthcheck/checks/2-efa-enumeration.sh); ParallelCluster's nodes give unlimited.
MIN_MEMLOCK_BYTES = 16 << 30
_MEMLOCK_LINE = re.compile(r"^Max locked memory\s+(\S+)\s+\S+\s+bytes", re.MULTILINE)


def check_memlock(probe: Probe, node: Node) -> CheckResult:
    """The locked-memory limit where this runs (a job's task, or the health program beside it): a warning, not a
    failure, since every node of a cluster shares it and draining them all would help nobody."""
    name, layer = "memlock", "ami"
    if node.instance is not None and not node.instance.efa:
        return CheckResult(name, layer, Status.SKIP, f"{node.instance.name} has no EFA")
    match = _MEMLOCK_LINE.search(probe.read_text("/proc/self/limits") or "")
    if match is None:
        return CheckResult(name, layer, Status.SKIP, "no /proc/self/limits to read")
    soft = match.group(1)
    if soft == "unlimited" or (soft.isdigit() and int(soft) >= MIN_MEMLOCK_BYTES):
        return CheckResult(name, layer, Status.PASS, f"locked-memory limit {soft}")
    return CheckResult(name, layer, Status.WARN, f"locked-memory limit {soft} bytes, below 16 GiB: EFA cannot "
                       "register its buffers", "set memlock unlimited (limits.conf, and LimitMEMLOCK=infinity in "
                       "slurmd's unit; docker: --ulimit memlock=-1)")


def check_libfabric_efa(probe: Probe, node: Node) -> CheckResult:
    name, layer = "libfabric efa provider", "container"
    if node.instance is not None and not node.instance.efa:
        return CheckResult(name, layer, Status.SKIP, f"{node.instance.name} has no EFA")
    if node.instance is None and not any(_efa_counts(probe)):
        return CheckResult(name, layer, Status.SKIP, "no EFA devices to use")
    output = _run_first(probe, ["fi_info", "-p", "efa", "-t", "FI_EP_RDM"],
                        ["/opt/amazon/efa/bin/fi_info", "-p", "efa", "-t", "FI_EP_RDM"])
    if output is None:
        libfabric = [path for pattern in EFA_LIBFABRIC_GLOBS for path in probe.glob(pattern)]
        if libfabric:
            return CheckResult(name, layer, Status.WARN, f"fi_info not installed (EFA installer --minimal?); "
                               f"{libfabric[0]} present", "install the full EFA installer in the image to check "
                               "the provider with fi_info -p efa")
        return CheckResult(name, layer, Status.FAIL, "neither fi_info nor the AWS libfabric (/opt/amazon/efa) found",
                           "install the EFA installer in the image with --skip-kmod --skip-limit-conf "
                           "(`clusterkit container dockerfile`)")
    domains = [entry.get("domain", "?") for entry in parse_fi_info(output)
               if entry.get("provider", "").startswith("efa")]
    if domains:
        return CheckResult(name, layer, Status.PASS, f"efa provider on {len(domains)} domain(s): {', '.join(domains)}")
    providers = parse_fi_info_providers(_run_first(probe, ["fi_info", "-l"]) or "")
    last_line = (output.strip().splitlines() or ["no output"])[-1]
    seen = f"providers available: {', '.join(providers)}" if providers else f"fi_info said: {last_line}"
    return CheckResult(name, layer, Status.FAIL, f"fi_info finds no efa provider ({seen}); NCCL would use sockets",
                       "make the EFA devices visible (" + EFA_FIX + ") and put /opt/amazon/efa/lib first on "
                       "LD_LIBRARY_PATH so the AWS libfabric is used")


# ---------------------------------------------------------------------------------------------
# Neuron checks

def check_neuron_driver(probe: Probe, node: Node) -> CheckResult:
    name, layer = "neuron driver", "ami"
    devices = [path for path in probe.glob("/dev/neuron*") if re.search(r"/neuron\d+$", path)]
    expected = node.instance.accelerator_count if node.instance and node.instance.accelerator == "neuron" else None
    if not devices:
        return CheckResult(name, layer, Status.FAIL, "no /dev/neuron* devices",
                           "pass --device /dev/neuronN for each device (`clusterkit container run-flags`)"
                           if node.in_container else "install aws-neuronx-dkms on the AMI")
    if expected is not None and len(devices) < expected:
        return CheckResult(name, layer, Status.FAIL, f"{len(devices)} of {expected} Neuron devices on "
                           f"{node.instance.name}", "pass every /dev/neuronN into the container, or replace the node")
    return CheckResult(name, layer, Status.PASS, f"{len(devices)} Neuron device(s)")


def check_neuron_tools(probe: Probe, node: Node) -> CheckResult:
    name, layer = "neuron tools", "container"
    output = _run_first(probe, ["neuron-ls"], ["/opt/aws/neuron/bin/neuron-ls"])
    if output is None:
        return CheckResult(name, layer, Status.WARN, "neuron-ls not found", "install aws-neuronx-tools")
    reported, count = parse_neuron_ls(output)
    if count == 0:
        return CheckResult(name, layer, Status.FAIL, "neuron-ls lists no Neuron devices",
                           "check the Neuron driver (aws-neuronx-dkms) and the devices passed to the container")
    return CheckResult(name, layer, Status.PASS, f"neuron-ls lists {count} device(s)"
                       + (f" on {reported}" if reported else ""))


def _neuron_library_check(name: str, stem: str, package: str) -> Check:
    def check(probe: Probe, node: Node) -> CheckResult:
        found = probe.glob(f"{NEURON_LIBRARY_DIR}/{stem}.so*")
        if not found:
            return CheckResult(name, "container", Status.FAIL, f"{stem}.so not found in {NEURON_LIBRARY_DIR}",
                               f"install {package} in the image")
        error = probe.load_library(found[0])
        if error:
            return CheckResult(name, "container", Status.FAIL, f"{found[0]} does not load: {error}",
                               f"reinstall {package} matching the driver")
        return CheckResult(name, "container", Status.PASS, found[0])
    return check


check_neuron_runtime = _neuron_library_check("neuron runtime", "libnrt", "aws-neuronx-runtime-lib")
check_neuron_collectives = _neuron_library_check("neuron collectives", "libnccom", "aws-neuronx-collectives")

GPU_CHECKS: tuple[Check, ...] = (check_nvidia_driver, check_fabric_manager, check_container_toolkit, check_efa_devices,
                                 check_memlock, check_libfabric_efa, check_nccl, check_ofi_nccl, check_cuda_driver, check_cudnn,
                                 check_torch_devices)
NEURON_CHECKS: tuple[Check, ...] = (check_neuron_driver, check_efa_devices, check_memlock, check_libfabric_efa, check_neuron_tools,
                                    check_neuron_runtime, check_neuron_collectives)
# With no accelerator, the network checks still apply; the rest are listed as skipped.
NO_ACCELERATOR_SKIPPED = ("nvidia driver", "neuron driver", "nccl", "aws-ofi-nccl plugin", "neuron runtime")


# ---------------------------------------------------------------------------------------------
# The node and the run

def detect_accelerator(probe: Probe) -> str:
    """"gpu", "neuron" or "none", from device nodes (and nvidia-smi inside GPU containers)."""
    if any(re.search(r"/nvidia\d+$", p) for p in probe.glob("/dev/nvidia*")):
        return "gpu"
    if any(re.search(r"/neuron\d+$", p) for p in probe.glob("/dev/neuron*")):
        return "neuron"
    return "none"


NO_ACCELERATOR = "no accelerator found: no /dev/nvidia* or /dev/neuron* devices on this node"


def _instance(probe: Probe, expect_instance_type: str | None) -> tuple[InstanceType | None, str]:
    if expect_instance_type:
        facts = resolve_instance_type(expect_instance_type)
        if facts is None:
            raise ClusterkitError(f"--expect-instance-type: unknown instance type {expect_instance_type!r}",
                                  fix="pass an EC2 instance type such as p4d.24xlarge or a preset such as p5")
        return facts, "--expect-instance-type"
    product = (probe.read_text(DMI_PRODUCT_NAME) or "").strip()
    facts = find_instance_type(product) if product else None
    return facts, ("DMI product name" if facts else "unknown")


def examine_node(probe: Probe, accelerator: str = "auto", expect_instance_type: str | None = None) -> Node:
    if accelerator not in ACCELERATORS:
        raise ClusterkitError(f"--accelerator: {accelerator!r} is not one of {', '.join(ACCELERATORS)}",
                              fix="pass --accelerator auto, gpu or neuron")
    instance, source = _instance(probe, expect_instance_type)
    if accelerator == "auto":
        accelerator = detect_accelerator(probe)
        if accelerator == "none" and instance is not None and instance.accelerator != "none":
            accelerator = instance.accelerator  # expected one: its checks will say what is missing
    in_container = any(probe.read_text(marker) is not None for marker in CONTAINER_MARKERS) \
        or "container" in probe.environ
    smi_output = probe.run(["nvidia-smi"]) if accelerator == "gpu" else None
    smi = parse_nvidia_smi(smi_output) if smi_output else None
    message = (smi_output.strip().splitlines() or [None])[0] if smi_output and smi is None else None
    return Node(accelerator, instance, source, in_container, smi, message)


def run_checks(probe: Probe, accelerator: str = "auto", expect_instance_type: str | None = None) -> list[CheckResult]:
    """Check every layer that applies to the node behind `probe`; never raises for what it finds."""
    return checks_for_node(probe, examine_node(probe, accelerator, expect_instance_type))


def checks_for_node(probe: Probe, node: Node) -> list[CheckResult]:
    if node.accelerator == "gpu":
        return [check(probe, node) for check in GPU_CHECKS]
    if node.accelerator == "neuron":
        return [check(probe, node) for check in NEURON_CHECKS]
    skipped = [CheckResult(name, "ami" if "driver" in name else "container", Status.SKIP, "no accelerator found")
               for name in NO_ACCELERATOR_SKIPPED]
    return [*skipped, check_efa_devices(probe, node), check_libfabric_efa(probe, node)]


def check_slurm(probe: Probe) -> CheckResult:
    """The Slurm this node talks to: the controller's version (as it reports itself) and this node's clients'.
    Never a failure (the node health check must not drain nodes over it); a controller of another release than the
    clients is a warning: Slurm's clients speak only to controllers a couple of releases apart."""
    name, layer = "slurm", "ami"
    clients = probe.run(["sinfo", "--version"])
    if clients is None:
        return CheckResult(name, layer, Status.SKIP, "no Slurm client commands on this node")
    client_version = (re.findall(r"\d+\.\d+\.\d+\S*", clients) or ["?"])[0]
    config = probe.run(["scontrol", "show", "config"]) or ""
    version = controller_version(config)
    if version is None:
        said = (config.strip().splitlines() or ["no answer"])[-1]
        return CheckResult(name, layer, Status.WARN, f"clients {client_version}; no controller answered: {said}",
                           "point SLURM_CONF at the cluster's slurm.conf (a local cluster: eval \"$(clusterkit local "
                           "env NAME)\") and check that slurmctld runs")
    if release(version) != release(client_version):
        return CheckResult(name, layer, Status.WARN, f"controller {version}, clients {client_version}",
                           "use the clients of the controller's release (a local cluster: eval \"$(clusterkit local "
                           "env NAME)\")")
    return CheckResult(name, layer, Status.PASS, f"Slurm {version} (controller), clients {client_version}")


def failed(results: list[CheckResult]) -> bool:
    return any(result.status is Status.FAIL for result in results)

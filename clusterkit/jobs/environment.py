"""Environment presets per instance type: EFA/NCCL for GPU nodes, Neuron runtime settings for Trainium.

Kept minimal and gated by the library versions in the image (the job spec's `stack`), following the
AWS EFA cheat-sheet (awsome-distributed-training, 1.architectures/efa-cheatsheet.md) and the sources of
aws-ofi-nccl and NCCL; docs/reference-parity.md lists every setting with its source:
- aws-ofi-nccl >= 1.7 with libfabric >= 1.18: FI_PROVIDER=efa and FI_EFA_USE_HUGE_PAGE=0 (huge pages
  make forked dataloader workers fail with ENOMEM);
- aws-ofi-nccl 1.6.x (or libfabric < 1.18): also FI_EFA_USE_DEVICE_RDMA=1 on RDMA-capable types;
- aws-ofi-nccl <= 1.5: also NCCL_PROTO=simple;
- EFA installer < 1.29.1 with NCCL >= 2.19: FI_EFA_SET_CUDA_SYNC_MEMOPS=0 (else memory registration fails);
- AWS's NCCL tuner: NCCL_TUNER_PLUGIN names it where NCCL and the plugin share a tuner interface and NCCL
  would not find it by itself (`stack_versions.tuner_interface`, `nccl_finds_tuner`): aws-ofi-nccl 1.8-1.15
  ship it as a library of their own; from 1.16 it is inside the net plugin, which NCCL >= 2.21 searches.
- Trainium2: NEURON_LOGICAL_NC_CONFIG, the logical NeuronCore size the ranks per node are counted in.
- Launchers: PMIX_MCA_gds=hash for MPI (PMIx) steps in containers; NEURON_RT_STOCHASTIC_ROUNDING_EN=1 for Neuron
  training.
No RDMAV_* variable is ever set. The job spec's own `env` overrides every preset.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING

from clusterkit import runtime
from clusterkit.catalog import InstanceType
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.stack_versions import nccl_finds_tuner, tuner_interface
from clusterkit.versions import version_tuple

if TYPE_CHECKING:
    from clusterkit.jobs.spec import JobSpec

# Where the aws-ofi-nccl plugin lives, in the order a bare host is searched at run time: the EFA
# installer's copy on Debian-style systems ({arch}: the machine, e.g. x86_64), on RPM-style systems,
# then a build from source. A container image sets its own library path.
OFI_NCCL_LIBRARY_DIRS = ("/opt/amazon/ofi-nccl/lib/{arch}-linux-gnu", "/opt/amazon/ofi-nccl/lib",
                         "/opt/aws-ofi-nccl/lib")
NCCL_SOCKET_IFNAME = "^docker,lo,veth"
# A file name, not a path: the loader finds it on the library path, whichever layout the image has.
OFI_NCCL_TUNER_LIBRARY = "libnccl-ofi-tuner.so"
# The compiler flags of the AWS NeuronX Distributed training samples (transformer, LLM training).
NEURON_CC_FLAGS = "--model-type=transformer --distribution-strategy=llm-training"
# NCCL settings AWS's tuner may refuse (stack_versions.tuner_outcome): with them, the tuner is never named.
TUNER_CONFLICTS = ("NCCL_ALGO", "NCCL_PROTO")


@lean_dataclass(frozen=True)
class JobEnvironment:
    """Variables to export, and where a bare host may keep the EFA plugin (the first that exists goes
    in front of LD_LIBRARY_PATH)."""

    variables: dict[str, str] = field(default_factory=dict)
    library_dirs: tuple[str, ...] = ()
    summary: str = ""  # what the presets are for, for a comment in the rendered script


def instance_environment(instance: InstanceType | None, *, aws_ofi_nccl: str | None = None,
                         libfabric: str | None = None, nccl: str | None = None, efa_installer: str | None = None,
                         logical_nc_config: int | None = None) -> JobEnvironment:
    """Presets for one instance type; None (CPU nodes, the local cluster) gets none. `logical_nc_config`:
    Trainium2's logical NeuronCore size (None: the instance's default)."""
    if instance is None or instance.accelerator == "none":
        return JobEnvironment()
    family = instance.name.split(".")[0]
    if instance.accelerator == "neuron":
        return _neuron_environment(instance, logical_nc_config)
    variables = {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": NCCL_SOCKET_IFNAME}
    summary = f"NCCL on {instance.name}"
    library_dirs: tuple[str, ...] = ()
    if instance.efa:
        variables.update(_efa_variables(instance.device_rdma, aws_ofi_nccl, libfabric, nccl, efa_installer))
        library_dirs = OFI_NCCL_LIBRARY_DIRS
        summary += (f" over EFA (aws-ofi-nccl {aws_ofi_nccl or 'current'}, libfabric {libfabric or 'current'}, "
                    f"NCCL {nccl or 'current'}, EFA installer {efa_installer or 'current'})")
    if family == "g5":
        # No NVLink between A10Gs: intra-node traffic goes through host memory.
        variables["NCCL_SHM_USE_CUDA_MEMCPY"] = "1"
    return JobEnvironment(dict(sorted(variables.items())), library_dirs, summary)


def _efa_variables(device_rdma: bool, aws_ofi_nccl: str | None, libfabric: str | None, nccl: str | None,
                   efa_installer: str | None) -> dict[str, str]:
    variables = {"FI_PROVIDER": "efa", "FI_EFA_USE_HUGE_PAGE": "0"}
    ofi_nccl, fabric = version_tuple(aws_ofi_nccl), version_tuple(libfabric)
    nccl_version, installer = version_tuple(nccl), version_tuple(efa_installer)
    old_plugin = ofi_nccl is not None and ofi_nccl < (1, 7)
    old_libfabric = fabric is not None and fabric < (1, 18)
    if (old_plugin or old_libfabric) and device_rdma:
        variables["FI_EFA_USE_DEVICE_RDMA"] = "1"
    if ofi_nccl is not None and ofi_nccl < (1, 6):
        variables["NCCL_PROTO"] = "simple"
    new_nccl = nccl_version is None or nccl_version >= (2, 19)
    if installer is not None and installer < (1, 29, 1) and new_nccl:
        variables["FI_EFA_SET_CUDA_SYNC_MEMOPS"] = "0"
    if tuner_interface(aws_ofi_nccl, nccl) is not None and not nccl_finds_tuner(aws_ofi_nccl, nccl):
        variables["NCCL_TUNER_PLUGIN"] = OFI_NCCL_TUNER_LIBRARY
    return variables


def _neuron_environment(instance: InstanceType, logical_nc_config: int | None) -> JobEnvironment:
    # Many Neuron processes per node: cap glibc malloc arenas to keep host memory in check. Softmax
    # fusion and 3 requests in flight are the NeuronX Distributed training samples' settings.
    variables = {"MALLOC_ARENA_MAX": "64", "NEURON_FUSE_SOFTMAX": "1",
                 "NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS": "3"}
    if len(instance.logical_nc_configs) > 1:
        # Pinned, even at the default: the ranks per node are counted in these logical cores, and an image
        # or AMI with another default would expose a different number of them.
        variables["NEURON_LOGICAL_NC_CONFIG"] = str(logical_nc_config or instance.logical_nc_configs[0])
    if instance.efa:
        variables.update({"FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1"})
        if instance.device_rdma:
            variables["FI_EFA_USE_DEVICE_RDMA"] = "1"
    return JobEnvironment(dict(sorted(variables.items())), (), f"Neuron runtime on {instance.name}")


def neuron_compile_flags(cache_dir: str, user_flags: str | None = None) -> str:
    """NEURON_CC_FLAGS: the user's flags (else the training samples'), always with the shared compile
    cache, so that restarts and later runs reuse compiled graphs; a cache the user names wins."""
    flags = NEURON_CC_FLAGS if user_flags is None else user_flags
    words = flags.split()
    if any(word == "--cache_dir" or word.startswith("--cache_dir=") for word in words):
        return flags
    return f"{flags} --cache_dir={cache_dir}".strip()


def run_environment(spec: JobSpec) -> dict[str, str]:
    """The CLUSTERKIT_* variables the code inside the job reads (see clusterkit.runtime), for the
    fields the spec sets."""
    variables = {}
    if spec.instance is not None:
        variables[runtime.INSTANCE_TYPE_ENV] = spec.instance
    if spec.run_id is not None:
        variables[runtime.RUN_ID_ENV] = spec.run_id
    if spec.checkpoint_dir is not None:
        variables[runtime.CHECKPOINT_DIR_ENV] = spec.checkpoint_dir
    if spec.max_restarts is not None:
        variables[runtime.MAX_RESTARTS_ENV] = str(spec.max_restarts)
    if spec.checkpoint_every is not None:
        variables[runtime.CHECKPOINT_EVERY_ENV] = spec.checkpoint_every
    if spec.failures_per_gpu_hour is not None:
        variables[runtime.FAILURES_PER_GPU_HOUR_ENV] = repr(spec.failures_per_gpu_hour)
    return variables


def job_environment(spec: JobSpec) -> JobEnvironment:
    """Everything a job exports: instance presets, launcher settings, run identity, then the spec's env."""
    stack = spec.stack
    preset = instance_environment(spec.instance_facts, aws_ofi_nccl=stack.aws_ofi_nccl, libfabric=stack.libfabric,
                                  nccl=stack.nccl, efa_installer=stack.efa_installer,
                                  logical_nc_config=spec.launcher.logical_nc_config)
    variables = dict(preset.variables)
    if any(name in spec.env for name in TUNER_CONFLICTS):
        variables.pop("NCCL_TUNER_PLUGIN", None)  # the tuner would refuse to load (the rules warn)
    if spec.launcher.kind == "mpi" and spec.container.runtime != "none":
        # PMIx's shared-memory store is out of reach inside a container and its clients fail at init
        # (open-mpi/ompi#7516): the hash store works everywhere (as AWS's reference images set it).
        variables["PMIX_MCA_gds"] = "hash"
    if spec.launcher.kind == "neuron":
        # Stochastic rounding keeps BF16 training converging (AWS's Trainium fine-tuning samples set it).
        variables["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1"
    variables.update(run_environment(spec))
    variables.update(spec.env)
    if spec.launcher.kind == "neuron":
        variables["NEURON_CC_FLAGS"] = neuron_compile_flags(spec.launcher.compile_cache,
                                                            spec.env.get("NEURON_CC_FLAGS"))
    # A user's own LD_LIBRARY_PATH replaces the preset's addition to it.
    library_dirs = () if "LD_LIBRARY_PATH" in spec.env else preset.library_dirs
    return JobEnvironment(variables, library_dirs, preset.summary)

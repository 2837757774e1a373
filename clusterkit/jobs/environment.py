"""Environment presets per instance type: EFA/NCCL for GPU nodes, Neuron runtime settings for Trainium.

Kept minimal and gated by the library versions in the image, because most historical EFA settings
are defaults or harmful with current software:
- aws-ofi-nccl >= 1.7 with libfabric >= 1.18: FI_PROVIDER=efa and FI_EFA_USE_HUGE_PAGE=0 (huge pages
  make forked dataloader workers fail with ENOMEM);
- aws-ofi-nccl 1.6.x (or libfabric < 1.18): also FI_EFA_USE_DEVICE_RDMA=1 on RDMA-capable types;
- aws-ofi-nccl <= 1.5: also NCCL_PROTO=simple.
No RDMAV_* variable is ever set. The job spec's own `env` overrides every preset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from clusterkit import runtime
from clusterkit.catalog import InstanceType
from clusterkit.versions import version_tuple

if TYPE_CHECKING:
    from clusterkit.jobs.spec import JobSpec

# Where the EFA installer puts the aws-ofi-nccl plugin that NCCL loads.
OFI_NCCL_LIBRARY_DIR = "/opt/amazon/ofi-nccl/lib"
NCCL_SOCKET_IFNAME = "^docker,lo,veth"


@dataclass(frozen=True)
class JobEnvironment:
    """Variables to export, and directories to put in front of LD_LIBRARY_PATH on bare hosts."""

    variables: dict[str, str] = field(default_factory=dict)
    library_dirs: tuple[str, ...] = ()
    summary: str = ""  # what the presets are for, for a comment in the rendered script


def instance_environment(instance: InstanceType | None, *, aws_ofi_nccl: str | None = None,
                         libfabric: str | None = None) -> JobEnvironment:
    """Presets for one instance type; None (CPU nodes, the local cluster) gets none."""
    if instance is None or instance.accelerator == "none":
        return JobEnvironment()
    family = instance.name.split(".")[0]
    if instance.accelerator == "neuron":
        return _neuron_environment(instance)
    variables = {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": NCCL_SOCKET_IFNAME}
    summary = f"NCCL on {instance.name}"
    library_dirs: tuple[str, ...] = ()
    if instance.efa:
        variables.update(_efa_variables(instance.device_rdma, version_tuple(aws_ofi_nccl), version_tuple(libfabric)))
        library_dirs = (OFI_NCCL_LIBRARY_DIR,)
        summary += f" over EFA (aws-ofi-nccl {aws_ofi_nccl or 'current'}, libfabric {libfabric or 'current'})"
    if family == "g5":
        # No NVLink between A10Gs: intra-node traffic goes through host memory.
        variables["NCCL_SHM_USE_CUDA_MEMCPY"] = "1"
    return JobEnvironment(dict(sorted(variables.items())), library_dirs, summary)


def _efa_variables(device_rdma: bool, ofi_nccl: tuple[int, ...] | None,
                   libfabric: tuple[int, ...] | None) -> dict[str, str]:
    variables = {"FI_PROVIDER": "efa", "FI_EFA_USE_HUGE_PAGE": "0"}
    old_plugin = ofi_nccl is not None and ofi_nccl < (1, 7)
    old_libfabric = libfabric is not None and libfabric < (1, 18)
    if (old_plugin or old_libfabric) and device_rdma:
        variables["FI_EFA_USE_DEVICE_RDMA"] = "1"
    if ofi_nccl is not None and ofi_nccl < (1, 6):
        variables["NCCL_PROTO"] = "simple"
    return variables


def _neuron_environment(instance: InstanceType) -> JobEnvironment:
    # Many Neuron processes per node: cap glibc malloc arenas to keep host memory in check.
    variables = {"MALLOC_ARENA_MAX": "64"}
    if instance.efa:
        variables.update({"FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1"})
        if instance.device_rdma:
            variables["FI_EFA_USE_DEVICE_RDMA"] = "1"
    return JobEnvironment(dict(sorted(variables.items())), (), f"Neuron runtime on {instance.name}")


def neuron_compile_environment(cache_dir: str) -> dict[str, str]:
    """Point the Neuron compiler at a cache on shared storage, so restarts and later runs reuse graphs."""
    return {"NEURON_CC_FLAGS": f"--cache_dir={cache_dir}"}


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
    return variables


def job_environment(spec: JobSpec) -> JobEnvironment:
    """Everything a job exports: instance presets, launcher settings, run identity, then the spec's env."""
    preset = instance_environment(spec.instance_facts, aws_ofi_nccl=spec.stack.aws_ofi_nccl,
                                  libfabric=spec.stack.libfabric)
    variables = dict(preset.variables)
    if spec.launcher.kind == "neuron":
        variables.update(neuron_compile_environment(spec.launcher.compile_cache))
    variables.update(run_environment(spec))
    variables.update(spec.env)
    # A user's own LD_LIBRARY_PATH replaces the preset's addition to it.
    library_dirs = () if "LD_LIBRARY_PATH" in spec.env else preset.library_dirs
    return JobEnvironment(variables, library_dirs, preset.summary)

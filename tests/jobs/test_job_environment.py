"""EFA/NCCL/Neuron presets per instance type, gated by library versions; the spec's env wins."""

from __future__ import annotations

import pytest

from clusterkit.catalog import INSTANCE_TYPES, instance_type
from clusterkit.jobs.environment import OFI_NCCL_LIBRARY_DIR, instance_environment, job_environment

from tests.jobs.helpers import make_spec

CURRENT_EFA = {"FI_PROVIDER": "efa", "FI_EFA_USE_HUGE_PAGE": "0", "NCCL_DEBUG": "INFO",
               "NCCL_SOCKET_IFNAME": "^docker,lo,veth"}


@pytest.mark.parametrize("name", ["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5en.48xlarge"])
@pytest.mark.parametrize(("ofi_nccl", "libfabric"), [(None, None), ("1.7.0", "1.18.0"), ("1.13.2-aws", "1.22")])
def test_current_software_gets_the_minimal_set(name: str, ofi_nccl: str | None, libfabric: str | None) -> None:
    preset = instance_environment(instance_type(name), aws_ofi_nccl=ofi_nccl, libfabric=libfabric)
    assert preset.variables == CURRENT_EFA
    assert preset.library_dirs == (OFI_NCCL_LIBRARY_DIR,)


@pytest.mark.parametrize(("ofi_nccl", "libfabric", "added"), [
    ("1.6.0", None, {"FI_EFA_USE_DEVICE_RDMA": "1"}),
    ("1.6.3", "1.19", {"FI_EFA_USE_DEVICE_RDMA": "1"}),
    ("1.7.3", "1.17.1", {"FI_EFA_USE_DEVICE_RDMA": "1"}),
    ("1.5.0", None, {"FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_PROTO": "simple"}),
    ("1.4", "1.16", {"FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_PROTO": "simple"}),
])
def test_older_software_gets_more(ofi_nccl: str, libfabric: str | None, added: dict[str, str]) -> None:
    preset = instance_environment(instance_type("p4de.24xlarge"), aws_ofi_nccl=ofi_nccl, libfabric=libfabric)
    assert preset.variables == {**CURRENT_EFA, **added}


def test_g5_uses_cuda_memcpy_and_never_device_rdma() -> None:
    with_efa = instance_environment(instance_type("g5.48xlarge"), aws_ofi_nccl="1.5.0")
    assert with_efa.variables == {**CURRENT_EFA, "NCCL_PROTO": "simple", "NCCL_SHM_USE_CUDA_MEMCPY": "1"}
    without_efa = instance_environment(instance_type("g5.xlarge"))
    assert without_efa.variables == {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "^docker,lo,veth",
                                     "NCCL_SHM_USE_CUDA_MEMCPY": "1"}
    assert without_efa.library_dirs == ()


@pytest.mark.parametrize("name", ["trn1.32xlarge", "trn1n.32xlarge"])
def test_trainium_gets_neuron_settings_and_no_nccl(name: str) -> None:
    preset = instance_environment(instance_type(name))
    assert preset.variables == {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1",
                                "MALLOC_ARENA_MAX": "64"}
    assert preset.library_dirs == ()


@pytest.mark.parametrize("instance", [None, instance_type("c5.9xlarge"), instance_type("c5n.18xlarge")])
def test_cpu_nodes_get_nothing(instance) -> None:
    preset = instance_environment(instance)
    assert preset.variables == {} and preset.library_dirs == ()


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
@pytest.mark.parametrize("ofi_nccl", [None, "1.4.0", "1.6.0", "1.9.0"])
def test_never_rdmav(name: str, ofi_nccl: str | None) -> None:
    preset = instance_environment(instance_type(name), aws_ofi_nccl=ofi_nccl, libfabric="1.10")
    assert not [variable for variable in preset.variables if variable.startswith("RDMAV_")]


def test_spec_env_overrides_presets() -> None:
    environment = job_environment(make_spec(instance="p4de", env={"NCCL_DEBUG": "WARN", "MINE": "1"}))
    assert environment.variables["NCCL_DEBUG"] == "WARN"
    assert environment.variables["MINE"] == "1"
    assert environment.library_dirs == (OFI_NCCL_LIBRARY_DIR,)
    own_path = job_environment(make_spec(instance="p4de", env={"LD_LIBRARY_PATH": "/opt/mine/lib"}))
    assert own_path.library_dirs == ()


def test_neuron_launcher_points_the_compiler_at_the_cache() -> None:
    spec = make_spec(instance="trn1", launcher={"type": "neuron", "compile_cache": "/fsx/cache"})
    assert job_environment(spec).variables["NEURON_CC_FLAGS"] == "--cache_dir=/fsx/cache"
    assert "NEURON_CC_FLAGS" not in job_environment(make_spec(instance="trn1")).variables


def test_run_identity_variables() -> None:
    assert not [v for v in job_environment(make_spec()).variables if v.startswith("CLUSTERKIT_")]
    variables = job_environment(make_spec(run_id="r", checkpoint_dir="/fsx/c", max_restarts=2)).variables
    assert (variables["CLUSTERKIT_RUN_ID"], variables["CLUSTERKIT_CHECKPOINT_DIR"],
            variables["CLUSTERKIT_MAX_RESTARTS"]) == ("r", "/fsx/c", "2")


def test_versions_written_as_yaml_numbers_get_their_own_settings() -> None:
    from clusterkit.jobs.spec import load_job

    from tests.jobs.helpers import REPO_ROOT

    spec = load_job(REPO_ROOT / "tests/jobs/specs/p5-ofi-1.10.yaml")
    assert (spec.stack.aws_ofi_nccl, spec.stack.libfabric) == ("1.10", "1.20")
    variables = job_environment(spec).variables
    # Read as 1.1 and 1.2 they would count as legacy: device RDMA forced on and the simple protocol.
    assert "FI_EFA_USE_DEVICE_RDMA" not in variables and "NCCL_PROTO" not in variables

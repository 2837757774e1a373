"""EFA/NCCL/Neuron presets per instance type, gated by library versions; the spec's env wins."""

from __future__ import annotations

import pytest

from clusterkit.catalog import INSTANCE_TYPES, instance_type
from clusterkit.jobs.environment import (NEURON_CC_FLAGS, OFI_NCCL_LIBRARY_DIRS, OFI_NCCL_TUNER_LIBRARY,
                                         instance_environment, job_environment, neuron_compile_flags)

from tests.jobs.helpers import make_spec

CURRENT_EFA = {"FI_PROVIDER": "efa", "FI_EFA_USE_HUGE_PAGE": "0", "NCCL_DEBUG": "INFO",
               "NCCL_SOCKET_IFNAME": "^docker,lo,veth"}


@pytest.mark.parametrize("name", ["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5en.48xlarge"])
@pytest.mark.parametrize(("ofi_nccl", "libfabric"), [(None, None), ("1.7.0", "1.18.0"), ("1.17.2", "1.22")])
def test_current_software_gets_the_minimal_set(name: str, ofi_nccl: str | None, libfabric: str | None) -> None:
    preset = instance_environment(instance_type(name), aws_ofi_nccl=ofi_nccl, libfabric=libfabric)
    assert preset.variables == CURRENT_EFA
    assert preset.library_dirs == OFI_NCCL_LIBRARY_DIRS


@pytest.mark.parametrize(("ofi_nccl", "libfabric", "added"), [
    ("1.6.0", None, {"FI_EFA_USE_DEVICE_RDMA": "1"}),
    ("1.13.2-aws", "1.22", {"NCCL_TUNER_PLUGIN": "libnccl-ofi-tuner.so"}),
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
                                "MALLOC_ARENA_MAX": "64", "NEURON_FUSE_SOFTMAX": "1",
                                "NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS": "3"}
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
    assert environment.library_dirs == OFI_NCCL_LIBRARY_DIRS
    own_path = job_environment(make_spec(instance="p4de", env={"LD_LIBRARY_PATH": "/opt/mine/lib"}))
    assert own_path.library_dirs == ()


def test_neuron_launcher_points_the_compiler_at_the_cache() -> None:
    spec = make_spec(instance="trn1", launcher={"type": "neuron", "compile_cache": "/fsx/cache"})
    assert job_environment(spec).variables["NEURON_CC_FLAGS"] == f"{NEURON_CC_FLAGS} --cache_dir=/fsx/cache"
    assert "NEURON_CC_FLAGS" not in job_environment(make_spec(instance="trn1")).variables


@pytest.mark.parametrize(("user_flags", "expected"), [
    ("--model-type=cnn-training", "--model-type=cnn-training --cache_dir=/fsx/cache"),  # the cache stays
    ("-O1 --cache_dir=/mine", "-O1 --cache_dir=/mine"),  # the user's own cache wins
    ("--cache_dir /mine", "--cache_dir /mine"),
    ("", "--cache_dir=/fsx/cache"),
])
def test_a_users_neuron_cc_flags_keep_the_shared_cache(user_flags: str, expected: str) -> None:
    assert neuron_compile_flags("/fsx/cache", user_flags) == expected
    spec = make_spec(instance="trn1", launcher={"type": "neuron", "compile_cache": "/fsx/cache"},
                     env={"NEURON_CC_FLAGS": user_flags})
    assert job_environment(spec).variables["NEURON_CC_FLAGS"] == expected


@pytest.mark.parametrize(("ofi_nccl", "nccl", "tuner"), [
    ("1.7.4", None, False),      # no tuner in the plugin yet
    ("1.8.0", "2.20.5", True),   # its own library: NCCL 2.19-2.20 load it only when named
    ("1.8.0", None, False),      # its only interface (v1) is one NCCL >= 2.21 never asks for
    ("1.13.2", "2.21.5", True),
    ("1.15.0", "2.27.7", True),
    ("1.13.2", "2.18.5", False),  # no tuner interface in NCCL
    ("1.16.3", "2.20.5", True),   # in the net plugin, but NCCL 2.19-2.20 still need the name
    ("1.16.3", "2.21.5", False),  # NCCL >= 2.21 finds it in the net plugin
    (None, None, False),          # current versions
    ("1.19.0", "2.19.3", True),
    (None, "2.19.3", False),      # a current plugin (1.20+) has no v1 interface for NCCL 2.19 to load
])
def test_the_aws_tuner_is_named_where_nccl_would_not_load_it(ofi_nccl, nccl, tuner) -> None:
    preset = instance_environment(instance_type("p5.48xlarge"), aws_ofi_nccl=ofi_nccl, nccl=nccl)
    assert (preset.variables.get("NCCL_TUNER_PLUGIN") == OFI_NCCL_TUNER_LIBRARY) is tuner


def test_a_users_nccl_proto_keeps_the_tuner_off() -> None:
    spec = make_spec(instance="p5", stack={"aws_ofi_nccl": "1.13.2"}, env={"NCCL_PROTO": "simple"})
    assert "NCCL_TUNER_PLUGIN" not in job_environment(spec).variables


@pytest.mark.parametrize(("installer", "nccl", "expected"), [
    ("1.28.0", "2.19.3", True), ("1.29.0", None, True), ("1.29.1", "2.19.3", False),
    ("1.28.0", "2.18.5", False), (None, "2.19.3", False),
])
def test_cuda_sync_memops_off_with_an_old_installer_and_new_nccl(installer, nccl, expected) -> None:
    preset = instance_environment(instance_type("p4de.24xlarge"), efa_installer=installer, nccl=nccl)
    assert (preset.variables.get("FI_EFA_SET_CUDA_SYNC_MEMOPS") == "0") is expected


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


@pytest.mark.parametrize(("launcher", "runtime", "expected"), [
    ("mpi", "pyxis", "hash"), ("mpi", "docker", "hash"), ("mpi", "apptainer", "hash"), ("mpi", "none", None),
    ("torchrun", "pyxis", None), ("srun", "docker", None),
])
def test_pmix_steps_in_containers_use_the_hash_store(launcher: str, runtime: str, expected: str | None) -> None:
    container = {"runtime": runtime, "image": "img:1"} if runtime != "none" else {}
    spec = make_spec(instance="p5", launcher=launcher, command=["./all_reduce_perf"], container=container)
    assert job_environment(spec).variables.get("PMIX_MCA_gds") == expected
    own = make_spec(instance="p5", launcher=launcher, command=["./x"], container=container,
                    env={"PMIX_MCA_gds": "^ds12"})
    assert job_environment(own).variables["PMIX_MCA_gds"] == "^ds12"  # the spec's env wins


@pytest.mark.parametrize(("instance", "launcher", "expected"), [
    ("trn1", "neuron", "1"), ("trn2", "neuron", "1"), ("trn1", "srun", None), ("p5", "torchrun", None),
])
def test_neuron_training_rounds_stochastically(instance: str, launcher: str, expected: str | None) -> None:
    spec = make_spec(instance=instance, launcher=launcher)
    assert job_environment(spec).variables.get("NEURON_RT_STOCHASTIC_ROUNDING_EN") == expected

"""Doctor checks against fake nodes built from recorded outputs of the real tools."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from clusterkit.cli import common_options
from clusterkit.cli import stack as stack_cli
from clusterkit.errors import ClusterkitError
from clusterkit.stack.doctor import (NO_ACCELERATOR, CheckResult, Status, examine_node, failed, parse_fi_info,
                                     parse_fi_info_providers, parse_neuron_ls, parse_nvidia_smi, run_checks)
from clusterkit.stack.probe import RecordedProbe

from tests.stack.nodes import NODE_LIMITS, build_root, fixture_text


def by_name(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {result.name: result for result in results}


def statuses(results: list[CheckResult]) -> dict[str, str]:
    return {result.name: result.status.value for result in results}


def doctor_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="clusterkit")
    stack_cli.register(parser.add_subparsers(dest="command"), common_options())
    args = parser.parse_args(["doctor", *argv])
    code = args.handler(args)
    return code, capsys.readouterr().out


# --- parsers on real outputs -------------------------------------------------------------------

def test_nvidia_smi_table_from_p4d() -> None:
    smi = parse_nvidia_smi(fixture_text("nvidia-smi_p4d.txt"))
    assert smi is not None
    assert (smi.driver_version, smi.cuda_version, smi.gpu_count) == ("550.90.07", "12.4", 8)


def test_nvidia_smi_query_format_with_old_driver() -> None:
    smi = parse_nvidia_smi(fixture_text("nvidia-smi-q_a100_old-driver.txt"))
    assert smi is not None
    assert (smi.driver_version, smi.cuda_version, smi.gpu_count) == ("470.103.01", "11.4", 1)


def test_nvidia_smi_error_text_is_no_driver() -> None:
    assert parse_nvidia_smi("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.") is None


def test_fi_info_entries_from_p4d() -> None:
    entries = parse_fi_info(fixture_text("fi_info-efa_p4d.txt"))
    assert [e["domain"] for e in entries] == ["rdmap16s27-rdm", "rdmap32s27-rdm", "rdmap144s27-rdm", "rdmap160s27-rdm"]
    assert {e["provider"] for e in entries} == {"efa"}


def test_fi_info_provider_list_without_efa() -> None:
    providers = parse_fi_info_providers(fixture_text("fi_info-l_no-efa.txt"))
    assert "tcp" in providers and "sockets" in providers and "efa" not in providers
    assert "version" not in " ".join(providers)


def test_neuron_ls_from_trn1() -> None:
    assert parse_neuron_ls(fixture_text("neuron-ls_trn1.txt")) == ("trn1.32xlarge", 16)


# --- a healthy p4d, then one fault at a time -------------------------------------------------

def test_healthy_p4d_passes_every_check(p4d_node) -> None:
    results = run_checks(p4d_node(), expect_instance_type="p4d.24xlarge")
    assert statuses(results) == {
        "nvidia driver": "pass", "fabric manager": "pass", "container toolkit": "pass", "efa devices": "pass",
        "libfabric efa provider": "pass", "nccl": "pass", "aws-ofi-nccl plugin": "pass", "cuda vs driver": "pass",
        "cudnn": "pass", "framework devices": "pass", "memlock": "pass"}
    checks = by_name(results)
    assert "driver 550.90.07" in checks["nvidia driver"].detail and "8 GPU(s)" in checks["nvidia driver"].detail
    assert "4 domain(s)" in checks["libfabric efa provider"].detail
    assert "2.29.3" in checks["nccl"].detail
    assert not failed(results)


def test_fewer_efa_devices_than_the_instance_has_fails(p4d_node) -> None:
    check = by_name(run_checks(p4d_node(efa=2), expect_instance_type="p4d"))["efa devices"]
    assert check.status is Status.FAIL
    assert "2 of 4" in check.detail
    assert "uverbs" in check.fix


def test_p4d_outputs_checked_against_p5_expectations(p4d_node) -> None:
    checks = by_name(run_checks(p4d_node(), expect_instance_type="p5"))
    assert checks["efa devices"].status is Status.FAIL and "4 of 32" in checks["efa devices"].detail


def test_missing_ofi_nccl_plugin_fails_with_the_installer_fix(p4d_node) -> None:
    probe = p4d_node(drop_files=("/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so",
                                 "/opt/amazon/ofi-nccl/lib/libnccl-net.so"))
    check = by_name(run_checks(probe, expect_instance_type="p4d.24xlarge"))["aws-ofi-nccl plugin"]
    assert check.status is Status.FAIL
    assert "TCP sockets" in check.detail
    assert "/opt/amazon/ofi-nccl/lib" in check.fix


def test_plugin_that_does_not_load_fails(p4d_node) -> None:
    probe = p4d_node(unloadable={"/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so":
                                 "libfabric.so.1: cannot open shared object file"})
    check = by_name(run_checks(probe, expect_instance_type="p4d.24xlarge"))["aws-ofi-nccl plugin"]
    assert check.status is Status.FAIL and "libfabric.so.1" in check.detail


def test_plugin_off_the_library_path_warns(p4d_node) -> None:
    check = by_name(run_checks(p4d_node(environ={}), expect_instance_type="p4d.24xlarge"))["aws-ofi-nccl plugin"]
    assert check.status is Status.WARN
    assert "LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib" in check.fix


def test_driver_too_old_for_the_image_cuda_fails(p4d_node) -> None:
    probe = p4d_node(files={"/usr/local/cuda/version.json": '{"cuda": {"version": "13.0.0"}}'})
    check = by_name(run_checks(probe, expect_instance_type="p4d.24xlarge"))["cuda vs driver"]
    assert check.status is Status.FAIL
    assert "13.0.0" in check.detail and "12.4" in check.detail


def test_newer_cuda_minor_than_the_driver_warns(p4d_node) -> None:
    probe = p4d_node(files={"/usr/local/cuda/version.json": '{"cuda": {"version": "12.8.1"}}'})
    assert by_name(run_checks(probe, expect_instance_type="p4d"))["cuda vs driver"].status is Status.WARN


def test_fi_info_with_only_socket_providers_fails(p4d_node) -> None:
    probe = p4d_node(commands={"fi_info -p efa -t FI_EP_RDM": fixture_text("fi_info-efa_no-provider.txt"),
                               "fi_info -l": fixture_text("fi_info-l_no-efa.txt")})
    check = by_name(run_checks(probe, expect_instance_type="p4d.24xlarge"))["libfabric efa provider"]
    assert check.status is Status.FAIL
    assert "tcp" in check.detail and "sockets" in check.detail and "efa," not in check.detail
    assert "/opt/amazon/efa/lib" in check.fix


def test_fewer_gpus_than_the_instance_has_fails(p4d_node) -> None:
    smi = fixture_text("nvidia-smi_p4d.txt")
    # Drop GPU 7's three table lines, as nvidia-smi does for a GPU that fell off the bus.
    lines = smi.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|   7 "))
    degraded = "\n".join(lines[:start] + lines[start + 4:])
    results = run_checks(p4d_node(commands={"nvidia-smi": degraded}), expect_instance_type="p4d")
    check = by_name(results)["nvidia driver"]
    assert check.status is Status.FAIL and "7 GPU(s)" in check.detail


def test_driver_library_mismatch_is_reported(p4d_node) -> None:
    probe = p4d_node(commands={"nvidia-smi": "Failed to initialize NVML: Driver/library version mismatch\n"})
    check = by_name(run_checks(probe, expect_instance_type="p4d"))["nvidia driver"]
    assert check.status is Status.FAIL and "Driver/library version mismatch" in check.detail


def test_torch_without_cuda_fails(p4d_node) -> None:
    check = by_name(run_checks(p4d_node(commands={"torch-devices": "2.6.0+cpu False 0\n"}),
                               expect_instance_type="p4d"))["framework devices"]
    assert check.status is Status.FAIL and "+cpu" in check.detail


def test_missing_nvidia_smi_fails_the_driver_and_skips_what_needs_it(p4d_node) -> None:
    checks = by_name(run_checks(p4d_node(commands={"nvidia-smi": None}), expect_instance_type="p4d"))
    assert checks["nvidia driver"].status is Status.FAIL
    assert checks["cuda vs driver"].status is Status.SKIP


def test_inside_a_container_host_only_checks_skip(p4d_node) -> None:
    checks = by_name(run_checks(p4d_node(files={"/.dockerenv": ""}), expect_instance_type="p4d"))
    assert checks["fabric manager"].status is Status.SKIP
    assert checks["container toolkit"].status is Status.SKIP


def test_instance_type_from_dmi(p4d_node) -> None:
    probe = p4d_node(files={"/sys/devices/virtual/dmi/id/product_name": "p4d.24xlarge\n"})
    node = examine_node(probe)
    assert node.instance is not None and node.instance.name == "p4d.24xlarge"
    assert node.accelerator == "gpu"


def test_unknown_expected_instance_type_is_an_error(p4d_node) -> None:
    with pytest.raises(ClusterkitError, match="--expect-instance-type"):
        examine_node(p4d_node(), expect_instance_type="p9.huge")


# --- Neuron -------------------------------------------------------------------------------

def trn1_root(path: Path, devices: int = 16) -> Path:
    return build_root(
        path, devices=[f"/dev/neuron{i}" for i in range(devices)] + [f"/dev/infiniband/uverbs{i}" for i in range(8)],
        files={"/opt/aws/neuron/lib/libnrt.so.1": "", "/opt/aws/neuron/lib/libnccom.so.2": "", **NODE_LIMITS},
        # Only the provider's presence matters to the check; this is the p4d listing.
        commands={"neuron-ls": fixture_text("neuron-ls_trn1.txt"),
                  "fi_info -p efa -t FI_EP_RDM": fixture_text("fi_info-efa_p4d.txt")})


def test_healthy_trn1_passes(tmp_path: Path) -> None:
    results = run_checks(RecordedProbe(trn1_root(tmp_path)), expect_instance_type="trn1")
    assert statuses(results) == {"neuron driver": "pass", "efa devices": "pass", "libfabric efa provider": "pass",
                                 "neuron tools": "pass", "neuron runtime": "pass", "neuron collectives": "pass",
                                 "memlock": "pass"}
    assert "16 device(s) on trn1.32xlarge" in by_name(results)["neuron tools"].detail


def test_trn1_missing_neuron_devices_fails(tmp_path: Path) -> None:
    check = by_name(run_checks(RecordedProbe(trn1_root(tmp_path, devices=12)), expect_instance_type="trn1"))
    assert check["neuron driver"].status is Status.FAIL and "12 of 16" in check["neuron driver"].detail


# --- no accelerator, and the CLI --------------------------------------------------------------

def test_no_accelerator_says_so_and_skips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build_root(tmp_path)
    results = run_checks(RecordedProbe(tmp_path))
    assert {r.status for r in results} == {Status.SKIP}
    code, out = doctor_cli(capsys, "--root", str(tmp_path))
    assert code == 0
    assert out.splitlines()[0] == NO_ACCELERATOR
    assert "Traceback" not in out


def test_cli_exits_non_zero_on_failure_and_prints_fixes(p4d_node, capsys: pytest.CaptureFixture[str]) -> None:
    probe = p4d_node(efa=1)
    code, out = doctor_cli(capsys, "--root", str(probe.root), "--expect-instance-type", "p4d.24xlarge")
    assert code == 1
    assert "FAIL" in out and "1 of 4 EFA devices" in out and "clusterkit container run-flags" in out


def test_cli_json(p4d_node, capsys: pytest.CaptureFixture[str]) -> None:
    probe = p4d_node()
    (probe.root / ".environ").write_text("LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:/opt/nccl/build/lib\n")
    code, out = doctor_cli(capsys, "--root", str(probe.root), "--expect-instance-type", "p4d", "--output", "json")
    report = json.loads(out)
    assert code == 0
    assert report["accelerator"] == "gpu" and report["instance_type"] == "p4d.24xlarge"
    assert {c["status"] for c in report["checks"] if c["name"] != "slurm"} == {"pass"}
    assert report["checks"][-1] == {"name": "slurm", "layer": "ami", "status": "skip",  # no Slurm recorded there
                                    "detail": "no Slurm client commands on this node", "fix": ""}


@pytest.mark.parametrize(("limit", "status"), [("unlimited", "pass"), (str(16 << 30), "pass"), ("65536", "warn")])
def test_a_low_locked_memory_limit_is_a_warning(p4d_node, limit: str, status: str) -> None:
    """EFA registers its buffers: below 16 GiB of locked memory that fails. Every node shares the limit, so it
    warns rather than failing (and draining) them all."""
    limits = NODE_LIMITS["/proc/self/limits"].replace("unlimited            unlimited", f"{limit} {limit}")
    results = run_checks(p4d_node(files={"/proc/self/limits": limits}), expect_instance_type="p4d.24xlarge")
    (memlock,) = [r for r in results if r.name == "memlock"]
    assert memlock.status.value == status
    if status == "warn":
        assert "65536 bytes" in memlock.detail and "memlock" in memlock.fix


# --- the Slurm the node talks to (the doctor's own check, not the node health check's) ---------------------------

def _slurm_node(tmp_path, sinfo: str | None, config: str | None) -> RecordedProbe:
    commands = tmp_path / ".commands"
    commands.mkdir()
    if sinfo is not None:
        (commands / "sinfo__--version").write_text(sinfo)
    if config is not None:
        (commands / "scontrol__show__config").write_text(config)
    return RecordedProbe(tmp_path)


@pytest.mark.parametrize(("sinfo", "config", "status", "detail"), [
    ("slurm-wlm 24.11.5\n", "SLURM_CONF = /c/slurm.conf\nSLURM_VERSION           = 24.11.5\n", Status.PASS,
     "Slurm 24.11.5 (controller), clients 24.11.5"),
    ("slurm 22.05.8\n", "SLURM_VERSION = 24.11.5\n", Status.WARN, "controller 24.11.5, clients 22.05.8"),
    ("slurm 22.05.8\n", "slurm_load_ctl_conf error: Unable to contact slurm controller (connect failure)\n",
     Status.WARN, "clients 22.05.8; no controller answered: slurm_load_ctl_conf error: Unable to contact"),
    (None, None, Status.SKIP, "no Slurm client commands on this node"),
])
def test_the_doctor_reports_the_slurm_of_the_controller_it_talks_to(tmp_path, sinfo, config, status, detail) -> None:
    from clusterkit.stack.doctor import check_slurm

    check = check_slurm(_slurm_node(tmp_path, sinfo, config))
    assert check.status is status and check.detail.startswith(detail), check
    assert check.status is not Status.FAIL  # never a reason to drain a node

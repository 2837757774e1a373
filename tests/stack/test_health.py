"""Health checks: injected faults and doctor's host-layer checks on recorded nodes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from clusterkit import runtime
from clusterkit.stack.health import run_health_checks
from clusterkit.stack.probe import RecordedProbe
from tests.stack.nodes import NODE_LIMITS, P4D_ENVIRON, P4D_LIBRARIES, build_root, p4d_commands, p4d_devices


def p4d(tmp_path: Path, efa: int = 4) -> RecordedProbe:
    root = build_root(tmp_path / "node", devices=p4d_devices(8, efa), files={**P4D_LIBRARIES, **NODE_LIMITS},
                      commands=p4d_commands())
    return RecordedProbe(root, environ=P4D_ENVIRON)


def test_a_healthy_p4d_host_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("CLUSTERKIT_INSTANCE_TYPE", "p4d.24xlarge")
    results = run_health_checks("n1", probe=p4d(tmp_path))
    assert all(r.ok for r in results), results
    assert {"nvidia driver", "efa devices"} <= {r.check for r in results}


def test_missing_efa_devices_make_the_host_unhealthy(tmp_path, monkeypatch):
    monkeypatch.setenv("CLUSTERKIT_INSTANCE_TYPE", "p4d.24xlarge")
    failing = [r for r in run_health_checks("n1", probe=p4d(tmp_path, efa=2)) if not r.ok]
    assert [r.check for r in failing] == ["efa devices"]
    assert failing[0].evidence.startswith("2 of 4 EFA devices on p4d.24xlarge")


def test_an_injected_fault_fails_the_node_and_says_why(tmp_path, monkeypatch):
    (tmp_path / "faults").mkdir()
    (tmp_path / "faults" / "n2").write_text("GPU 3 fell off the bus\n")
    env = {"CLUSTERKIT_FAULTS_DIR": str(tmp_path / "faults"), "SLURMD_NODENAME": "n2", "PATH": "/usr/bin:/bin"}
    # The documented entry point (Slurm's HealthCheckProgram, a prolog), spelled as a user writes it.
    result = subprocess.run([sys.executable, "-m", "clusterkit.stack.health"], capture_output=True, text=True,
                            env=env)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["node"] == "n2" and not report["healthy"]
    assert {"check": "injected-fault", "ok": False, "evidence": "GPU 3 fell off the bus"} in report["results"]


def test_the_supervisor_runs_the_health_check_by_the_contracts_module_name():
    # The supervisor runs runtime.HEALTH_MODULE on each node through srun instead of importing the stack.
    assert runtime.HEALTH_MODULE == "clusterkit.stack.health"
    assert importlib.util.find_spec(runtime.HEALTH_MODULE) is not None


def health_on(node: str, faults: Path) -> dict:
    env = {"CLUSTERKIT_FAULTS_DIR": str(faults), "SLURMD_NODENAME": node, "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-m", "clusterkit.stack.health"], capture_output=True, text=True, env=env)
    report = json.loads(result.stdout)
    assert result.returncode == (0 if report["healthy"] else 1)
    return next(r for r in report["results"] if r["check"] == "gpu-errors")


def test_an_xid_that_condemns_the_gpu_fails_the_node_with_the_xid_as_evidence(tmp_path):
    # The driver's own line, as dmesg prints it on a p4d whose GPU fell off the bus.
    (tmp_path / "n2.kmsg").write_text(
        "[ 1234.567890] nvidia-nvlink: Nvlink Core is being initialized\n"
        "[ 8811.002211] NVRM: Xid (PCI:0000:10:1c): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n")
    assert health_on("n2", tmp_path) == {"check": "gpu-errors", "ok": False,
                                         "evidence": "Xid 79 on PCI:0000:10:1c (GPU has fallen off the bus)"}
    assert health_on("n1", tmp_path)["ok"]  # another node's log is not this node's


def test_an_application_xid_is_no_node_fault(tmp_path):
    (tmp_path / "n2.kmsg").write_text("[ 10.0] NVRM: Xid (PCI:0000:10:1c): 13, pid=4242, name=python, Graphics "
                                      "SM Warp Exception on (GPC 0, TPC 1, SM 0)\n"
                                      "[ 11.0] NVRM: Xid (PCI:0000:10:1c): 31, pid=4242, name=python, Ch 00000008\n")
    assert health_on("n2", tmp_path) == {"check": "gpu-errors", "ok": True, "evidence": "none"}


def test_uncorrected_ecc_errors_fail_the_node(tmp_path):
    # nvidia-smi --query-gpu=pci.bus_id,ecc.errors.uncorrected.volatile.total --format=csv,noheader
    (tmp_path / "n3.ecc").write_text("00000000:10:1C.0, 0\n00000000:10:1D.0, 2\n00000000:20:1C.0, [N/A]\n")
    assert health_on("n3", tmp_path) == {"check": "gpu-errors", "ok": False,
                                         "evidence": "2 uncorrected ECC errors on 00000000:10:1D.0"}


def _p5en_arriving(tmp_path: Path, present: int, arrive_after: int | None) -> tuple[RecordedProbe, list[float], object]:
    """A p5en whose EFA devices (16) show up after `arrive_after` waits (None: never), as p5en's can at boot."""
    root = build_root(tmp_path / "node", devices=[f"/dev/infiniband/uverbs{i}" for i in range(present)],
                      files={**P4D_LIBRARIES, **NODE_LIMITS}, commands=p4d_commands())
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if arrive_after is not None and len(waits) == arrive_after:
            for i in range(16):
                (root / f"dev/infiniband/uverbs{i}").touch()
    return RecordedProbe(root, environ=P4D_ENVIRON), waits, sleep


def _efa(results: list) -> object:
    return next(r for r in results if r.check == "efa devices")


def test_p5ens_late_efa_devices_are_counted_again_before_the_node_fails(tmp_path, monkeypatch):
    """AWS's GPU health check counts p5en's EFA devices again 3 times, 5 s apart: a node checked at boot whose
    devices are still coming is not drained; one whose devices never come is, after 15 s."""
    monkeypatch.setenv("CLUSTERKIT_INSTANCE_TYPE", "p5en.48xlarge")
    probe, waits, sleep = _p5en_arriving(tmp_path / "late", 12, arrive_after=2)
    assert _efa(run_health_checks("n1", probe=probe, sleep=sleep)).ok and waits == [5.0, 5.0]
    probe, waits, sleep = _p5en_arriving(tmp_path / "never", 12, arrive_after=None)
    efa = _efa(run_health_checks("n1", probe=probe, sleep=sleep))
    assert not efa.ok and efa.evidence.startswith("12 of 16 EFA devices") and waits == [5.0, 5.0, 5.0]


def test_other_types_fail_at_once_on_missing_efa_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("CLUSTERKIT_INSTANCE_TYPE", "p4d.24xlarge")
    waits: list[float] = []
    assert not _efa(run_health_checks("n1", probe=p4d(tmp_path, efa=2), sleep=waits.append)).ok and waits == []


def test_a_real_nodes_kernel_log_and_nvidia_smi_are_read_for_device_errors(tmp_path, monkeypatch):
    from clusterkit.stack.health import ECC_QUERY, check_device_errors

    monkeypatch.delenv("CLUSTERKIT_FAULTS_DIR", raising=False)
    commands = tmp_path / "node" / ".commands"
    commands.mkdir(parents=True)
    (commands / "dmesg").write_text("[ 8811.0] NVRM: Xid (PCI:0000:53:00): 48, pid=1, name=python, An uncorrectable "
                                    "double bit error (DBE) has been detected on GPU\n")
    (commands / "__".join(ECC_QUERY)).write_text("00000000:53:00.0, 3\n00000000:64:00.0, 0\n")
    result = check_device_errors("n1", RecordedProbe(tmp_path / "node", environ={}))
    assert not result.ok and result.evidence == ("Xid 48 on PCI:0000:53:00 (double-bit ECC error); "
                                                 "3 uncorrected ECC errors on 00000000:53:00.0")
    # dmesg refused to an ordinary user, the journal's copy read instead; then neither: said, not held against it.
    (commands / "dmesg").write_text("dmesg: read kernel buffer failed: Operation not permitted\n")
    (commands / "__".join(ECC_QUERY)).write_text("00000000:53:00.0, 0\n")
    (commands / "journalctl__-k__-b__-q__--no-pager").write_text("Dec 04 NVRM: Xid (PCI:0000:53:00): 79, pid=0\n")
    assert check_device_errors("n1", RecordedProbe(tmp_path / "node", environ={})).evidence.startswith("Xid 79")
    (commands / "journalctl__-k__-b__-q__--no-pager").unlink()
    quiet = check_device_errors("n1", RecordedProbe(tmp_path / "node", environ={}))
    assert quiet.ok and "not readable" in quiet.evidence

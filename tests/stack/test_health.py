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
from tests.stack.nodes import P4D_ENVIRON, P4D_LIBRARIES, build_root, p4d_commands, p4d_devices


def p4d(tmp_path: Path, efa: int = 4) -> RecordedProbe:
    root = build_root(tmp_path / "node", devices=p4d_devices(8, efa), files=P4D_LIBRARIES, commands=p4d_commands())
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

"""Node health checks: run on every node before a step starts and after a failure.

Pluggable per accelerator: each check is a small function over the node it runs on, returning a
`HealthResult`. `python -m clusterkit.resilience.health` runs the checks that apply on this node and
prints one JSON line; with `--drain` a failing node drains itself (for Slurm's HealthCheckProgram
or a prolog). On a local cluster a check can be failed on purpose: `clusterkit local fail-health`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from clusterkit.catalog import find_instance_type

FAULTS_DIR_ENV = "CLUSTERKIT_FAULTS_DIR"  # set for jobs of local clusters
INSTANCE_TYPE_ENV = "CLUSTERKIT_INSTANCE_TYPE"
COMMAND_TIMEOUT = 20


@dataclass(frozen=True)
class HealthResult:
    check: str
    ok: bool
    evidence: str


Check = Callable[[str], HealthResult]


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def _run(argv: list[str]) -> str | None:
    """A command's stdout, or None when it is missing, fails or hangs."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired:
        return None
    return result.stdout if result.returncode == 0 else None


def check_injected_fault(node: str) -> HealthResult:
    """A fault put in place by `clusterkit local fail-health`: a file named after the node."""
    directory = os.environ.get(FAULTS_DIR_ENV)
    fault = Path(directory) / node if directory else None
    if fault is not None and fault.exists():
        return HealthResult("injected-fault", False, fault.read_text().strip() or "fault injected")
    return HealthResult("injected-fault", True, "none")


def _expected(attribute: str) -> int | None:
    facts = find_instance_type(os.environ.get(INSTANCE_TYPE_ENV, ""))
    return getattr(facts, attribute) if facts else None


def check_gpus(node: str) -> HealthResult:
    output = _run(["nvidia-smi", "--query-gpu=index,ecc.errors.uncorrected.volatile.total", "--format=csv,noheader"])
    if output is None:
        return HealthResult("gpu", False, "nvidia-smi failed or did not answer")
    rows = [line.split(",") for line in output.strip().splitlines() if line.strip()]
    expected = _expected("accelerator_count")
    if expected and len(rows) < expected:
        return HealthResult("gpu", False, f"{len(rows)} GPUs visible, {expected} expected")
    bad = [row[0].strip() for row in rows if len(row) > 1 and row[1].strip().isdigit() and int(row[1]) > 0]
    if bad:
        return HealthResult("gpu", False, f"uncorrectable ECC errors on GPU {', '.join(bad)}")
    return HealthResult("gpu", True, f"{len(rows)} GPUs")


def check_efa(node: str) -> HealthResult:
    expected = _expected("efa_interfaces")
    output = _run(["fi_info", "-p", "efa", "-t", "FI_EP_RDM"])
    if output is None:
        return HealthResult("efa", False, "fi_info -p efa found no EFA provider")
    devices = set(re.findall(r"domain:\s*(\S+)", output))
    if expected and len(devices) < expected:
        return HealthResult("efa", False, f"{len(devices)} EFA devices, {expected} expected")
    return HealthResult("efa", True, f"{len(devices)} EFA devices")


def check_neuron(node: str) -> HealthResult:
    output = _run(["neuron-ls", "--json-output"])
    if output is None:
        return HealthResult("neuron", False, "neuron-ls failed or did not answer")
    try:
        devices = len(json.loads(output))
    except ValueError:
        return HealthResult("neuron", False, "neuron-ls printed no JSON")
    expected = _expected("accelerator_count")
    if expected and devices < expected:
        return HealthResult("neuron", False, f"{devices} Neuron devices, {expected} expected")
    return HealthResult("neuron", True, f"{devices} Neuron devices")


def checks_for_this_node() -> list[Check]:
    """The checks that apply here: accelerators and EFA as the node has them."""
    checks: list[Check] = [check_injected_fault]
    if Path("/dev/nvidia0").exists():
        checks.append(check_gpus)
    if any(Path("/dev").glob("neuron[0-9]*")):
        checks.append(check_neuron)
    if (_expected("efa_interfaces") or 0) > 0 or Path("/sys/class/infiniband").is_dir():
        checks.append(check_efa)
    return checks


def run_health_checks(node: str | None = None, checks: list[Check] | None = None) -> list[HealthResult]:
    node = node or node_name()
    return [check(node) for check in (checks or checks_for_this_node())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clusterkit.resilience.health",
                                     description="Check this node; exit 1 if a check fails.")
    parser.add_argument("--drain", action="store_true", help="drain this node in Slurm when a check fails")
    args = parser.parse_args(argv)
    node = node_name()
    results = run_health_checks(node)
    healthy = all(r.ok for r in results)
    print(json.dumps({"node": node, "healthy": healthy, "results": [asdict(r) for r in results]}), flush=True)
    if not healthy and args.drain:
        reason = "; ".join(f"{r.check}: {r.evidence}" for r in results if not r.ok)
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN",
                        f"Reason=clusterkit health: {reason}"[:200]], check=False)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())

"""Node health checks: run on every node before a step starts and after a failure.

The accelerator and EFA checks are `clusterkit doctor`'s host-layer checks (driver, fabric manager,
EFA devices against the instance type, Neuron driver), so one definition serves both.
`python -m clusterkit.stack.health` (`runtime.HEALTH_MODULE`) runs the checks that apply on this node and
prints one JSON line; with `--drain` a failing node drains itself (for Slurm's HealthCheckProgram or a
prolog). The supervisor runs it on each node through srun, by that module name, so it never imports the
stack. On a local cluster a check can be failed on purpose: `clusterkit local fail-health`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.runtime import FAULTS_DIR_ENV, HEALTH_MODULE, INSTANCE_TYPE_ENV

if TYPE_CHECKING:
    from clusterkit.stack.probe import Probe


@lean_dataclass(frozen=True)
class HealthResult:
    check: str
    ok: bool
    evidence: str


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def check_injected_fault(node: str) -> HealthResult:
    """A fault put in place by `clusterkit local fail-health`: a file named after the node."""
    directory = os.environ.get(FAULTS_DIR_ENV)
    fault = Path(directory) / node if directory else None
    if fault is not None and fault.exists():
        return HealthResult("injected-fault", False, fault.read_text().strip() or "fault injected")
    return HealthResult("injected-fault", True, "none")


def host_layer_results(probe: Probe | None = None) -> list[HealthResult]:
    """Doctor's checks of what belongs on the host (driver, fabric manager, EFA devices, Neuron
    driver): the container's layers are not there when this runs beside the job, so they don't count."""
    from clusterkit.stack.doctor import Status, run_checks
    from clusterkit.stack.probe import SystemProbe

    results = run_checks(probe or SystemProbe(), expect_instance_type=os.environ.get(INSTANCE_TYPE_ENV) or None)
    return [HealthResult(r.name, r.status is not Status.FAIL, r.detail) for r in results
            if r.layer == "ami" and r.status is not Status.SKIP]


def run_health_checks(node: str | None = None, probe: Probe | None = None) -> list[HealthResult]:
    return [check_injected_fault(node or node_name()), *host_layer_results(probe)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {HEALTH_MODULE}",
                                     description="Check this node; exit 1 if a check fails.")
    parser.add_argument("--drain", action="store_true", help="drain this node in Slurm when a check fails")
    args = parser.parse_args(argv)
    node = node_name()
    results = run_health_checks(node)
    healthy = all(r.ok for r in results)
    print(json.dumps({"node": node, "healthy": healthy, "results": [asdict(r) for r in results]}), flush=True)
    if not healthy and args.drain:
        reason = "; ".join(f"{r.check}: {r.evidence}" for r in results if not r.ok)
        from clusterkit.slurm import Slurm

        Slurm().update_node(node, "DRAIN", f"clusterkit health: {reason}"[:200])
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())

"""Node health checks: run on every node before a step starts and after a failure.

The accelerator and EFA checks are `clusterkit doctor`'s host-layer checks (driver, fabric manager,
EFA devices against the instance type, Neuron driver), so one definition serves both.
`python -m clusterkit.stack.health` (`runtime.HEALTH_MODULE`) runs the checks that apply on this node and
prints one JSON line; with `--drain` a failing node drains itself (for Slurm's HealthCheckProgram or a
prolog). The supervisor runs it on each node through srun, by that module name, so it never imports the
stack. On a local cluster a check can be failed on purpose: `clusterkit local fail-health`, or a GPU made to
report a device error (`clusterkit local fail-device`): an Xid line in the node's kernel log, or an uncorrected
ECC count, in the formats the driver writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time
from collections.abc import Callable
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


# Xids that mean the GPU or its links are broken, not the application (NVIDIA's Xid catalog): the node must go.
# Others (13 graphics engine exception, 31 memory page fault, 43 GPU stopped processing) follow a program's bug.
NODE_XIDS = {48: "double-bit ECC error", 62: "internal micro-controller halt", 64: "ECC page retirement or row "
             "remapping failure", 74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC error "
             "rate", 94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error"}
XID_LINE = re.compile(r"NVRM: Xid \((?P<device>[^)]*)\): (?P<xid>\d+)\b")


def kernel_log_file(faults_dir: Path, node: str) -> Path:
    """A local node's kernel log (dmesg's lines) as `fail-device --xid` writes it."""
    return faults_dir / f"{node}.kmsg"


def ecc_file(faults_dir: Path, node: str) -> Path:
    """A local node's ECC counters, as `nvidia-smi --query-gpu=pci.bus_id,ecc.errors.uncorrected.volatile.total
    --format=csv,noheader` prints them (one GPU a line)."""
    return faults_dir / f"{node}.ecc"


def node_xids(kernel_log: str) -> list[str]:
    """Each Xid in a kernel log that condemns the node, as evidence: 'Xid 79 on PCI:0000:10:1c (GPU has ...)'."""
    found = []
    for match in XID_LINE.finditer(kernel_log):
        xid = int(match["xid"])
        if xid in NODE_XIDS:
            found.append(f"Xid {xid} on {match['device']} ({NODE_XIDS[xid]})")
    return found


def uncorrected_ecc(counters: str) -> list[str]:
    """Each GPU whose uncorrected (volatile) ECC count is above 0, as evidence."""
    found = []
    for line in counters.splitlines():
        bus_id, _, count = (part.strip() for part in line.rpartition(","))
        if count.isdigit() and int(count) > 0:
            found.append(f"{count} uncorrected ECC errors on {bus_id}")
    return found


ECC_QUERY = ("nvidia-smi", "--query-gpu=pci.bus_id,ecc.errors.uncorrected.volatile.total", "--format=csv,noheader")
# Where the kernel's messages can be read: dmesg (root, or kernel.dmesg_restrict=0), else the journal's copy.
KERNEL_LOG_COMMANDS = (("dmesg",), ("journalctl", "-k", "-b", "-q", "--no-pager"))
NOT_READABLE = ("Operation not permitted", "not permitted", "No journal files", "Permission denied")


def check_device_errors(node: str, probe: Probe | None = None) -> HealthResult:
    """GPU errors the driver reported since boot: Xids that condemn the node in the kernel log, and uncorrected ECC
    errors (nvidia-smi). On a local cluster, those `clusterkit local fail-device` put in place instead. A kernel log
    this user may not read (dmesg_restrict, no journal) is said in the evidence, not held against the node."""
    directory = os.environ.get(FAULTS_DIR_ENV)
    evidence: list[str] = []
    unread = ""
    if directory:
        for source, parse in ((kernel_log_file(Path(directory), node), node_xids),
                              (ecc_file(Path(directory), node), uncorrected_ecc)):
            if source.exists():
                evidence += parse(source.read_text(errors="replace"))
    else:
        from clusterkit.stack.probe import SystemProbe

        probe = probe or SystemProbe()
        for argv in KERNEL_LOG_COMMANDS:
            text = probe.run(list(argv))
            if text is not None and any(words in text[:300] for words in NOT_READABLE):
                unread = "the kernel log is not readable here (run as root to see Xids)"
            elif text is not None:
                evidence += node_xids(text)
                unread = ""
                break
        evidence += uncorrected_ecc(probe.run(list(ECC_QUERY)) or "")
    return HealthResult("gpu-errors", not evidence, "; ".join(evidence) or unread or "none")


# p5en's EFA devices can show up after the node is up: AWS's GPU cluster health check counts them again up to 3
# times, 5 s apart, before it fails the node (awsome-distributed-ai, 4.validation_and_observability/
# 2.gpu-cluster-healthcheck/checks/2-efa-enumeration.sh), so a healthy node checked at boot is not drained.
LATE_EFA_FAMILIES = ("p5en",)
LATE_EFA_RETRIES = 3
LATE_EFA_WAIT_S = 5.0


def host_layer_results(probe: Probe | None = None, sleep: Callable[[float], None] = time.sleep) -> list[HealthResult]:
    """Doctor's checks of what belongs on the host (driver, fabric manager, EFA devices, Neuron
    driver): the container's layers are not there when this runs beside the job, so they don't count."""
    from clusterkit.stack.doctor import Status, checks_for_node, examine_node
    from clusterkit.stack.probe import SystemProbe

    probe = probe or SystemProbe()
    node = examine_node(probe, expect_instance_type=os.environ.get(INSTANCE_TYPE_ENV) or None)
    results = checks_for_node(probe, node)
    late = node.instance is not None and node.instance.name.split(".")[0] in LATE_EFA_FAMILIES
    for _ in range(LATE_EFA_RETRIES if late else 0):
        if not any(r.name == "efa devices" and r.status is Status.FAIL for r in results):
            break
        sleep(LATE_EFA_WAIT_S)
        results = checks_for_node(probe, node)
    return [HealthResult(r.name, r.status is not Status.FAIL, r.detail) for r in results
            if r.layer == "ami" and r.status is not Status.SKIP]


def run_health_checks(node: str | None = None, probe: Probe | None = None,
                      sleep: Callable[[float], None] = time.sleep) -> list[HealthResult]:
    node = node or node_name()
    return [check_injected_fault(node), check_device_errors(node, probe), *host_layer_results(probe, sleep)]


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

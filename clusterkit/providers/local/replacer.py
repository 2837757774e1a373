"""A local cluster's node replacer: clustermgtd's replacement of unhealthy static nodes, on one machine.

`python -m clusterkit.providers.local.replacer NAME` runs beside the cluster's other daemons (started and stopped
with it when its timings replace nodes). Every loop (`Timings.replace_loop_s`: 60 s as clustermgtd's LOOP_TIME
at parallelcluster timings) it takes each node that ParallelCluster's `StaticNode.is_state_healthy` calls unhealthy
(aws-parallelcluster-node, src/slurm_plugin/slurm_resources.py: DOWN, or DRAINED: drain and idle or down, not
completing) and does what `ClusterManager._handle_unhealthy_static_nodes` does (clustermgtd.py): sets it DOWN with
clustermgtd's reason, "terminates" it (every process of the node's namespace), waits the boot delay, starts a
fresh slurmd of the same name and returns it to service. A node that is merely silent (frozen, not yet marked
down by Slurm) is left alone, as clustermgtd leaves it. Each step is one JSON line in `log/replacements.jsonl`,
which `LocalCluster.replacements()` reads.

With `--replacement hyperpod` it does SageMaker HyperPod's node recovery from Slurm instead (config.ReplacementStyle
says what HyperPod documents): only a node marked FAIL with HyperPod's reason, once its jobs ended, is replaced
(`Action:Replace`: its faults go with it) or rebooted (`Action:Reboot`: the same node, its faults stay); its state is
not touched before (HyperPod warns that a change during its replacement can fail it).
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import os
import sys
import time
from pathlib import Path

from clusterkit.errors import ClusterkitError
from clusterkit.providers.base import Replacement
from clusterkit.providers.local.config import ReplacementStyle
from clusterkit.slurm import REBOOT_REASON, NodeInfo, Slurm
from clusterkit.slurm import REPLACE_REASON as HYPERPOD_REPLACE_REASON

# clustermgtd's own reason (ClusterManager._handle_unhealthy_static_nodes), so that a job's pending reason and
# `sinfo -R` read as they do on ParallelCluster.
REPLACE_REASON = "Static node maintenance: unhealthy node is being replaced"
UNHEALTHY_STATES = ("down", "drain", "fail")  # sinfo's short states: draining (drng) and failing (failg) still run jobs
LOG_NAME = "replacements.jsonl"


# HyperPod acts on its reason on a node FAIL (sinfo's `fail`, or `failg` while an allocated node runs a job) or DOWN
# (the documented last resort, which ends the node's jobs at once), once no job runs on it. sinfo says `fail`, not
# `failg`, for a node FAIL that a job uses only in part: whether jobs run there is squeue's to say (`busy`).
HYPERPOD_STATES = ("fail", "failg", "down")
# The job states that hold a node (squeue -t).
HOLDING = "RUNNING,COMPLETING,CONFIGURING,SUSPENDED,STOPPED"


class NodeWork(str, enum.Enum):
    """What the replacer does to a node."""

    REPLACE = "replace"  # a fresh node of the same name: new hardware, no faults
    REBOOT = "reboot"  # the same node started again: its faults stay


def unhealthy(node: NodeInfo) -> bool:
    """What clustermgtd replaces: DOWN, or DRAINED (sinfo's `drain` is drained and idle), whatever the reason."""
    return node.base_state in UNHEALTHY_STATES


def work_for(node: NodeInfo, style: ReplacementStyle, busy: bool = False) -> NodeWork | None:
    """What the replacer does to `node` as Slurm shows it now (`busy`: a job still holds it), replacing as `style`
    does; None: leave it alone."""
    if style is ReplacementStyle.CLUSTERMGTD:
        return NodeWork.REPLACE if unhealthy(node) else None
    if node.base_state not in HYPERPOD_STATES or busy:
        return None
    return {HYPERPOD_REPLACE_REASON: NodeWork.REPLACE, REBOOT_REASON: NodeWork.REBOOT}.get(node.reason)


def _busy(slurm: Slurm, node: str) -> bool:
    """Whether a job still holds `node`."""
    return bool(slurm.run("squeue", "-h", "-w", node, "-t", HOLDING, "-o", "%i").stdout.strip())


def read_log(path: Path) -> dict[str, Replacement]:
    """Each node's latest replacement, from the replacer's log (a line cut short by a crash is skipped)."""
    latest: dict[str, Replacement] = {}
    try:
        text = path.read_text()
    except FileNotFoundError:
        return latest
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        node = str(event.get("node", ""))
        if event.get("event") == "terminated":
            latest[node] = Replacement(node, "booting", str(event["at"]), str(event["ready_by"]),
                                       replaced_because=str(event.get("because", "")))
        elif event.get("event") == "ready" and node in latest:
            prior = latest[node]
            latest[node] = Replacement(node, "ready", prior.terminated_at, prior.ready_by, str(event["at"]),
                                       prior.replaced_because)
    return latest


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _stamp(moment: dt.datetime) -> str:
    return moment.isoformat(timespec="seconds")


def _record(log: Path, **event: object) -> None:
    with open(log, "a") as handle:
        handle.write(json.dumps(event) + "\n")
    print(" ".join(f"{key}={value}" for key, value in event.items()), flush=True)  # the daemon's human log


def replace_once(name: str) -> list[str]:
    """One loop: replace (or reboot) every node of cluster `name` its replacement style takes; returns those nodes."""
    from clusterkit.providers.local.cluster import LocalCluster

    cluster = LocalCluster.get(name)  # fresh each loop: the record changes (nodes started by hand)
    slurm = cluster.slurm()
    style = cluster.config.timings.replacement
    failed = []
    for node in slurm.nodes():
        work = work_for(node, style) if node.name in cluster.config.node_names else None
        if work is not None and style is ReplacementStyle.HYPERPOD:  # squeue asked only of a node HyperPod would take
            work = work_for(node, style, busy=_busy(slurm, node.name))
        if work is not None:
            failed.append((node, work))
    if not failed:
        return []
    log = cluster.layout.log / LOG_NAME
    boot_delay = cluster.config.timings.boot_delay_s
    for node, work in failed:
        if style is ReplacementStyle.CLUSTERMGTD:
            # DOWN first, as clustermgtd does, "so jobs can be requeued immediately".
            slurm.update_node(node.name, "DOWN", REPLACE_REASON)
        cluster.terminate_node(node.name, keep_faults=work is NodeWork.REBOOT)
        terminated = _now()
        _record(log, node=node.name, event="terminated", at=_stamp(terminated),
                ready_by=_stamp(terminated + dt.timedelta(seconds=boot_delay)),
                because=f"{node.state}: {node.reason}".rstrip(": "), work=work.value)
    time.sleep(boot_delay)
    for node, _ in failed:
        cluster.boot_node(node.name)
        _record(log, node=node.name, event="ready", at=_stamp(_now()))
    return [node.name for node, _ in failed]


def main(argv: list[str] | None = None) -> int:
    from clusterkit.providers.local.cluster import LocalCluster

    name = (argv if argv is not None else sys.argv[1:])[0]
    cluster = LocalCluster.get(name)
    cluster.layout.pid_file("replacer").write_text(f"{os.getpid()}\n")
    loop = cluster.config.timings.replace_loop_s
    print(f"replacing nodes of {name!r} as {cluster.config.timings.replacement.value} does, every {loop:g} s, boot "
          f"delay {cluster.config.timings.boot_delay_s:g} s", flush=True)
    while True:
        started = time.monotonic()
        try:
            replace_once(name)
        except ClusterkitError as error:  # the controller restarting, a node that would not boot: next loop
            print(f"loop failed: {error}", flush=True)
        time.sleep(max(0.0, loop - (time.monotonic() - started)))


if __name__ == "__main__":
    sys.exit(main())

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
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

from clusterkit.errors import ClusterkitError
from clusterkit.providers.base import Replacement
from clusterkit.slurm import NodeInfo

# clustermgtd's own reason (ClusterManager._handle_unhealthy_static_nodes), so that a job's pending reason and
# `sinfo -R` read as they do on ParallelCluster.
REPLACE_REASON = "Static node maintenance: unhealthy node is being replaced"
UNHEALTHY_STATES = ("down", "drain", "fail")  # sinfo's short states: draining (drng) and failing (failg) still run jobs
LOG_NAME = "replacements.jsonl"


def unhealthy(node: NodeInfo) -> bool:
    """What clustermgtd replaces: DOWN, or DRAINED (sinfo's `drain` is drained and idle), whatever the reason."""
    return node.base_state in UNHEALTHY_STATES


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
    """One loop: replace every unhealthy node of cluster `name`; returns the nodes replaced."""
    from clusterkit.providers.local.cluster import LocalCluster

    cluster = LocalCluster.get(name)  # fresh each loop: the record changes (nodes started by hand)
    slurm = cluster.slurm()
    failed = [node for node in slurm.nodes() if node.name in cluster.config.node_names and unhealthy(node)]
    if not failed:
        return []
    log = cluster.layout.log / LOG_NAME
    boot_delay = cluster.config.timings.boot_delay_s
    for node in failed:
        # DOWN first, as clustermgtd does, "so jobs can be requeued immediately".
        slurm.update_node(node.name, "DOWN", REPLACE_REASON)
        cluster.terminate_node(node.name)
        terminated = _now()
        _record(log, node=node.name, event="terminated", at=_stamp(terminated),
                ready_by=_stamp(terminated + dt.timedelta(seconds=boot_delay)),
                because=f"{node.state}: {node.reason}".rstrip(": "))
    time.sleep(boot_delay)
    for node in failed:
        cluster.boot_node(node.name)
        _record(log, node=node.name, event="ready", at=_stamp(_now()))
    return [node.name for node in failed]


def main(argv: list[str] | None = None) -> int:
    from clusterkit.providers.local.cluster import LocalCluster

    name = (argv if argv is not None else sys.argv[1:])[0]
    cluster = LocalCluster.get(name)
    cluster.layout.pid_file("replacer").write_text(f"{os.getpid()}\n")
    loop = cluster.config.timings.replace_loop_s
    print(f"replacing unhealthy nodes of {name!r} every {loop:g} s, boot delay "
          f"{cluster.config.timings.boot_delay_s:g} s", flush=True)
    while True:
        started = time.monotonic()
        try:
            replace_once(name)
        except ClusterkitError as error:  # the controller restarting, a node that would not boot: next loop
            print(f"loop failed: {error}", flush=True)
        time.sleep(max(0.0, loop - (time.monotonic() - started)))


if __name__ == "__main__":
    sys.exit(main())

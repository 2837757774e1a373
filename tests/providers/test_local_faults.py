"""Faults as they happen, on a real local cluster: a node that goes silent (frozen, every connection open) and
a GPU that reports an Xid, through `clusterkit local`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from clusterkit.pids import pid_alive
from clusterkit.providers.local import processes

pytestmark = pytest.mark.slurm


def local(*args: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "clusterkit", "local", *args, "--output", "json"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


def node_state(cluster, node: str) -> str:
    return {n.name: n for n in cluster.slurm().nodes()}[node].state


def ticks(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def test_a_frozen_node_goes_silent_its_step_blocks_and_slurm_notices_only_after_slurmd_timeout(own_cluster,
                                                                                               job_dir):
    node = own_cluster.config.node_names[-1]
    tick_file = job_dir / "ticks"
    job_id = own_cluster.slurm().sbatch(textwrap.dedent(f"""\
        #!/bin/bash
        #SBATCH --nodes=1 -w {node} --output={job_dir}/out.txt
        srun bash -c 'while :; do echo tick >> {tick_file}; sleep 0.1; done'
        """))
    processes.wait_until(lambda: ticks(tick_file) > 3, 30, "the step to tick", interval=0.1)
    frozen = local("freeze-node", own_cluster.name, node)["stopped_pids"]
    try:
        assert own_cluster.pids[f"slurmd-{node}"] in frozen and all(stopped(pid) for pid in frozen if pid_alive(pid))
        frozen_at, seen = time.monotonic(), ticks(tick_file)
        time.sleep(2)
        # Blocked, not failed: no tick, the job still runs, and the controller has not noticed yet.
        assert ticks(tick_file) == seen and own_cluster.slurm().queue()[job_id] == "RUNNING"
        assert not node_state(own_cluster, node).endswith("*")
        local("thaw-node", own_cluster.name, node)
        processes.wait_until(lambda: ticks(tick_file) > seen + 3, 10, "the step to tick again", interval=0.1)
        assert own_cluster.slurm().queue()[job_id] == "RUNNING"

        local("freeze-node", own_cluster.name, node)
        frozen_at = time.monotonic()
        processes.wait_until(lambda: node_state(own_cluster, node).endswith("*"), 40, "slurmctld to notice",
                             interval=0.2)
        noticed = time.monotonic() - frozen_at
        timeout = own_cluster.config.timings.slurmd_timeout
        # SlurmdTimeout, never before it. Slurm 24.11 takes longer to give up on a node that accepts connections
        # but never answers (measured 21.6 s at SlurmdTimeout=5, MessageTimeout=5; 22.05 within 4 × SlurmdTimeout):
        # one more MessageTimeout of slack covers both.
        assert timeout <= noticed <= 4 * timeout + own_cluster.config.timings.message_timeout, noticed
    finally:
        own_cluster.thaw_node(node)
        own_cluster.slurm().cancel(job_id)
    processes.wait_until(lambda: node_state(own_cluster, node) in ("idle", "mix", "alloc"), 30,
                         "the thawed node to answer again", interval=0.2)


def test_an_injected_xid_drains_the_node_with_the_xid_as_evidence(local_cluster):
    node = local_cluster.config.node_names[-1]
    said = local("fail-device", local_cluster.name, node, "--xid", "79")
    assert "NVRM: Xid (PCI:0000:10:1c): 79" in said["fault"]
    try:
        # The health check as the supervisor runs it, on that node through srun (--drain: as HealthCheckProgram).
        result = local_cluster.slurm().run("srun", "-N1", "-n1", "-w", node, sys.executable, "-m",
                                           "clusterkit.stack.health", "--drain", check=False)
        report = json.loads(result.stdout.splitlines()[-1])
        assert not report["healthy"]
        info = {n.name: n for n in local_cluster.slurm().nodes()}[node]
        assert info.base_state in ("drain", "drng")
        assert "gpu-errors: Xid 79 on PCI:0000:10:1c (GPU has fallen off the bus)" in info.reason, info.reason
    finally:
        local("heal", local_cluster.name, node)
    # A resumed node shows idle* for a moment, until the controller's next word with it.
    processes.wait_until(lambda: node_state(local_cluster, node) == "idle", 20, "the healed node to serve")


@pytest.mark.parametrize("argv, said", [
    (["--xid", "0"], "--xid 0 is no Xid (give the driver's Xid number, 1 to 999 (e.g. 79))"),
    (["--ecc", "0"], "--ecc 0 is no error count (give a count of at least 1)"),
])
def test_a_bad_device_fault_is_one_line(local_cluster, argv, said):
    result = subprocess.run([sys.executable, "-m", "clusterkit", "local", "fail-device", local_cluster.name,
                             local_cluster.config.node_names[0], *argv], capture_output=True, text=True,
                            env=dict(os.environ))
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and said in result.stderr, result.stderr
    assert not list(local_cluster.layout.faults.glob("*.kmsg")) + list(local_cluster.layout.faults.glob("*.ecc"))

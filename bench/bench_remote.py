"""Job verbs from afar against the same verbs on the cluster itself, measured in the same run.

    python bench/bench_remote.py [--repeat N]     (root: it starts a local cluster with --ssh)

A 2-node local cluster with an sshd stands in for a real one; a second clusterkit home with no Slurm
configuration stands in for the laptop that reaches it over SSH. Each figure is the median of N
whole `clusterkit` processes (start-up included): what a user waits for. Goal: a remote `status`
within 2x the local one while the shared SSH connection is up; the first connection's cost is
reported on its own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 2.0
REPO_ROOT = Path(__file__).resolve().parents[1]


def clusterkit(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True, env=env,
                            cwd=cwd)
    if result.returncode != 0:
        raise SystemExit(f"clusterkit {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def median_seconds(repeat: int, env: dict[str, str], *args: str, cwd: Path | None = None,
                   before=None) -> float:  # noqa: ANN001 - a callable run before each try
    times = []
    for _ in range(repeat):
        if before:
            before()
        start = time.perf_counter()
        clusterkit(env, *args, cwd=cwd)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="ck-bench-remote-"))
    here = {**os.environ, "CLUSTERKIT_HOME": str(scratch / "cluster-side")}
    laptop = {key: value for key, value in os.environ.items() if not key.startswith("SLURM")}
    laptop["CLUSTERKIT_HOME"] = str(scratch / "laptop")
    clusterkit(here, "create-cluster", "--provider", "local", "--name", "bench", "--nodes", "2", "--ssh")
    try:
        info = json.loads(clusterkit(here, "describe-cluster", "bench", "-o", "json").stdout)
        ssh = info["ssh"]
        clusterkit(laptop, "connect", "far", "--ssh", f"{ssh['user']}@{ssh['host']}", "--port", str(ssh["port"]),
                   "--identity-file", ssh["identity_file"], "--known-hosts", ssh["known_hosts_file"],
                   "--python", info["python"], "--runs-dir", str(scratch / "runs"))
        work = scratch / "work"
        work.mkdir()
        (work / "job.yaml").write_text("name: tiny\nlauncher: srun\ncommand: [true]\nlogs: {output: t_%j.out}\n")
        local_id = json.loads(clusterkit(here, "submit", "job.yaml", "--cluster", "bench", "-o", "json",
                                         cwd=work).stdout)["job_id"]
        remote_id = json.loads(clusterkit(laptop, "submit", "job.yaml", "--cluster", "far", "--sync", "job.yaml",
                                          "-o", "json", cwd=work).stdout)["job_id"]

        from clusterkit.transport import SshTarget, SshTransport

        transport = SshTransport(SshTarget.from_dict(ssh))
        transport.close()
        start = time.perf_counter()
        clusterkit(laptop, "status", remote_id, "--cluster", "far")
        first = time.perf_counter() - start

        # Each side asks about the job it submitted (and so has a record of).
        local_status = median_seconds(args.repeat, here, "status", local_id, "--cluster", "bench")
        remote_status = median_seconds(args.repeat, laptop, "status", remote_id, "--cluster", "far")
        cold_status = median_seconds(max(3, args.repeat // 2), laptop, "status", remote_id, "--cluster", "far",
                                     before=transport.close)
        local_submit = median_seconds(args.repeat, here, "submit", "job.yaml", "--cluster", "bench", cwd=work)
        remote_submit = median_seconds(args.repeat, laptop, "submit", "job.yaml", "--cluster", "far", "--sync",
                                       "job.yaml", cwd=work)
    finally:
        clusterkit(here, "delete-cluster", "bench")
    ratio = remote_status / local_status
    print(f"status, on the cluster:                 {local_status:.3f} s (median of {args.repeat})")
    print(f"status, from afar (shared connection):  {remote_status:.3f} s  ratio {ratio:.2f}")
    print(f"status, from afar (new connection):     {cold_status:.3f} s  (the very first one: {first:.3f} s)")
    print(f"submit, on the cluster:                 {local_submit:.3f} s")
    print(f"submit, from afar (spec copied there):  {remote_submit:.3f} s  ratio {remote_submit / local_submit:.2f}")
    met = ratio <= TARGET_RATIO
    print(f"target: remote status <= {TARGET_RATIO}x local: {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

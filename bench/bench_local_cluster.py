"""Time to create and delete a local Slurm cluster (packages present), through the CLI.

Targets (issue 2): up in <= 3 s, down in <= 5 s. Prints each run and the median, with the ratio to
the target. The MariaDB template is built once before timing (a first create on a machine pays it).

    python bench/bench_local_cluster.py [--runs 5] [--nodes 4]
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

UP_TARGET_S, DOWN_TARGET_S = 3.0, 5.0


def clusterkit(*args: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "clusterkit", *args, "--output", "json"], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=4)
    options = parser.parse_args()
    os.environ["CLUSTERKIT_HOME"] = tempfile.mkdtemp(prefix="ck-bench-")
    clusterkit("create-cluster", "--name", "warmup", "--nodes", "1")
    clusterkit("delete-cluster", "warmup")
    ups, downs = [], []
    for run in range(options.runs):
        ups.append(clusterkit("create-cluster", "--name", "bench", "--nodes", str(options.nodes)))
        downs.append(clusterkit("delete-cluster", "bench"))
        print(f"run {run + 1}: up {ups[-1]:.2f} s, down {downs[-1]:.2f} s")
    up, down = statistics.median(ups), statistics.median(downs)
    print(json.dumps({
        "nodes": options.nodes, "runs": options.runs,
        "up_median_s": round(up, 2), "up_vs_target": round(up / UP_TARGET_S, 2),
        "down_median_s": round(down, 2), "down_vs_target": round(down / DOWN_TARGET_S, 2),
    }))


if __name__ == "__main__":
    main()

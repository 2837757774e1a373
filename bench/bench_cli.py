"""How long the CLI makes a user wait, against `python -c 'import submitit'` measured in the same run.

    python bench/bench_cli.py [--rounds 30]

Every figure is a whole fresh process (interpreter start-up included), which is what a user waits
for. Each round runs every command once, in a rotating order; the ratio to the baseline is taken
within each round and the median over rounds is reported (the machine may be shared and noisy).
Bytecode is cached for both sides, as an installed package has it: PYTHONDONTWRITEBYTECODE, which
some sandboxes set, would make every run compile clusterkit from source while submitit's
installed .pyc files are used.
Targets: `clusterkit --help` <= 0.6x, `validate` and `create-cluster --dry-run` <= 0.9x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def commands(scratch: Path) -> dict[str, tuple[list[str], float | None]]:
    """name -> (command, target ratio to the baseline)."""
    clusterkit = [sys.executable, "-m", "clusterkit"]
    return {
        "import submitit (baseline)": ([sys.executable, "-c", "import submitit"], None),
        "clusterkit --help": ([*clusterkit, "--help"], 0.6),
        "clusterkit validate": ([*clusterkit, "validate", "cluster-configs/p4de.yaml"], 0.9),
        "clusterkit create-cluster --dry-run": (
            [*clusterkit, "create-cluster", "--preset", "p4de", "--name", "bench", "--dry-run",
             "--output-config", str(scratch / "p4de.yaml")], 0.9),
    }


ENVIRONMENT = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def run_once(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO_ROOT, env=ENVIRONMENT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="rounds (every command once per round)")
    args = parser.parse_args()
    print(f"{args.rounds} rounds; load: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as scratch:
        named = commands(Path(scratch))
        names = list(named)
        for name in names:  # warm the page cache and write .pyc files
            run_once(named[name][0])
        seconds: dict[str, list[float]] = {name: [] for name in names}
        for round_index in range(args.rounds):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                seconds[name].append(run_once(named[name][0]))
    baseline = names[0]
    print(f"\n{'command':38s} {'median s':>9s} {'best s':>7s} {'ratio':>6s} target")
    met = True
    for name in names:
        ratios = [s / b for s, b in zip(seconds[name], seconds[baseline])]
        ratio = statistics.median(ratios)
        target = named[name][1]
        verdict = "" if target is None else f"<= {target}  {'met' if ratio <= target else 'NOT met'}"
        met = met and (target is None or ratio <= target)
        print(f"{name:38s} {statistics.median(seconds[name]):9.3f} {min(seconds[name]):7.3f} {ratio:6.2f} {verdict}")
    print(f"\nload at the end: {os.getloadavg()}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

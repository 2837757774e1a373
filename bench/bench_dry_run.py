"""Time a whole-process dry run of the p4de preset against `pcluster version`, measured in the same run.

    python bench/bench_dry_run.py [--repeat N]

Each figure is the best of N fresh processes (start-up included), so it is what a user waits for.
Target: the dry run takes at most 0.2 s.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 0.2
REPO_ROOT = Path(__file__).resolve().parents[1]
def best_of(command: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - start)
    return best


def dry_run_command(output_config: Path) -> list[str]:
    return [sys.executable, "-m", "clusterkit", "create-cluster", "--preset", "p4de", "--name", "bench", "--dry-run",
            "--output-config", str(output_config)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="processes per measurement (best is kept)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        output_config = Path(scratch) / "x.yaml"
        dry_run = best_of(dry_run_command(output_config), args.repeat)
        if not output_config.is_file():
            print("error: the dry run wrote no config", file=sys.stderr)
            return 1
    print(f"clusterkit create-cluster --dry-run (p4de): {dry_run:.3f} s best of {args.repeat}")

    pcluster = shutil.which("pcluster", path=str(Path(sys.executable).parent)) or shutil.which("pcluster")
    if pcluster is None:
        print("pcluster not installed: no comparison")
    else:
        reference = best_of([pcluster, "version"], args.repeat)
        print(f"pcluster version: {reference:.3f} s best of {args.repeat}")
        print(f"ratio clusterkit / pcluster: {dry_run / reference:.2f}")
    within = dry_run <= TARGET_SECONDS
    print(f"target <= {TARGET_SECONDS} s: {'met' if within else 'MISSED'}")
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())

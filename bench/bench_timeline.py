"""How long `clusterkit timeline` takes to draw a long, broken run, and how large the page is.

    python bench/bench_timeline.py [--rounds 3]

The run: Llama 3 405B's 466 interruptions over 54 days (tests/jobs/timeline_runs.py's synthetic run: each failure
seen, the step relaunched on a spare or the job requeued, resumed from a checkpoint 30 min back), on 128 nodes and on
2,048 (Llama's 16,384 GPUs). Each round is a fresh process, as a user's command is: loading the plotting library,
building the figure model (the ledger included) and drawing the HTML page. The baseline, measured in the same rounds,
is the same process building the ledger alone (what `clusterkit goodput` computes).
Targets: <= 2 s and <= 2 MB for the page, at either size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
ROUND = """
import json, sys, time
started = time.perf_counter()
from tests.jobs.timeline_runs import synthetic
run = synthetic(nodes={nodes})
made = time.perf_counter()
from clusterkit.jobs.ledger import build
build(run.job_id, run.submitted, run.end, run.made, run.tries, run.attempt_ends)
ledger = time.perf_counter()
if {draw}:
    from clusterkit.jobs.timeline import build_timeline
    from clusterkit.jobs.timeline_picture import render
    timeline = build_timeline(run.job_id, run.submitted, run.end, run.made, run.tries, run.attempt_ends)
    page = render(timeline, "html").encode()
else:
    page = b""
drawn = time.perf_counter()
print(json.dumps({{"ledger_s": ledger - made, "timeline_s": drawn - made - (ledger - made) * {draw},
                  "bytes": len(page)}}))
"""


def one_round(nodes: int, draw: bool) -> dict[str, float]:
    result = subprocess.run([sys.executable, "-c", ROUND.format(nodes=nodes, draw=int(draw))], cwd=REPO_ROOT,
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{'nodes':>6}  {'ledger (baseline)':>17}  {'timeline page':>13}  {'ratio':>6}  {'page':>8}  target")
    for nodes in (128, 2048):
        rounds = [(one_round(nodes, draw=False), one_round(nodes, draw=True)) for _ in range(args.rounds)]
        ledger = statistics.median(base["ledger_s"] for base, _ in rounds)
        drawn = statistics.median(page["timeline_s"] for _, page in rounds)
        size = rounds[0][1]["bytes"]
        met = "met" if drawn <= 2 and size <= 2_000_000 else "MISSED"
        print(f"{nodes:>6}  {ledger:>15.3f} s  {drawn:>11.2f} s  {drawn / ledger:>5.0f}x  {size / 1e6:>5.2f} MB  "
              f"{met}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Regenerate the README's picture: the timeline of a crashed and resumed run, from its own records.

    python scripts/timeline-picture.py [--output docs/timeline.png]

The run is tests/jobs/data/ledger/batch-host-frozen, recorded on a local cluster at ParallelCluster's timings: n1
froze in attempt 3.0 (on n1 and n2), Slurm ended the attempt NODE_FAIL and requeued the job, and attempt 3.1 resumed
on n3 and n4 from the checkpoint of step 20. Needs the timeline extra (matplotlib).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from clusterkit.files import write_user_file  # noqa: E402
from clusterkit.jobs.timeline import build_timeline  # noqa: E402
from clusterkit.jobs.timeline_picture import render  # noqa: E402
from tests.jobs.timeline_runs import recorded  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(REPO_ROOT / "docs" / "timeline.png"), help="the PNG to write")
    args = parser.parse_args()
    run = recorded("batch-host-frozen")
    timeline = build_timeline(run.job_id, run.submitted, run.end, run.made, run.tries, run.attempt_ends)
    picture = render(timeline, "png")
    write_user_file(args.output, picture)
    print(f"wrote {args.output} ({len(picture):,} bytes): {timeline.summary()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Runs to draw: the recorded runs of tests/jobs/data/ledger and a synthetic run at Llama 3's scale of failures."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from clusterkit import runtime
from clusterkit.jobs.recoveries import Try, parse_time, parse_tries
from clusterkit.lean_dataclass import lean_dataclass

FIXTURES = Path(__file__).parent / "data" / "ledger"
RECORDED = ("batch-host-frozen", "hang", "spare-relaunch")


@lean_dataclass(frozen=True)
class Run:
    """What build_timeline() (and the ledger) take."""

    job_id: str
    submitted: float
    end: float
    made: list[dict[str, Any]]
    tries: list[Try]
    attempt_ends: dict[str, str]


def recorded(case: str) -> Run:
    """A run recorded on a local cluster at ParallelCluster's timings (tests/resilience/test_beacons_local.py)."""
    directory = FIXTURES / case
    job = json.loads((directory / "job.json").read_text())
    made = runtime.parse_decisions((directory / "decisions.jsonl").read_bytes())
    tries = parse_tries(runtime.parse_decisions((directory / "tries.jsonl").read_bytes()))
    ends = {f"{job['job_id']}.{a['attempt']}": a["end"] for a in job["attempts"]}
    end = parse_time(job["attempts"][-1]["end"])
    submitted = parse_time(job["submitted"])
    assert end is not None and submitted is not None
    return Run(job["job_id"], submitted, end, made, tries, ends)


def synthetic(interruptions: int = 466, days: float = 54, nodes: int = 128, seed: int = 0) -> Run:
    """A run of `days` on `nodes` nodes with `interruptions` node failures at random times (Llama 3 405B: 466 in 54
    days). Each failure is seen 30-120 s after the last step, and the step relaunched on a spare (the same attempt's
    next try) or the job requeued (the next attempt), 5-15 min later, from the checkpoint of 30 min before; the nodes
    keep their names (a replaced ParallelCluster node does)."""
    rng = random.Random(seed)
    start = 1_800_000_000.0
    end = start + days * 86400
    names = tuple(f"p5-{index}" for index in range(1, nodes + 1))
    faults = sorted(rng.uniform(start + 600, end - 3600) for _ in range(interruptions))
    tries: list[Try] = []
    made: list[dict[str, Any]] = []
    attempt, number, began, step, resumed = 0, 0, start + 120, 1, None
    for fault in [*faults, None]:
        first_time = began + 60
        last_time = max(fault if fault is not None else end - 60, first_time)
        last_step = step + int((last_time - first_time) / 5)
        ended = (fault + rng.uniform(30, 120)) if fault is not None else end - 30
        tries.append(Try(f"9.{attempt}", number, names, began, ended, step, first_time, resumed, 2.0, last_step,
                         last_time, 1.0, 4))
        if fault is None:
            made.append({"attempt": f"9.{attempt}", "decision": runtime.COMPLETED, "unix": ended,
                         "evidence": "step exited 0"})
            break
        node = rng.choice(names)
        relaunch = rng.random() < 0.5
        made.append({"attempt": f"9.{attempt}", "decision": runtime.NODE_FAILURE, "unix": ended, "nodes": [node],
                     "marked_down": [node], "evidence": f"{node}'s liveness beacon silent for 30 s",
                     **({"action": runtime.RELAUNCH} if relaunch else {})})
        resumed = max(last_step - 360, step)  # the checkpoint of 30 min of steps before
        step = resumed + 1
        began = ended + rng.uniform(300, 900)
        attempt, number = (attempt, number + 1) if relaunch else (attempt + 1, 0)
    return Run("9", start, end, made, tries, {})

"""The goodput ledger: every second of a run in one category, from the run's own records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterkit import runtime
from clusterkit.goodput.categories import CATEGORIES
from clusterkit.jobs.ledger import build
from clusterkit.jobs.recoveries import Try, parse_time, parse_tries

FIXTURES = Path(__file__).parent / "data" / "ledger"
T0 = 1_800_000_000.0


def a_try(attempt: str, number: int, started: float, ended: float | None, first: tuple[int, float] | None,
          last: tuple[int, float] | None, resumed_from: int | None = None, stall: float | None = None) -> Try:
    return Try(attempt, number, ("n1", "n2"), T0 + started, None if ended is None else T0 + ended,
               first[0] if first else None, T0 + first[1] if first else None, resumed_from, None,
               last[0] if last else None, T0 + last[1] if last else None, stall, 1 if stall else None)


def decided(attempt: str, kind: str, at: float, **more: object) -> dict:
    return {"attempt": attempt, "decision": kind, "unix": T0 + at, **more}


def seconds(ledger) -> dict[str, float]:  # noqa: ANN001
    return {name: round(value, 3) for name, value in ledger.categories.items() if value}


def test_a_node_failure_splits_the_run_into_what_it_cost():
    # Steps 1..101 from t=15 to t=115 (1 s a step), 5 s of saves; the node fails after step 101, acted on at 120;
    # the requeued attempt starts at 150, resumes from step 90 at 160 and ends at 171 (steps 91..101 again).
    tries = [a_try("9.0", 0, 10, 116, (1, 15), (101, 115), stall=5.0),
             a_try("9.1", 0, 150, 171, (91, 160), (101, 170), resumed_from=90)]
    made = [decided("9.0", runtime.NODE_FAILURE, 120), decided("9.1", runtime.COMPLETED, 171.5)]
    ledger = build("9", T0, T0 + 172, made, tries)
    assert seconds(ledger) == {
        "queued": 10.0,  # submission to the first start
        "other": 5.0 + 1.0 + 1.0,  # the first start-up; the last step to the step's end; then to the job's end
        "productive": (100 - 11 - 5) + 10.0,  # less 11 steps computed again and the stall; then the resumed steps
        "checkpoint_stall": 5.0, "lost_work": 11.0,
        "detection": 5.0,  # last beat (115) to the decision (120)
        "recovery": 30.0 + 10.0,  # decision to the next start; its start-up to the first step
    }
    assert ledger.wall_s == 172 and sum(ledger.categories.values()) == pytest.approx(172)
    assert ledger.goodput == pytest.approx(94 / 172)


def test_a_hang_is_hang_and_a_time_limit_requeue_waits_in_the_queue():
    tries = [a_try("9.0", 0, 0, 40, (1, 5), (10, 14)), a_try("9.0", 1, 41, 60, (11, 45), (20, 55), resumed_from=10),
             a_try("9.1", 0, 70, 80, (21, 72), (30, 79), resumed_from=20)]
    made = [decided("9.0", runtime.HANG, 30), decided("9.0", runtime.TIME_LIMIT, 60.5),
            decided("9.1", runtime.COMPLETED, 80)]
    ledger = build("9", T0, T0 + 80, made, tries)
    assert [(round(s.start - T0, 1), round(s.end - T0, 1), s.category) for s in ledger.spans if s.category in (
        "hang", "queued")] == [(14.0, 30.0, "hang"), (60.0, 70.0, "queued")]  # from the step's end, saved
    assert "lost_work" not in seconds(ledger) and seconds(ledger)["productive"] == 9 + 10 + 7  # resumed exactly


def test_a_failure_slurm_ended_is_acted_on_when_its_attempt_ended():
    # The batch host died with its supervisor: the next attempt recorded the failure when it started (t=40).
    tries = [a_try("9.0", 0, 0, None, (1, 5), (10, 14)), a_try("9.1", 0, 41, 60, (9, 50), (20, 59), resumed_from=8)]
    made = [decided("9.0", runtime.NODE_FAILURE, 40, slurm_state="NODE_FAIL"), decided("9.1", runtime.COMPLETED, 60)]
    ends = {"9.0": _iso(T0 + 22)}  # the agent marked it DOWN, Slurm requeued the job
    ledger = build("9", T0, T0 + 60, made, tries, ends)
    assert seconds(ledger)["detection"] == 8.0 and seconds(ledger)["recovery"] == (41 - 22) + (50 - 41)
    assert seconds(ledger)["lost_work"] == pytest.approx(2 * 9 / 9)  # steps 9 and 10 computed again


@pytest.mark.parametrize("case", sorted(path.name for path in FIXTURES.iterdir()) if FIXTURES.is_dir() else [])
def test_recorded_runs_add_up_to_their_wall_clock_and_say_what_happened(case: str):
    """Records of real runs on a local cluster at ParallelCluster's timings (the hang, the relaunch on a spare and
    the lost batch host of tests/resilience/test_beacons_local.py)."""
    directory = FIXTURES / case
    job = json.loads((directory / "job.json").read_text())
    made = runtime.parse_decisions((directory / "decisions.jsonl").read_bytes())
    tries = parse_tries(runtime.parse_decisions((directory / "tries.jsonl").read_bytes()))
    ends = {f"{job['job_id']}.{a['attempt']}": a["end"] for a in job["attempts"]}
    ledger = build(job["job_id"], parse_time(job["submitted"]), parse_time(job["attempts"][-1]["end"]), made, tries,
                   ends)
    assert abs(sum(ledger.categories.values()) - ledger.wall_s) < 1e-6
    assert ledger.to_dict()["categories"] == job["ledger"]["categories"]  # what the run's own goodput() said
    found = seconds(ledger)
    expected = {"hang": {"hang"}, "spare-relaunch": {"detection", "recovery"},
                "batch-host-frozen": {"detection", "recovery"}}[case]
    assert expected <= set(found) and 0.05 < ledger.goodput < 0.95, found


finite = st.floats(min_value=0, max_value=500, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(finite, finite, finite, finite, st.integers(0, 50), st.integers(0, 50),
                          st.sampled_from([runtime.NODE_FAILURE, runtime.HANG, runtime.TIME_LIMIT, runtime.COMPLETED,
                                           runtime.APPLICATION_ERROR, ""]),
                          st.one_of(st.none(), finite), st.booleans()), max_size=5),
       finite, finite)
def test_spans_never_overlap_leave_a_gap_or_run_backwards(raw, submitted, length):  # noqa: ANN001
    tries, made, clock = [], [], submitted
    for index, (start, until_first, until_last, until_end, first, steps, kind, stall, relaunch) in enumerate(raw):
        attempt = f"9.{0 if relaunch else index}"
        started = clock + start
        tries.append(Try(attempt, index, (), T0 + started, T0 + started + until_first + until_last + until_end,
                         first, T0 + started + until_first, None, None, first + steps,
                         T0 + started + until_first + until_last, stall, 1))
        if kind:
            made.append(decided(attempt, kind, started + until_first + until_last + until_end / 2))
        clock = started + until_first + until_last + until_end
    end = T0 + submitted + length
    ledger = build("9", T0 + submitted, end, made, tries)
    assert ledger.start == T0 + submitted and ledger.end == max(end, ledger.start)
    at = ledger.start
    for span in ledger.spans:
        assert span.start == at and span.end > span.start and span.category in CATEGORIES
        at = span.end
    assert at == ledger.end or not ledger.spans and ledger.end == ledger.start
    assert sum(ledger.categories.values()) == pytest.approx(ledger.wall_s, abs=1e-6)


def _iso(unix: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(unix).astimezone().isoformat(timespec="seconds")


def test_a_try_ended_again_by_a_supervisor_back_from_a_cut_off_node_does_not_swallow_the_next():
    # The batch host froze after step 21: the agent marked it at t=20 (the reason's time, read back by the next
    # attempt), the next attempt closed the orphaned try, and the old supervisor, thawed at t=60, ended it again.
    lines = [{"attempt": "9.0", "try": 0, "event": "started", "time": T0},
             {"attempt": "9.0", "try": 0, "event": "ended", "time": None, "first_step": 1, "first_time": T0 + 4,
              "last_step": 21, "last_time": T0 + 8},
             {"attempt": "9.1", "try": 0, "event": "started", "time": T0 + 30},
             {"attempt": "9.1", "try": 0, "event": "ended", "time": T0 + 50, "first_step": 21, "first_time": T0 + 35,
              "resumed_from": 20, "last_step": 40, "last_time": T0 + 49},
             {"attempt": "9.0", "try": 0, "event": "ended", "time": T0 + 60, "last_step": 21, "last_time": T0 + 8}]
    made = [decided("9.0", runtime.NODE_FAILURE, 29, slurm_state="NODE_FAIL", acted_at=_iso(T0 + 20)),
            decided("9.1", runtime.COMPLETED, 50)]
    tries = parse_tries(lines)
    assert tries[0].ended is None  # the first end recorded stands
    ledger = build("9", T0, T0 + 50, made, tries)
    spent = seconds(ledger)
    assert spent["detection"] == 12.0 and spent["recovery"] == 10.0 + 5.0 and spent["productive"] == pytest.approx(3.8 + 14), spent


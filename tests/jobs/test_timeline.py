"""A run's timeline: the figure model from the records of real runs, and the picture drawn from it."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from clusterkit import runtime
from clusterkit.jobs.recoveries import Try
from clusterkit.jobs.timeline import CHECKPOINT, DECISION, FAULT, OUT, RESUME, RUN_ROW, RUNNING, build_timeline

from tests.jobs.timeline_runs import RECORDED, Run, recorded, synthetic

SVG = "{http://www.w3.org/2000/svg}"


def timeline_of(run: Run):  # noqa: ANN201
    return build_timeline(run.job_id, run.submitted, run.end, run.made, run.tries, run.attempt_ends)


def marks(row, kind: str) -> list:  # noqa: ANN001
    return [mark for mark in row.marks if mark.kind == kind]


def test_the_crashed_and_resumed_run_shows_both_attempts_the_crashed_node_its_checkpoint_and_lost_steps():
    run = recorded("batch-host-frozen")  # n1 froze in attempt 3.0 on n1,n2; Slurm requeued it onto n3,n4
    timeline = timeline_of(run)
    run_row, *nodes = timeline.rows
    assert run_row.name == RUN_ROW and [row.name for row in nodes] == ["n1", "n2", "n3", "n4"]
    by_name = {row.name: row for row in nodes}
    attempt_0, attempt_1 = run.tries
    # Both attempts, each on its nodes; attempt 3.0 ends when the failure was acted on (n1's reason's time), not
    # when its supervisor, back with its node, wrote its end.
    acted = 1796399245.0  # 2026-12-04T15:47:25, "acted_at"
    assert [(b.kind, b.start, b.end) for b in by_name["n2"].bars] == [(RUNNING, attempt_0.started, acted)]
    assert [(b.kind, b.start) for b in by_name["n3"].bars] == [(RUNNING, attempt_1.started)]
    assert "attempt 3.1" in by_name["n4"].bars[0].label and "resumed from step 20" in by_name["n4"].bars[0].label
    assert [bar.text for bar in by_name["n1"].bars] == ["3.0: steps 1-21", ""]  # the steps each try computed
    # The crashed node: its fault at its last step (21), then out of the run (marked DOWN) from when Slurm acted.
    (fault,) = marks(by_name["n1"], FAULT)
    assert fault.at == attempt_0.last_time and "last step 21" in fault.label and "liveness beacon" in fault.label
    assert [(b.kind, b.start, b.end) for b in by_name["n1"].bars][-1] == (OUT, acted, timeline.end)
    assert "marked DOWN" in by_name["n1"].bars[-1].label
    assert not marks(by_name["n2"], FAULT) and not marks(by_name["n3"], FAULT)
    # The resume where the records put it, from the checkpoint of step 20 saved in attempt 3.0, one step lost.
    (resume,) = marks(run_row, RESUME)
    assert resume.at == attempt_1.first_time and "checkpoint of step 20" in resume.label
    assert "1 step computed again" in resume.label and timeline.steps_lost == 1 and timeline.failures == 1
    (checkpoint,) = marks(run_row, CHECKPOINT)
    assert attempt_0.first_time < checkpoint.at < attempt_0.last_time and "step 20" in checkpoint.label
    decided = marks(run_row, DECISION)
    assert [m.at for m in decided][0] == acted and "node failure" in decided[0].label
    # The run's row is the ledger: the wait for the replacement attempt shows as recovery, lost work as lost work.
    kinds = [bar.kind for bar in run_row.bars]
    assert kinds[0] == "queued" and "detection" in kinds and "recovery" in kinds and "lost_work" in kinds
    assert sum(bar.end - bar.start for bar in run_row.bars) == pytest.approx(timeline.ledger.wall_s)


@pytest.mark.parametrize(("case", "nodes", "faulty", "lost"), [
    ("spare-relaunch", ["n1", "n2", "n3"], {"n2"}, 1),  # n2 lost; relaunched on n1 and the spare n3
    ("hang", ["n3", "n4"], {"n3", "n4"}, 5),  # a hang names no node: every node of the hung try is marked
])
def test_recorded_runs_have_a_row_per_node_and_their_fault_where_the_records_put_it(case, nodes, faulty, lost):
    run = recorded(case)
    timeline = timeline_of(run)
    assert [row.name for row in timeline.rows] == [RUN_ROW, *nodes]
    failed, resumed = run.tries
    assert {row.name for row in timeline.rows[1:] if [m.at for m in marks(row, FAULT)] == [failed.last_time]} \
        == faulty
    assert [m.at for m in marks(timeline.rows[0], RESUME)] == [resumed.first_time]
    assert timeline.steps_lost == lost == failed.last_step - resumed.resumed_from


def test_a_try_without_a_recorded_end_runs_until_the_next_try_or_the_run_end():
    tries = [Try("5.0", 0, ("a",), 100.0, None, 1, 110.0, None, None, 10, 120.0),
             Try("5.1", 0, ("b",), 200.0, None, 11, 210.0, 10, None, 20, 220.0)]
    timeline = build_timeline("5", 90.0, 230.0, [], tries)
    assert [(row.name, [(b.start, b.end) for b in row.bars]) for row in timeline.rows[1:]] == [
        ("a", [(100.0, 200.0)]), ("b", [(200.0, 230.0)])]


def test_a_run_started_again_from_the_beginning_lost_every_step_it_had_computed():
    tries = [Try("5.0", 0, ("a",), 100.0, 130.0, 1, 110.0, None, None, 10, 120.0),
             Try("5.1", 0, ("a",), 200.0, 230.0, 1, 210.0, None, None, 10, 220.0)]
    made = [{"attempt": "5.0", "decision": runtime.NODE_FAILURE, "unix": 125.0, "nodes": ["a"]}]
    timeline = build_timeline("5", 90.0, 230.0, made, tries)
    assert timeline.steps_lost == 10 and timeline.ledger.categories["lost_work"] > 0
    (resume,) = marks(timeline.rows[0], RESUME)
    assert "resumed from the beginning; 10 steps computed again" in resume.label


def test_past_64_nodes_nodes_with_one_history_share_a_row():
    run = synthetic(interruptions=3, days=1, nodes=200)
    timeline = timeline_of(run)
    assert len(timeline.nodes) == 200 and sorted(timeline.nodes) == sorted(f"p5-{i}" for i in range(1, 201))
    shared = [row for row in timeline.rows[1:] if len(row.nodes) > 1]
    assert len(shared) == 1 and shared[0].name == f"{shared[0].nodes[0]} and {len(shared[0].nodes) - 1} more"
    assert len(timeline.rows) == 1 + 1 + 3  # the run, the nodes that never failed, one row per failed node


# ---- the picture ----

def render(timeline, file_format: str):  # noqa: ANN001, ANN201
    from clusterkit.jobs.timeline_picture import render as draw

    return draw(timeline, file_format)


def svg_of(page: str) -> ET.Element:
    return ET.fromstring(page[page.index("<svg"):page.index("</svg>") + len("</svg>")])


@pytest.mark.parametrize("case", RECORDED)
def test_the_page_is_one_file_that_fetches_nothing_with_a_label_on_every_shape(case: str):
    timeline = timeline_of(recorded(case))
    page = render(timeline, "html")
    assert isinstance(page, str) and page.startswith("<!DOCTYPE html>")
    assert "default-src 'none'" in page  # the browser may fetch nothing, whatever is in it
    assert "<script" not in page and not re.search(r"""(?:src|href)=["'](?!#)""", page)
    assert not re.search(r"(?:https?|ftp)://(?!www\.w3\.org/)", page)  # only XML namespaces name a URL
    svg = svg_of(page)
    rows = [g for g in svg.iter(f"{SVG}g") if g.get("id", "").startswith("row-")]
    assert len(rows) == len(timeline.rows) == 1 + len(timeline.nodes)
    for group in svg.iter(f"{SVG}g"):
        if group.get("id", "").startswith(("bars-", "marks-")):
            shapes = [e for e in group.iter() if e.tag in (f"{SVG}path", f"{SVG}use") and e.find(f"{SVG}title")
                      is not None]
            assert shapes, group.get("id")
    titles = [t.text or "" for t in svg.iter(f"{SVG}title")]
    assert any("liveness beacon" in t or "no progress past step" in t for t in titles)  # the evidence on hover
    assert any(t.startswith("n") and "attempt" in t for t in titles)


def test_png_and_svg_for_reports():
    timeline = timeline_of(recorded("batch-host-frozen"))
    texts = [t.text for t in ET.fromstring(render(timeline, "svg")).iter(f"{SVG}text")]
    assert texts.count("3.0: steps 1-21") == 2 and texts.count("3.1: steps 21-40") == 2  # on n1, n2; n3, n4
    png = render(timeline, "png")
    assert isinstance(png, bytes) and png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) < 200_000
    svg = render(timeline, "svg")
    assert isinstance(svg, str) and ET.fromstring(svg).tag == f"{SVG}svg"
    assert render(timeline, "svg") == svg  # the same records, the same picture


HOSTILE = ["<script>alert(1)</script>", "$x^2$", "a\u2028b", "c\x01d", "e\x9bf", "\ud800", "$(rm -rf ~)", "x" * 5000]


def test_hostile_node_names_and_evidence_are_shown_as_text():
    tries = [Try("7.0", 0, tuple(HOSTILE), 100.0, 150.0, 1, 110.0, None, None, 10, 120.0),
             Try("7.1", 0, ("ok",), 200.0, 250.0, 6, 210.0, 5, None, 20, 240.0)]
    made = [{"attempt": "7.0", "decision": runtime.NODE_FAILURE, "unix": 140.0, "nodes": HOSTILE[:3],
             "marked_down": HOSTILE[:1], "evidence": "</title><script>alert(2)</script>\x00" + "y" * 100_000}]
    timeline = build_timeline("7", 90.0, 260.0, made, tries)
    page = render(timeline, "html")
    page.encode("utf-8")  # no lone surrogate left
    assert "<script>" not in page and "\x01" not in page and "\u2028" not in page and "\x9b" not in page
    assert len(page) < 300_000  # 100,000 characters of evidence, cut
    labels = [t.text or "" for t in svg_of(page).iter(f"{SVG}title")]
    assert any("<script>alert(2)" in label for label in labels)  # as text, escaped in the page
    texts = "".join(t.text or "" for t in svg_of(page).iter(f"{SVG}text"))
    assert "$x^2$" in texts and "\\u2028" in texts  # no mathematics made of a name; the control shown escaped
    assert render(timeline, "png")[:4] == b"\x89PNG"


@pytest.mark.parametrize("nodes", [128, pytest.param(2048, marks=pytest.mark.slow)])
def test_466_interruptions_over_54_days_draw_into_a_page_under_2_mb(nodes: int):
    """Llama 3 405B's count of interruptions over its 54 days. Its time (budget 2 s) is bench/bench_timeline.py's
    to measure, in a fresh process: a timed test would fail on a loaded machine, not on slow code."""
    timeline = timeline_of(synthetic(nodes=nodes))
    page = render(timeline, "html")
    assert timeline.failures == 466 and len(timeline.ledger.spans) > 2 * 466 and len(timeline.nodes) == nodes
    assert len(page.encode()) <= 2_000_000

"""A run's timeline (jobs.timeline) drawn: one self-contained HTML page, an SVG or a PNG.

Drawn with matplotlib (docs/architecture.md says why): its SVG holds the picture as vector shapes, so the HTML page
is that SVG inline with a table of the ledger, without a line of script, and opens air-gapped or as an attachment
(its Content-Security-Policy lets it fetch nothing). Each bar and mark carries its label as an SVG <title>: a
browser shows it on hover. matplotlib is imported here, inside the functions, and only by `clusterkit timeline`
and `handle.timeline()`.
"""

from __future__ import annotations

import io
import re
from html import escape
from typing import TYPE_CHECKING

from clusterkit.findings import escape_controls, shorten
from clusterkit.goodput.categories import (
    CATEGORIES,
    CHECKPOINT_STALL,
    DETECTION,
    HANG,
    LOST_WORK,
    OTHER,
    PRODUCTIVE,
    QUEUED,
    RECOVERY,
)
from clusterkit.jobs.timeline import CHECKPOINT, DECISION, FAULT, OUT, RESUME, RUN_ROW, RUNNING, Bar, Timeline

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FORMATS = ("html", "png", "svg")
COLOURS = {PRODUCTIVE: "#2e7d32", LOST_WORK: "#d32f2f", CHECKPOINT_STALL: "#fbc02d", DETECTION: "#f57c00",
           RECOVERY: "#7b1fa2", QUEUED: "#90a4ae", HANG: "#c2185b", OTHER: "#d7ccc8",
           RUNNING: "#1976d2", OUT: "#424242"}
NAMES = {RUNNING: "a try running on the node", OUT: "node out of the run (DOWN or drained)"}
MARKS = {FAULT: ("X", "#b71c1c", "fault: the last step before it"), DECISION: ("v", "#212121", "decision"),
         RESUME: (">", "#1b5e20", "resume"), CHECKPOINT: ("D", "#0277bd", "checkpoint a resume loaded")}
LABEL_CHARS = 600  # a label on hover: evidence can be long
PIXELS = 1600  # bars closer than a pixel's time on a row of this many are drawn as one
AXES_PIXELS, CHARACTER_PIXELS = 1000, 6  # about: the axes' width at 100 dpi, a character of a bar's text
SVG = "http://www.w3.org/2000/svg"
COORDINATE = re.compile(r"(\.\d\d)\d+")


def render(timeline: Timeline, file_format: str) -> str | bytes:
    """The picture as an HTML page or SVG (text) or PNG (bytes)."""
    from matplotlib import rc_context

    if file_format not in FORMATS:
        raise ValueError(f"unknown format {file_format!r}")
    # Text as given (a node named "$x$" is not mathematics) and as text in the SVG; ids the same from run to run.
    with rc_context({"text.parse_math": False, "svg.fonttype": "none", "svg.hashsalt": "clusterkit",
                     "font.sans-serif": ["DejaVu Sans"]}):  # matplotlib's own font, named once per text
        figure, tips = _figure(timeline)
        if file_format == "png":
            data = io.BytesIO()
            figure.savefig(data, format="png", dpi=100, metadata={"Software": None})
            return data.getvalue()
        svg = _with_titles(_svg_of(figure), tips)
    return svg if file_format == "svg" else page(timeline, svg)


def page(timeline: Timeline, svg: str) -> str:
    """The HTML page: the summary, the picture and the ledger's table; nothing to fetch, no script."""
    seconds = timeline.ledger.categories
    wall = timeline.ledger.wall_s
    rows = "".join(f'<tr><td><span class="key" style="background:{COLOURS[name]}"></span>{escape(name)}</td>'
                   f"<td>{value:,.1f}</td><td>{value / wall:.1%}</td></tr>" if wall else ""
                   for name, value in seconds.items())
    title = escape(_shown(f"clusterkit timeline: job {timeline.job_id}"))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>{title}</title><style>body{{font-family:sans-serif;margin:1em}}"
            "table{border-collapse:collapse}td,th{padding:2px 10px;text-align:right}td:first-child{text-align:left}"
            ".key{display:inline-block;width:.8em;height:.8em;margin-right:.4em}svg{max-width:100%;height:auto}"
            "</style></head><body>"
            f"<h1>{title}</h1><p id=\"summary\">{escape(_shown(timeline.summary()))}</p>"
            f"<figure id=\"timeline\">{svg}</figure>"
            "<p>Hover over a bar or a mark for what the run's records say of it. Times are UTC.</p>"
            f"<table id=\"ledger\"><tr><th>category</th><th>seconds</th><th>share</th></tr>{rows}</table>"
            "</body></html>\n")


def _figure(timeline: Timeline) -> tuple[Figure, dict[str, list[str]]]:
    """The matplotlib figure, and each group's labels (by its SVG id) in the order its shapes are drawn."""
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    scale, unit = _scale(timeline.end - timeline.start)
    rows = timeline.rows
    tips: dict[str, list[str]] = {}
    # Margins in inches from what goes in them, not measured by a layout engine: measuring hundreds of node names
    # took longer than drawing the run.
    names = max(len(_row_name(row.name)) for row in rows)
    left, right, top, bottom, row_height = 0.3 + 0.075 * names, 0.3, 0.4, 1.2, 0.3
    width, height = 12.0, top + bottom + row_height * len(rows)
    figure = Figure(figsize=(width, height))
    axes = figure.add_axes((left / width, bottom / height, 1 - (left + right) / width, 1 - (top + bottom) / height))
    shapes: dict[str, list[list[tuple[float, float]]]] = {}
    wall = max(timeline.end - timeline.start, 1e-9)
    for y, row in enumerate(rows):
        for bar in _coalesced(row.bars, (timeline.end - timeline.start) / PIXELS):
            left, right = (bar.start - timeline.start) / scale, (bar.end - timeline.start) / scale
            top, bottom = y - 0.38, y + 0.38
            shapes.setdefault(bar.kind, []).append([(left, top), (right, top), (right, bottom), (left, bottom)])
            if bar.text and (bar.end - bar.start) / wall * AXES_PIXELS > CHARACTER_PIXELS * len(bar.text):
                axes.text((left + right) / 2, y, _shown(bar.text, 80), ha="center", va="center", fontsize=8,
                          color="#ffffff", clip_on=True)
            tips.setdefault(f"bars-{bar.kind}", []).append(_label(row.name, f"{_when(bar, timeline)}: {bar.label}"))
    for kind, rectangles in shapes.items():
        axes.add_collection(PolyCollection(rectangles, facecolors=COLOURS.get(kind, "#9e9e9e"), linewidths=0,
                                           hatch="//" if kind == OUT else None, edgecolors="#ffffff",
                                           gid=f"bars-{kind}"))
    lost = [bar for bar in rows[0].bars if bar.kind == LOST_WORK]
    if lost:  # the work lost, shaded across every row
        axes.add_collection(PolyCollection(
            [[((b.start - timeline.start) / scale, -0.5), ((b.end - timeline.start) / scale, -0.5),
              ((b.end - timeline.start) / scale, len(rows) - 0.5), ((b.start - timeline.start) / scale,
                                                                   len(rows) - 0.5)] for b in lost],
            facecolors=COLOURS[LOST_WORK], alpha=0.15, linewidths=0, gid="band-lost_work"))
        tips["band-lost_work"] = [_label(RUN_ROW, f"{_when(bar, timeline)}: {bar.label}") for bar in lost]
    for kind, (marker, colour, _) in MARKS.items():
        found = [(y, mark) for y, row in enumerate(rows) for mark in row.marks if mark.kind == kind]
        if found:
            axes.scatter([(m.at - timeline.start) / scale for _, m in found], [y for y, _ in found],
                         marker=marker, s=70, c=colour, edgecolors="#ffffff", linewidths=0.6, zorder=3,
                         gid=f"marks-{kind}")
            tips[f"marks-{kind}"] = [_label(rows[y].name, m.label) for y, m in found]
    _axes(axes, timeline, scale, unit)
    kinds = {bar.kind for row in rows for bar in row.bars}
    handles = [Patch(facecolor=COLOURS[k], label=NAMES.get(k, k.replace("_", " ")),
                     hatch="//" if k == OUT else None)
               for k in (*CATEGORIES, RUNNING, OUT) if k in kinds]
    handles += [Line2D([], [], linestyle="", marker=marker, color=colour, label=what, markersize=8)
                for kind, (marker, colour, what) in MARKS.items() if f"marks-{kind}" in tips]
    figure.legend(handles=handles, loc="lower center", ncols=6, frameon=False, fontsize=8)
    return figure, tips


def _axes(axes: Axes, timeline: Timeline, scale: float, unit: str) -> None:
    import datetime as dt

    rows = timeline.rows
    last = max([timeline.end, *(mark.at for row in rows for mark in row.marks)])  # a decision after the end
    axes.set_xlim(0, max((last - timeline.start) / scale, 1e-9))
    axes.set_ylim(len(rows) - 0.5, -0.5)
    axes.set_yticks(range(len(rows)), labels=[_row_name(row.name) for row in rows])
    for index, label in enumerate(axes.get_yticklabels()):
        label.set_gid(f"row-{index}")
    submitted = dt.datetime.fromtimestamp(timeline.start, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    axes.set_xlabel(f"{unit} since the submission, {submitted} UTC")
    axes.set_title(_shown(timeline.summary(), 160), fontsize=10, loc="left")
    axes.grid(axis="x", color="#eeeeee")
    axes.set_axisbelow(True)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)


def _row_name(name: str) -> str:
    return _shown("run (goodput)" if name == RUN_ROW else name, 40)


def _coalesced(bars: tuple[Bar, ...], resolution: float) -> list[Bar]:
    """The row's bars, those of one kind less than `resolution` apart drawn as one (a 54-day run's tries are hours
    long and minutes apart: no one sees the gaps, and thousands of shapes make a slow, large page)."""
    runs: list[list[Bar]] = []
    for bar in sorted(bars, key=lambda b: (b.kind, b.start)):
        last = runs[-1][-1] if runs else None
        gap = bar.start - last.end if last is not None else resolution
        # Merged: a gap no one sees between two bars, or a bar too thin to see; bars that touch stay two.
        if last is not None and last.kind == bar.kind and gap < resolution and \
                (gap > 0 or bar.end - bar.start < resolution):
            runs[-1].append(bar)
        else:
            runs.append([bar])
    return [run[0] if len(run) == 1 else
            Bar(run[0].start, max(bar.end for bar in run), run[0].kind,
                f"{len(run)} of these drawn as one, the first: {run[0].label}") for run in runs]


def _when(bar: Bar, timeline: Timeline) -> str:
    """A bar's stretch as a person reads it: the times of day (with the date in a run of more than a day), and
    how long."""
    import datetime as dt

    form = "%H:%M:%S" if timeline.end - timeline.start < 86400 else "%m-%d %H:%M:%S"
    start, end = (dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime(form) for t in (bar.start, bar.end))
    return f"{start} to {end} ({_seconds(bar.end - bar.start)})"


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min" if seconds < 7200 else \
        f"{seconds / 3600:.1f} h"


def _scale(seconds: float) -> tuple[float, str]:
    for limit, scale, unit in ((180, 1, "seconds"), (3 * 3600, 60, "minutes"), (3 * 86400, 3600, "hours")):
        if seconds < limit:
            return scale, unit
    return 86400, "days"


def _shown(text: str, limit: int = LABEL_CHARS) -> str:
    """Text fit for a picture: control characters escaped, no lone surrogate, long text cut."""
    cleaned = escape_controls(text).encode("utf-8", "replace").decode("utf-8")
    return str(shorten(cleaned, limit))


def _label(row: str, text: str) -> str:
    return _shown(text if row == RUN_ROW else f"{row}: {text}")


def _svg_of(figure: Figure) -> str:
    data = io.StringIO()
    figure.savefig(data, format="svg", metadata={"Date": None})
    return data.getvalue()


def _with_titles(svg: str, tips: dict[str, list[str]]) -> str:
    """The SVG with each shape of each labelled group carrying its label as a <title> (shown on hover)."""
    import xml.etree.ElementTree as ET

    ET.register_namespace("", SVG)
    ET.register_namespace("xlink", "http://www.w3.org/1999/xlink")
    root = ET.fromstring(svg)
    for metadata in root.findall(f"{{{SVG}}}metadata"):  # matplotlib's RDF: namespaces that look like links
        root.remove(metadata)
    for group in root.iter(f"{{{SVG}}}g"):
        labels = tips.get(group.get("id", ""))
        if labels is None:
            continue
        templates = _definitions(group)
        shapes = [element for element in group.iter() if element.tag in (f"{{{SVG}}}path", f"{{{SVG}}}use")
                  and element not in templates]
        if len(shapes) != len(labels):
            raise RuntimeError(f"{group.get('id')}: {len(shapes)} shapes drawn for {len(labels)} labels")
        for shape, label in zip(shapes, labels):
            ET.SubElement(shape, f"{{{SVG}}}title").text = label
        for name in ("clip-path", "style"):  # one for the group, not one a shape: a smaller page
            values = {shape.get(name) for shape in shapes}
            if len(values) == 1 and None not in values and group.get(name) is None:
                group.set(name, values.pop() or "")
                for shape in shapes:
                    del shape.attrib[name]
        for shape in shapes:  # a hundredth of a point is finer than any screen
            if "d" in shape.attrib:
                shape.set("d", COORDINATE.sub(r"\1", shape.attrib["d"]))
    return ET.tostring(root, encoding="unicode")


def _definitions(group: ET.Element) -> set[ET.Element]:
    """The shapes inside a group's <defs>: templates its <use> elements draw, not shapes of their own."""
    return {element for definitions in group.iter(f"{{{SVG}}}defs") for element in definitions.iter()}


def format_of(path: str | None, given: str | None) -> str:
    """The format to write: `given` (--format), else the file's suffix, else html; a suffix that says another
    format than `given` is refused rather than written as a misnamed file."""
    from clusterkit.errors import ClusterkitError

    if given is not None and given not in FORMATS:
        raise ClusterkitError(f"--format {given!r}: not a format of the timeline", fix="give html, png or svg")
    suffix = (path or "").rpartition(".")[2].lower() if "." in (path or "") else ""
    said = {"htm": "html", "html": "html", "png": "png", "svg": "svg"}.get(suffix)
    if given is not None and said is not None and said != given:
        raise ClusterkitError(f"--output-file {path!r} names a .{suffix} file but --format is {given}",
                              fix=f"name a .{given} file, or leave --format out")
    return given or said or "html"


class TimelinePicture:
    """A run's timeline for a notebook (shown inline) and for files: `save(path)` writes the HTML page, a PNG or
    an SVG (by the path's suffix, or `file_format`)."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline

    def __repr__(self) -> str:
        return f"TimelinePicture({self.timeline.summary()!r})"

    def _repr_html_(self) -> str:
        svg = render(self.timeline, "svg")
        return f"<div><p>{escape(_shown(self.timeline.summary()))}</p>{svg}</div>"

    def render(self, file_format: str = "html") -> str | bytes:
        return render(self.timeline, file_format)

    def save(self, path: str, file_format: str | None = None) -> str:
        """Write the picture to `path` (only ever a regular file, whole or not at all); returns its format."""
        from clusterkit.files import check_outputs, write_user_file

        check_outputs([("path", path)], stdout_busy="a notebook has no stdout to write a picture to")
        chosen = format_of(path, file_format)
        write_user_file(path, render(self.timeline, chosen))
        return chosen

"""The timeline page in a real browser: headless Chromium, offline, opens the crashed and resumed run's page with a
row per node, the fault and the resume, no console message and no request of its own, and paints a picture.

Chromium comes from Debian (`apt-get install chromium`, scripts/setup-dev.sh). Without it the test is skipped here
and fails in CI (CI=true), where a skip would hide a missing install. The browser's own background requests
(updates, accounts) resolve nowhere; the page's requests are told apart by their site, file://.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from clusterkit.jobs.timeline import build_timeline
from clusterkit.jobs.timeline_picture import render

from tests.jobs.timeline_runs import recorded

OFFLINE = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
           "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0", "--window-size=1400,900"]


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("no chromium in CI: scripts/setup-dev.sh installs it (apt-get install chromium)")
        pytest.skip("no chromium here: apt-get install chromium")
    return found


class Opened:
    def __init__(self, result: subprocess.CompletedProcess[str], net_log: Path) -> None:
        self.dom = result.stdout
        self.console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
        events = json.loads(net_log.read_text(errors="replace") or "{}").get("events", []) if net_log.exists() else []
        # A request the page made: its site for cookies is the page's, file://.
        self.requests = sorted({str(e["params"].get("url")) for e in events if isinstance(e.get("params"), dict)
                                and "site=file://" in str(e["params"].get("site_for_cookies", ""))})


def open_in(chromium: str, page: Path, tmp_path: Path, action: str) -> Opened:
    """`page` opened in a fresh profile, offline; `action`: --dump-dom or --screenshot=PATH."""
    profile = Path(os.path.join(tmp_path, f"profile-{len(list(tmp_path.iterdir()))}"))
    net_log = profile.with_suffix(".netlog.json")
    result = subprocess.run([chromium, *OFFLINE, f"--user-data-dir={profile}", f"--log-net-log={net_log}", action,
                             page.as_uri()], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    return Opened(result, net_log)


def test_the_checks_see_a_console_message_and_a_request_of_the_page(chromium, tmp_path):
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><p>x</p><script>console.error("planted")</script>'
                    '<img src="http://timeline.invalid/y.png">')
    opened = open_in(chromium, page, tmp_path, "--dump-dom")
    assert any('"planted"' in line for line in opened.console)
    assert opened.requests == ["http://timeline.invalid/y.png"]


def test_the_crashed_and_resumed_run_in_a_browser(chromium, tmp_path):
    from PIL import Image

    run = recorded("batch-host-frozen")
    timeline = build_timeline(run.job_id, run.submitted, run.end, run.made, run.tries, run.attempt_ends)
    page = tmp_path / "run.html"
    page.write_text(str(render(timeline, "html")))
    opened = open_in(chromium, page, tmp_path, "--dump-dom")
    assert opened.console == [] and opened.requests == []
    rows = re.findall(r'<g id="row-(\d+)">\s*<text[^>]*>([^<]*)</text>', opened.dom)
    assert [name for _, name in rows] == ["run (goodput)", "n1", "n2", "n3", "n4"]  # one row per node of the run
    titles = re.findall(r"<title>([^<]*)</title>", opened.dom)
    assert any(t.startswith("n1: last step 21") and "liveness beacon" in t for t in titles)  # the fault, on n1
    assert any("resumed from the checkpoint of step 20" in t for t in titles)  # the resume
    assert any(t.startswith("checkpoint of step 20") for t in titles)

    shot = tmp_path / "shot.png"
    opened = open_in(chromium, page, tmp_path, f"--screenshot={shot}")
    assert opened.console == [] and opened.requests == []
    image = Image.open(shot).convert("RGB")
    counts = {colour: count for count, colour in image.getcolors(maxcolors=image.width * image.height)}
    background = image.getpixel((image.width - 1, image.height - 1))
    painted = image.width * image.height - counts[background]
    assert painted > 0.05 * image.width * image.height, painted  # not an empty page
    # The bars painted: the blue of the nodes' tries and the green of productive steps, each over many pixels.
    assert counts.get((0x19, 0x76, 0xD2), 0) > 10_000 and counts.get((0x2E, 0x7D, 0x32), 0) > 2_000, counts

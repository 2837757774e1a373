"""Golden-file comparison: `CLUSTERKIT_UPDATE_GOLDEN=1 pytest` rewrites the files."""

from __future__ import annotations

import os
from pathlib import Path


def assert_matches_golden(text: str, golden: Path) -> None:
    if os.environ.get("CLUSTERKIT_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden}: run with CLUSTERKIT_UPDATE_GOLDEN=1 once"
    assert text == golden.read_text(), f"rendered text differs from {golden} (CLUSTERKIT_UPDATE_GOLDEN=1 rewrites it)"

"""Where the data that ships with clusterkit lives: inside the wheel, or at the top of a checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Return the directory `cluster-configs` or `job-templates`, installed or from the source tree."""
    for candidate in (_PACKAGE_DIR / "_data" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"clusterkit data directory {name!r} is missing from this installation")


def job_templates_dir() -> Path:
    return data_dir("job-templates")


def cluster_configs_dir() -> Path:
    return data_dir("cluster-configs")

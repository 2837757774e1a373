"""Helpers for the job tests: spec builders (the fake Slurm binaries that run scripts are in tests/fakes.py)."""

from __future__ import annotations

from pathlib import Path

from clusterkit.jobs.spec import JobSpec, job_from_dict

REPO_ROOT = Path(__file__).resolve().parents[2]

def make_spec(**fields: object) -> JobSpec:
    """A valid spec from a few fields, through the loader (as a user's YAML would go)."""
    data: dict[str, object] = {"name": "test-job", "command": ["train.py"]}
    data.update(fields)
    return job_from_dict(data)

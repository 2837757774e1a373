"""Fixtures for the job tests."""

from pathlib import Path

import pytest

from tests.jobs.helpers import FakeSlurm, make_fake_slurm


@pytest.fixture
def fake_slurm(tmp_path: Path) -> FakeSlurm:
    """A fake srun/scontrol (and recorders of the programs steps start) on a PATH of its own."""
    return make_fake_slurm(tmp_path)

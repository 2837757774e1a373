"""A non-editable install (a built wheel) carries job-templates/ and cluster-configs/ and finds them."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(REPO)], check=True, capture_output=True)
    return next(out.glob("clusterkit-*.whl"))


def test_wheel_ships_templates_and_example_configs(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for expected in ("clusterkit/_data/job-templates/sbatch/job.sbatch.j2",
                     "clusterkit/_data/job-templates/containers/gpu.Dockerfile.j2",
                     "clusterkit/_data/cluster-configs/p4de.yaml"):
        assert expected in names


def test_installed_wheel_renders_from_its_own_data(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                    str(wheel)], check=True, capture_output=True)
    code = ("import clusterkit.resources as r, clusterkit.jobs.render as j, clusterkit.jobs.spec as s; "
            "print(r.job_templates_dir()); "
            "print(j.render_sbatch(s.job_from_dict({'name': 'x', 'command': ['true'], 'launcher': 'srun'}))[:11])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                            env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    templates, script = result.stdout.splitlines()[:2]
    assert templates.startswith(str(target)) and script == "#!/bin/bash"

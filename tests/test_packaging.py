"""A non-editable install (a built wheel) carries its data (job-templates/, cluster-configs/, node-scripts/,
the instance offerings table) and finds it."""

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
                     "clusterkit/_data/cluster-configs/p4de.yaml",
                     "clusterkit/_data/node-scripts/pyxis-enroot.sh",
                     "clusterkit/_data/node-scripts/neuron.sh",
                     "clusterkit/data/instance-offerings.tsv"):
        assert expected in names
    for script in ("pyxis-enroot.sh", "neuron.sh"):  # ParallelCluster runs them directly: executable
        mode = zipfile.ZipFile(wheel).getinfo(f"clusterkit/_data/node-scripts/{script}").external_attr >> 16
        assert mode & 0o111


def test_installed_wheel_renders_from_its_own_data(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                    str(wheel)], check=True, capture_output=True)
    code = ("import clusterkit.resources as r, clusterkit.jobs.render as j, clusterkit.jobs.spec as s; "
            "print(r.job_templates_dir()); "
            "print(j.render_sbatch(s.job_from_dict({'name': 'x', 'command': ['true'], 'launcher': 'srun'}))[:11]); "
            "import clusterkit.cluster.node_scripts as n, clusterkit.offerings as o; "
            "print(n.node_script('pyxis-enroot.sh').path); print(len(o.table().types))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                            env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    templates, script, node_script, types = result.stdout.splitlines()[:4]
    assert templates.startswith(str(target)) and script == "#!/bin/bash"
    assert node_script.startswith(str(target)) and int(types) > 1000

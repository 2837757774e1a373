"""The example notebook runs top to bottom against a real local cluster (as CI runs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "local_cluster.ipynb"


def test_example_notebook_executes(local_cluster):
    # The shared cluster fixture makes sure this machine can run Slurm; the notebook starts its own.
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    try:
        client.execute()
    finally:
        from clusterkit import registry

        if registry.exists("notebook"):
            from clusterkit.providers.local import LocalCluster

            LocalCluster.get("notebook").delete()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "\n".join(str(o.get("data", {}).get("text/plain", "")) + o.get("text", "") for o in outputs)
    assert "'loss':" in text and "COMPLETED" in text
    assert "[0, 1, 4, 9, 16, 25, 36, 49]" in text  # the array run on the cluster reached over SSH
    html = "\n".join(str(o.get("data", {}).get("text/html", "")) for o in outputs)
    assert "<b>job " in html and "why it ended" in html and "completed" in html  # the handle's table

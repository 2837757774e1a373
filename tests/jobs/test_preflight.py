"""Preflight rules that read srun's help: pyxis must be loaded, and know --container-env (without it
the image's environment beats the job's)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from clusterkit.jobs import preflight

from tests.jobs.helpers import make_spec


class SrunHelp:
    def __init__(self, text: str) -> None:
        self.text = text

    def run(self, command: str, *args: str, **_: object) -> subprocess.CompletedProcess[str]:
        assert (command, args) == ("srun", ("--help",))
        return subprocess.CompletedProcess([command, *args], 0, self.text, "")


PYXIS_SPEC = make_spec(container={"runtime": "pyxis", "image": "/fsx/i.sqsh", "mounts": ["/fsx"]})


@pytest.mark.parametrize(("help_text", "problem"), [
    ("  --container-image=IMAGE\n  --container-env=NAME[,NAME...]\n", None),
    ("  --container-image=IMAGE\n", "no --container-env"),
    ("  --mpi=TYPE\n", "not loaded"),
])
def test_pyxis_must_be_loaded_and_know_container_env(help_text: str, problem: str | None) -> None:
    findings = preflight.pyxis(PYXIS_SPEC, SrunHelp(help_text), {}, Path("."))
    if problem is None:
        assert findings == []
    else:
        (finding,) = findings
        assert finding.path == "container.runtime" and problem in finding.message and finding.fix


def test_other_runtimes_do_not_ask_srun() -> None:
    assert preflight.pyxis(make_spec(), SrunHelp(""), {}, Path(".")) == []

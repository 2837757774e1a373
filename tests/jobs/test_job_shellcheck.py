"""Every runtime x launcher combination renders a script shellcheck has nothing to say about."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.jobs.render import render_sbatch
from clusterkit.jobs.spec import LAUNCHERS, RUNTIMES

from tests.jobs.helpers import make_spec
from tests.tools import shellcheck

# SC2016 ("expressions don't expand in single quotes"): a user's value containing `$` is
# single-quoted precisely so that it stays literal.
EXCLUDED_CHECKS = "SC2016"


def combination_spec(runtime: str, launcher: str, instance: str, spares: int = 0):
    container = {"runtime": runtime}
    if runtime != "none":
        container.update(image="/fsx/images/train.sqsh" if runtime == "pyxis" else "example.com/train:1",
                         mounts=["/fsx", "/data:/data:ro"], workdir="/fsx/work")
    return make_spec(
        name=f"{runtime}-{launcher}-{instance}", instance=instance, nodes=2, exclusive=True,
        launcher=launcher, container=container, command=["train.py", "--message", "it's $HOME"],
        env={"EXTRA": "a b"}, time="01:00:00", signal="USR1@120", checkpoint_dir="/fsx/ckpt",
        run_id="run-1", max_restarts=3, gpus_per_node=8 if instance == "p4de" else None,
        sbatch=["--comment=hello world"], **({"supervise": {"spares": spares}} if spares else {}),
    )


COMBINATIONS = [
    (runtime, launcher, "trn1" if launcher == "neuron" else instance)
    for runtime in RUNTIMES for launcher in LAUNCHERS for instance in ("p4de", "local")
    if not (launcher == "neuron" and instance == "local")
] + [(runtime, "neuron", "trn2.48xlarge") for runtime in RUNTIMES]  # the logical NeuronCore size is exported
# Supervised with a spare node: the step's srun runs on the nodes the supervisor names.
SPARES_COMBINATIONS = [(runtime, launcher, "trn1" if launcher == "neuron" else "p4de")
                       for runtime in RUNTIMES for launcher in LAUNCHERS]


@pytest.fixture(scope="module")
def shellcheck_findings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """Render all combinations and run shellcheck once over all of them (it is slow to start)."""
    directory = tmp_path_factory.mktemp("scripts")
    paths = []
    for runtime, launcher, instance in COMBINATIONS:
        path = directory / f"{runtime}-{launcher}-{instance}.sbatch"
        path.write_text(render_sbatch(combination_spec(runtime, launcher, instance)))
        paths.append(path)
    for runtime, launcher, instance in SPARES_COMBINATIONS:
        path = directory / f"{runtime}-{launcher}-{instance}-spares.sbatch"
        path.write_text(render_sbatch(combination_spec(runtime, launcher, instance, spares=1)))
        paths.append(path)
    return shellcheck(paths, EXCLUDED_CHECKS)


@pytest.mark.parametrize(("runtime", "launcher", "instance"), COMBINATIONS)
def test_shellcheck_is_clean(shellcheck_findings: dict[str, list[dict]], runtime: str, launcher: str,
                             instance: str) -> None:
    findings = shellcheck_findings[f"{runtime}-{launcher}-{instance}.sbatch"]
    assert findings == [], "\n".join(f"line {f['line']}: SC{f['code']} {f['message']}" for f in findings)


@pytest.mark.parametrize(("runtime", "launcher", "instance"), SPARES_COMBINATIONS)
def test_shellcheck_is_clean_with_spares(shellcheck_findings: dict[str, list[dict]], runtime: str, launcher: str,
                                         instance: str) -> None:
    findings = shellcheck_findings[f"{runtime}-{launcher}-{instance}-spares.sbatch"]
    assert findings == [], "\n".join(f"line {f['line']}: SC{f['code']} {f['message']}" for f in findings)


def test_shellcheck_catches_a_broken_script(tmp_path: Path) -> None:
    # Guards the test itself: an unquoted expansion must be reported.
    path = tmp_path / "broken.sbatch"
    path.write_text("#!/bin/bash\nrm $1\n")
    assert [finding["code"] for finding in shellcheck([path])["broken.sbatch"]] == [2086]

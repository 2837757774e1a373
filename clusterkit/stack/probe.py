"""The edge between the doctor's checks and a node: commands, files under a root, globs, libraries.

`SystemProbe` looks at the machine it runs on (or inside the container it runs in). `RecordedProbe`
reads a fake system root and answers commands from recorded outputs, so every check can be tested
without a GPU: `ROOT/.commands/<argv joined by '__'>` holds what that command printed.
"""

from __future__ import annotations

import glob as globbing
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

COMMAND_TIMEOUT_S = 30
RECORDED_COMMANDS_DIR = ".commands"
# First line of a recorded output that names where it came from; not part of the output.
SOURCE_PREFIX = "SOURCE:"

# Prints "<torch version> <cuda available> <device count>"; run in a child process so that a
# broken CUDA or torch install cannot take the doctor down with it.
TORCH_DEVICES_CODE = (
    "import torch; print(torch.__version__, torch.cuda.is_available(), torch.cuda.device_count())"
)


class Probe(Protocol):
    """What the checks may ask of a node. Paths are absolute paths on the node."""

    environ: Mapping[str, str]

    def run(self, argv: Sequence[str]) -> str | None:
        """The command's output (stdout, then stderr), or None when the program is not there."""

    def read_text(self, path: str) -> str | None:
        """A file's text, or None when it is missing or unreadable."""

    def glob(self, pattern: str) -> list[str]:
        """Paths matching `pattern`, sorted."""

    def load_library(self, path: str) -> str | None:
        """None when the shared library loads, else why it does not."""

    def torch_devices(self) -> str | None:
        """The output of TORCH_DEVICES_CODE, or None when torch cannot be imported."""


class SystemProbe:
    """This machine, with files read under `root` (a copy of a node's tree works for files)."""

    def __init__(self, root: str | Path = "/", environ: Mapping[str, str] | None = None) -> None:
        self.root = Path(root)
        self.environ = dict(os.environ if environ is None else environ)

    def _path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def run(self, argv: Sequence[str]) -> str | None:
        program = shutil.which(argv[0], path=self.environ.get("PATH"))
        if program is None:
            return None
        try:
            completed = subprocess.run([program, *argv[1:]], capture_output=True, text=True, errors="replace",
                                       timeout=COMMAND_TIMEOUT_S, env=dict(self.environ))
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{argv[0]} failed to run: {error}"
        return completed.stdout + completed.stderr

    def read_text(self, path: str) -> str | None:
        try:
            return self._path(path).read_text(errors="replace")
        except OSError:
            return None

    def glob(self, pattern: str) -> list[str]:
        prefix = str(self.root).rstrip("/")
        return sorted(match[len(prefix):] if prefix else match
                      for match in globbing.glob(str(self._path(pattern))))

    def load_library(self, path: str) -> str | None:
        # A child process: a library whose constructor crashes must not crash the doctor.
        code = "import ctypes, sys; ctypes.CDLL(sys.argv[1])"
        try:
            completed = subprocess.run([sys.executable, "-c", code, str(self._path(path))], capture_output=True,
                                       text=True, timeout=COMMAND_TIMEOUT_S, env=dict(self.environ))
        except (OSError, subprocess.TimeoutExpired) as error:
            return str(error)
        if completed.returncode == 0:
            return None
        lines = completed.stderr.strip().splitlines()
        return lines[-1] if lines else f"exit status {completed.returncode}"

    def torch_devices(self) -> str | None:
        try:
            completed = subprocess.run([sys.executable, "-c", TORCH_DEVICES_CODE], capture_output=True, text=True,
                                       timeout=COMMAND_TIMEOUT_S * 4, env=dict(self.environ))
        except (OSError, subprocess.TimeoutExpired):
            return None
        return completed.stdout.strip() if completed.returncode == 0 else None


class RecordedProbe:
    """A fake node: files under `root`, command outputs from `root/.commands/`.

    The environment comes from `environ`, else from `root/.environ` (KEY=VALUE lines). Libraries
    load unless named in `unloadable` (path -> error). `.commands/torch-devices` holds the output of
    TORCH_DEVICES_CODE; without it, torch is not installed.
    """

    def __init__(self, root: str | Path, environ: Mapping[str, str] | None = None,
                 unloadable: Mapping[str, str] | None = None) -> None:
        self.root = Path(root)
        self.environ = dict(environ) if environ is not None else self._recorded_environ()
        self.unloadable = dict(unloadable or {})
        self.commands_run: list[str] = []

    def _recorded_environ(self) -> dict[str, str]:
        text = self.read_text("/.environ") or ""
        pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
        return {name.strip(): value.strip() for name, value in pairs}

    def run(self, argv: Sequence[str]) -> str | None:
        key = "__".join(argv)
        self.commands_run.append(" ".join(argv))
        return strip_source(self.read_text(f"/{RECORDED_COMMANDS_DIR}/{key}"))

    def read_text(self, path: str) -> str | None:
        try:
            return (self.root / path.lstrip("/")).read_text(errors="replace")
        except OSError:
            return None

    def glob(self, pattern: str) -> list[str]:
        prefix = str(self.root).rstrip("/")
        return sorted(match[len(prefix):] for match in globbing.glob(str(self.root / pattern.lstrip("/"))))

    def load_library(self, path: str) -> str | None:
        return self.unloadable.get(path)

    def torch_devices(self) -> str | None:
        return self.run(["torch-devices"])


def strip_source(text: str | None) -> str | None:
    """Drop a recorded output's SOURCE: header line."""
    if text is None or not text.startswith(SOURCE_PREFIX):
        return text
    return text.split("\n", 1)[1] if "\n" in text else ""


def probe_for_root(root: str | Path = "/") -> Probe:
    """The real machine for '/', else a recorded node (a fake root with .commands/)."""
    if Path(root).resolve() == Path("/"):
        return SystemProbe()
    return RecordedProbe(root)

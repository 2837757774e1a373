"""The p4d_node fixture: a healthy p4d.24xlarge host, made unhealthy one part at a time."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from clusterkit.stack.probe import RecordedProbe
from tests.stack.nodes import NODE_LIMITS, P4D_ENVIRON, P4D_LIBRARIES, build_root, p4d_commands, p4d_devices


@pytest.fixture
def p4d_node(tmp_path: Path) -> Callable[..., RecordedProbe]:
    """A healthy p4d.24xlarge host; keyword arguments replace parts of it to make it unhealthy."""

    def make(*, gpus: int = 8, efa: int = 4, drop_files: tuple[str, ...] = (), files: Mapping[str, str] | None = None,
             commands: Mapping[str, str | None] | None = None, environ: Mapping[str, str] | None = None,
             extra_devices: tuple[str, ...] = (), unloadable: Mapping[str, str] | None = None) -> RecordedProbe:
        all_files = {k: v for k, v in {**P4D_LIBRARIES, **NODE_LIMITS}.items() if k not in drop_files}
        all_files.update(files or {})
        all_commands = p4d_commands()
        for command, output in (commands or {}).items():
            if output is None:
                all_commands.pop(command, None)
            else:
                all_commands[command] = output
        root = build_root(tmp_path / "node", devices=p4d_devices(gpus, efa) + list(extra_devices), files=all_files,
                          commands=all_commands)
        return RecordedProbe(root, environ=P4D_ENVIRON if environ is None else environ, unloadable=unloadable)

    return make

"""Where a checkpoint's parts live under a checkpoint root, and how their names are made and read.

    step-00000120/            a committed checkpoint: its files + manifest.json
    step-00000130/
    latest                    "step-00000130": a pointer for people and tools
    .pending-step-00000140-<token>/   a save in progress (or the debris of a crashed one)
    .discarded-step-00000110-<token>/ a checkpoint being deleted (or the debris of a crashed deletion)

Step numbers have at least 8 digits and may have more: order is by number, never by name. Inside a
directory, rank N's torch shard is `rank-NNNNN.pt` and its done-marker (the file-system commit
protocol) `rank-NNNNN.done.json`. The one home of these names: the manager, the commit, retention and
the supervisor all use them from here.
"""

from __future__ import annotations

import operator
import re
import reprlib
from pathlib import Path

from clusterkit.errors import ClusterkitError

MANIFEST = "manifest.json"
LATEST_POINTER = "latest"
DISCARDED_PREFIX = ".discarded-"

_STEP_DIR = re.compile(r"^step-(\d{8,})$")
_PENDING_DIR = re.compile(r"^\.pending-step-(\d{8,})-")
_NOT_CHECKPOINT_FILES = re.compile(r"^(manifest\.json|rank-\d{5,}\.done\.json)$|\.tmp$")


def step_number(step: object) -> int:
    """`step` as the int a checkpoint is named by: an int 0 or more, or an integer that says it is one (numpy's,
    a 0-d integer tensor). Anything else is refused before a save writes a byte: a negative step would be
    committed under a name no scan finds, a bool or a float has no place in the manifest."""
    try:
        number = None if isinstance(step, bool) else operator.index(step)
    except TypeError:
        number = None
    if number is None or number < 0:
        raise ClusterkitError(
            f"checkpoint step must be a whole number 0 or more, got {reprlib.repr(step)} ({type(step).__name__})",
            fix="pass the training step counter, an int (e.g. save(int(step), state))",
        )
    return number


def step_dir_name(step: int) -> str:
    """The name of committed checkpoint `step`'s directory."""
    return f"step-{step:08d}"


def step_of(name: str) -> int | None:
    """The step a committed checkpoint directory's name stands for, None for any other name."""
    match = _STEP_DIR.match(name)
    return int(match.group(1)) if match else None


def pending_dir_name(step: int, token: str) -> str:
    """The directory a save of `step` writes into before its commit; `token` tells saves of one step apart."""
    return f".pending-step-{step:08d}-{token}"


def pending_step(name: str) -> int | None:
    """The step of a pending save's directory name, None for any other name."""
    match = _PENDING_DIR.match(name)
    return int(match.group(1)) if match else None


def discarded_name(name: str, token: str) -> str:
    """The name a directory `name` takes while it is being deleted."""
    return f"{DISCARDED_PREFIX}{name}-{token}"


def shard_name(rank: int) -> str:
    """The file `torch.save` writes rank `rank`'s state into."""
    return f"rank-{rank:05d}.pt"


def marker_name(rank: int) -> str:
    """The file a rank writes into the pending directory when its part is done (no process group)."""
    return f"rank-{rank:05d}.done.json"


def step_dirs(root: Path) -> list[tuple[int, Path]]:
    """Committed checkpoint directories under `root` with their steps, newest first; [] when `root` is absent."""
    try:
        entries = list(root.iterdir())
    except FileNotFoundError:
        return []
    found = [(step, entry) for entry in entries if (step := step_of(entry.name)) is not None and entry.is_dir()]
    return sorted(found, reverse=True)


def checkpoint_files(directory: Path) -> list[str]:
    """Relative paths of the files a checkpoint consists of (markers, manifest and temporaries excluded)."""
    return [
        str(path.relative_to(directory))
        for path in directory.rglob("*")
        if path.is_file() and not _NOT_CHECKPOINT_FILES.search(path.name)
    ]

"""What a committed checkpoint's manifest vouches for, and checking a checkpoint against it.

The manifest (`manifest.json`, written last, just before the commit's rename) names the format and
its version, the step, how it was written ("torch", "dcp" or "files"), the world size, and every
file's size and digest with the algorithm that made the digests (`checksums.py` says which catches
what). `verify_checkpoint` checks one directory against it as far as asked (see `Verify`).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, TypedDict

from clusterkit.errors import ClusterkitError
from clusterkit.lean_dataclass import lean_dataclass
from clusterkit.resilience.checkpoint_files import hash_pool
from clusterkit.resilience.checkpoint_layout import MANIFEST, step_of
from clusterkit.resilience.checksums import ALGORITHMS, ChecksumAlgorithm, digest_file

FORMAT = "clusterkit-checkpoint"
FORMAT_VERSION = 1

Verify = Literal["full", "size"]
"""How hard `latest()` checks a candidate.

"size" (the default) reads the manifest and compares its file sizes with the files on disk:
instant; catches missing, truncated and foreign files (what a crash of an unsynced writer leaves).
Flipped bytes are caught when `resume()`/`load()` read the files, which verify every piece on the
way. "full" re-reads every byte and compares digests now: one extra read of the checkpoint.
"""



class FileEntry(TypedDict):
    """One file as a manifest lists it (and as ranks report it to the committing rank, in JSON)."""

    size: int
    digest: str


FileEntries = dict[str, FileEntry]
"""A checkpoint's files by their paths relative to its directory."""


class DamagedCheckpoint(ClusterkitError):
    """A committed checkpoint whose bytes do not match its manifest's checksums."""


@lean_dataclass(frozen=True)
class Checkpoint:
    """A committed checkpoint whose manifest checks out (see `Verify` for how far)."""

    step: int
    path: Path
    manifest: dict[str, Any]


def new_manifest(step: int, kind: str, world_size: int, algorithm: ChecksumAlgorithm,
                 files: FileEntries) -> dict[str, Any]:
    """The manifest of a checkpoint about to be committed, stamped now."""
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "step": step,
        "kind": kind,
        "world_size": world_size,
        "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "digest_algorithm": algorithm.name,
        "files": dict(sorted(files.items())),
    }


def verify_checkpoint(path: Path, mode: Verify = "full") -> tuple[Checkpoint | None, str]:
    """Check one checkpoint directory; returns (checkpoint, "") or (None, what is wrong)."""
    try:
        manifest = json.loads((path / MANIFEST).read_bytes())
    except FileNotFoundError:
        return None, "no manifest (an incomplete or foreign directory)"
    except (OSError, ValueError) as exc:
        return None, f"unreadable manifest: {exc}"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return None, "manifest is not a clusterkit checkpoint manifest"
    if manifest.get("version") != FORMAT_VERSION:
        return None, f"unsupported manifest version {manifest.get('version')}"
    if manifest.get("digest_algorithm") not in ALGORITHMS:
        return None, (f"unknown digest algorithm {manifest.get('digest_algorithm')!r} "
                      f"(this clusterkit reads {', '.join(ALGORITHMS)})")
    step = step_of(path.name)
    if step is None or manifest.get("step") != step:
        return None, f"manifest step {manifest.get('step')} does not match the directory name"
    files = manifest.get("files") or {}
    for name, entry in files.items():
        try:
            size = (path / name).stat().st_size
        except FileNotFoundError:
            return None, f"{name} is missing"
        if size != entry["size"]:
            return None, f"{name} is {size} bytes, the manifest says {entry['size']}"
    checkpoint = Checkpoint(step=manifest["step"], path=path, manifest=manifest)
    if mode == "full":
        try:
            verify_files(checkpoint, list(files))
        except DamagedCheckpoint as damaged:
            return None, damaged.message
    return checkpoint, ""


def algorithm_of(manifest: dict[str, Any]) -> ChecksumAlgorithm:
    """The algorithm that made a manifest's digests."""
    return ALGORITHMS[manifest["digest_algorithm"]]


def verify_files(checkpoint: Checkpoint, names: list[str], pool: ThreadPoolExecutor | None = None) -> None:
    """Re-read the named files of `checkpoint` and compare digests; DamagedCheckpoint if one differs."""
    try:
        digests = digest_files(checkpoint.path, names, algorithm_of(checkpoint.manifest), pool)
    except OSError as exc:
        raise DamagedCheckpoint(f"{checkpoint.path} cannot be read: {exc}") from exc
    for name in names:
        if digests[name]["digest"] != checkpoint.manifest["files"][name]["digest"]:
            raise DamagedCheckpoint(f"{name} does not match its checksum")


def digest_files(directory: Path, names: list[str], algorithm: ChecksumAlgorithm,
                 pool: ThreadPoolExecutor | None = None) -> FileEntries:
    """Size and digest of each named file, its pieces read on several threads (`pool`, default the
    foreground hashing threads)."""
    result: FileEntries = {}
    for name in names:
        size, digest = digest_file(directory / name, algorithm, pool or hash_pool())
        result[name] = {"size": size, "digest": digest}
    return result

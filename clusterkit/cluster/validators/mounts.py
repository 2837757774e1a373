"""Mount directories: ParallelCluster's path pattern, never a system directory, never one inside another."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.node_scripts import system_dir_problem
from clusterkit.cluster.spec import ClusterSpec
from clusterkit.cluster.validators.common import matches, normalized_mount_dir, storage_entries
from clusterkit.findings import Finding, error, warning

# ParallelCluster's path pattern: no empty, "." or ".." segments, no trailing "/", no "\" at a segment start.
MOUNT_DIR_RE = r"/?[^/.\\][^/\\]*(/[^/.\\][^/]*)*"


def mount_dirs(spec: ClusterSpec) -> Iterator[Finding]:
    seen: list[tuple[str, str]] = []
    for path, _, mount_dir in storage_entries(spec):
        field = f"{path}.mount_dir"
        if not matches(MOUNT_DIR_RE, mount_dir):
            yield error(field, "mount_dir must be a path without empty, '.' or '..' parts and without a "
                        "trailing '/'", "e.g. /fsx or /data/shared", mount_dir)
            continue
        if not mount_dir.startswith("/"):
            yield warning(field, f"a relative mount_dir is mounted at /{mount_dir}",
                          f"write the absolute path /{mount_dir}", mount_dir)
        if any(character.isspace() for character in mount_dir):
            yield warning(field, "a mount_dir with a space breaks every script and job path that does not quote it",
                          "use '-' or '_' instead of spaces", mount_dir)
        normalized = normalized_mount_dir(mount_dir)
        problem = system_dir_problem(normalized)
        if problem:
            yield error(field, f"{problem}: storage mounted there hides what the nodes need",
                        "mount at /fsx, /data or /home", mount_dir)
            continue
        for other_path, other in seen:
            if normalized == other:
                yield error(field, f"{normalized} is already the mount_dir of {other_path}",
                            "give each storage its own mount_dir", mount_dir)
            elif normalized.startswith(other + "/") or other.startswith(normalized + "/"):
                yield error(field, f"{normalized} overlaps {other} ({other_path})",
                            "mount storage side by side, not inside each other", mount_dir)
        seen.append((path, normalized))

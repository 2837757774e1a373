"""Pyxis and enroot: the enroot directory the node script makes writable by every user."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.node_scripts import NODE_MOUNT_POINTS, system_dir_problem
from clusterkit.cluster.render import enroot_dir
from clusterkit.cluster.spec import DEFAULT_SHARED_DIR, EPHEMERAL_MOUNT_DIR, ROOT_VOLUME_ENROOT_DIR, ClusterSpec
from clusterkit.cluster.validators.common import matches, normalized_mount_dir, storage_entries
from clusterkit.findings import Finding, error, info, warning

# A path clusterkit passes to a root shell script and to enroot's shell-expanded configuration.
SAFE_PATH_RE = r"(/[A-Za-z0-9_-][A-Za-z0-9._-]*)+"


def pyxis(spec: ClusterSpec) -> Iterator[Finding]:
    directory = spec.pyxis.enroot_dir
    if not spec.pyxis.enabled:
        return
    if not matches(SAFE_PATH_RE, directory) or "/../" in f"{directory}/" or "/./" in f"{directory}/":
        yield error("pyxis.enroot_dir", "enroot_dir must be an absolute path of letters, digits, '.', '_', '-' "
                    "and '/' (enroot reads it through a shell), without '.' or '..' parts",
                    f"e.g. {EPHEMERAL_MOUNT_DIR}/enroot", directory)
        return
    # The node script makes the directory writable by every user (mode 1777), as root on every node: it must be
    # enroot's own, never the system's or a mount point (nor hold one).
    shared = {normalized_mount_dir(mount) for _, _, mount in storage_entries(spec)}
    mounts = sorted(shared | set(NODE_MOUNT_POINTS))
    problem = system_dir_problem(directory) or next(
        (f"{directory} {'is' if directory == mount else 'holds'} the mount point {mount}" for mount in mounts
         if directory == mount or mount.startswith(directory + "/")), None)
    if problem:
        yield error("pyxis.enroot_dir", f"{problem}: the node script would make it writable by every user (mode "
                    "1777), as root on every node", "use a directory of enroot's own, e.g. "
                    f"{EPHEMERAL_MOUNT_DIR}/enroot (local NVMe) or {ROOT_VOLUME_ENROOT_DIR}", directory)
        return
    if any(directory.startswith(mount + "/") for mount in shared | {DEFAULT_SHARED_DIR}):
        yield warning("pyxis.enroot_dir", "enroot data on shared storage is slow and fills it",
                      f"keep enroot_dir on local NVMe ({EPHEMERAL_MOUNT_DIR}/enroot)", directory)
    for q, queue in enumerate(spec.queues):
        used = enroot_dir(spec, queue.instance_facts())
        if used != directory and queue.instance_facts():
            yield info(f"queues[{q}]", f"queue {queue.name!r} has no instance storage: enroot keeps its data in "
                       f"{used} on the root volume", "size root_volume_gb for the container images it runs", used)

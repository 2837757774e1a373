"""clusterkit on the nodes: what the head node's pip installs as root (`clusterkit.package`) and where."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.render import clusterkit_venv
from clusterkit.cluster.spec import ClusterSpec
from clusterkit.cluster.validators.common import matches
from clusterkit.findings import Finding, error, info, shorten

# What the head node's pip installs as root, as clusterkit-venv.sh accepts it (it checks again): a project of the
# package index (name, extras, version specifiers) or an https:// URL. Never another scheme (http://, file://,
# git+...), a local path or archive (pip installs `x.whl` from the working directory), an option or two words.
_PIP_NAME = r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?"
_PIP_VERSION = r"(===|==|!=|~=|<=|>=|<|>)[A-Za-z0-9.*+!_-]+"
PIP_REQUIREMENT_RE = rf"{_PIP_NAME}(\[{_PIP_NAME}(,{_PIP_NAME})*\])?({_PIP_VERSION}(,{_PIP_VERSION})*)?"
PIP_URL_RE = r"https://[A-Za-z0-9.-]+(:[0-9]{1,5})?/[A-Za-z0-9._~%+=,!@:/-]*"
PIP_ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz")


def clusterkit_on_nodes(spec: ClusterSpec) -> Iterator[Finding]:
    package = spec.clusterkit.package
    by_name = (package is not None and matches(PIP_REQUIREMENT_RE, package)
               and not package.endswith(PIP_ARCHIVE_SUFFIXES))
    if package is not None and not by_name and not matches(PIP_URL_RE, package):
        yield error("clusterkit.package", f"{shorten(package)!r} is neither one requirement of the package index nor "
                    "an https:// URL (root installs it on the head node: no other scheme, local file, option or "
                    "second word)",
                    "e.g. clusterkit==0.1.0 or https://example.com/clusterkit-0.1.0-py3-none-any.whl", package)
    if spec.clusterkit.install:
        yield info("clusterkit.install", f"the head node installs clusterkit into {clusterkit_venv(spec)} (shared "
                   f"storage): supervised jobs run {clusterkit_venv(spec)}/bin/python unless supervise.python "
                   "names another",
                   "set clusterkit.install: false to leave clusterkit off the nodes")

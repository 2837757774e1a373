"""The operating system and the image: ParallelCluster 3.16's operating systems, custom AMI ids and names."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.spec import ClusterSpec
from clusterkit.cluster.validators.common import matches, suggest
from clusterkit.findings import Finding, error, info

SUPPORTED_OS = ("alinux2023", "ubuntu2204", "ubuntu2404", "rhel8", "rhel9", "rocky8", "rocky9")
OS_WITHOUT_OFFICIAL_AMI = ("rocky8", "rocky9")
AMI_ID_RE = r"ami-[0-9a-z]{8}|ami-[0-9a-z]{17}"
AMI_NAME_RE = r"[A-Za-z0-9()\[\] ./'@_-]{3,128}"  # EC2's rule for image names


def operating_system(spec: ClusterSpec) -> Iterator[Finding]:
    if spec.os == "alinux2":
        yield error("os", "alinux2 was dropped in ParallelCluster 3.16", "use alinux2023 or ubuntu2204", spec.os)
    elif spec.os not in SUPPORTED_OS:
        yield error("os", f"ParallelCluster 3.16 does not support os {spec.os!r}", suggest(spec.os, SUPPORTED_OS),
                    spec.os)
    elif spec.os in OS_WITHOUT_OFFICIAL_AMI and not spec.image.custom_ami:
        yield error("image.custom_ami", f"ParallelCluster publishes no {spec.os} image: {spec.os} needs a custom AMI",
                    "build one with `pcluster build-image` and set image.custom_ami, or use ubuntu2204", spec.os)


def image(spec: ClusterSpec) -> Iterator[Finding]:
    custom = spec.image.custom_ami
    if custom is None:
        return
    if custom.startswith("ami-"):
        if not matches(AMI_ID_RE, custom):
            yield error("image.custom_ami", "AMI ids look like ami-<17 characters>", "copy the id from the EC2 "
                        "console, or give the image's name", custom)
    elif not matches(AMI_NAME_RE, custom):
        yield error("image.custom_ami", "not an AMI id (ami-...) nor an AMI name (3-128 letters, digits, spaces "
                    "and ( ) [ ] . / ' @ _ -)", "give the image's id or exact name", custom)
    else:
        yield info("image.custom_ami", f"AMI {custom!r} is looked up by name at create; until then the config "
                   "holds a placeholder id", "give the ami- id to see it in the dry run", custom)

"""Converting container images to squashfs files for pyxis/enroot: `enroot import`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from clusterkit.errors import ClusterkitError, MissingDependency

ENROOT_INSTALL_HINT = ("install enroot (https://github.com/NVIDIA/enroot/blob/master/doc/installation.md); "
                       "ParallelCluster >= 3.11 ships it disabled, enable it in a custom action; keep its data "
                       "and cache on local NVMe or /fsx")
# Transports enroot understands; a bare image reference means the local docker daemon.
ENROOT_SCHEMES = ("docker://", "dockerd://", "podman://")


def enroot_import_command(image: str, output: str | Path) -> list[str]:
    """`enroot import -o NAME.sqsh dockerd://IMAGE` (an image given with its own scheme keeps it)."""
    if not image or image.startswith("-"):
        raise ClusterkitError(f"IMAGE: {image!r} is not an image reference", fix="pass e.g. my-train:1.0")
    target = str(output)
    if not target.endswith(".sqsh"):
        raise ClusterkitError(f"--output: {target!r} does not end in .sqsh",
                              fix="name the file like /fsx/images/NAME.sqsh")
    source = image if image.startswith(ENROOT_SCHEMES) else f"dockerd://{image}"
    return ["enroot", "import", "-o", target, source]


def import_image(image: str, output: str | Path) -> None:
    """Run `enroot import`; the output's directory must exist (on shared storage, for every node)."""
    command = enroot_import_command(image, output)
    if shutil.which("enroot") is None:
        raise MissingDependency("enroot is not installed on this machine", fix=ENROOT_INSTALL_HINT)
    directory = Path(output).parent
    if not directory.is_dir():
        raise ClusterkitError(f"--output: directory {str(directory)!r} does not exist",
                              fix=f"create it first: mkdir -p {directory}")
    completed = subprocess.run(command, check=False)
    if completed.returncode != 0:
        raise ClusterkitError(f"enroot import failed with exit status {completed.returncode}",
                              fix="see enroot's messages above; `docker images` must list the image for dockerd://")

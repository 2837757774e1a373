"""Docker on the compute nodes: clusterkit's node script installs it (and NVIDIA's container toolkit on GPU queues)
on Ubuntu only; without it, `runtime: docker` jobs are refused by the preflight."""

from __future__ import annotations

from collections.abc import Iterator

from clusterkit.cluster.render import installs_docker
from clusterkit.cluster.spec import ClusterSpec
from clusterkit.findings import Finding, error, info


def docker(spec: ClusterSpec) -> Iterator[Finding]:
    if spec.docker.install and not spec.os.startswith("ubuntu"):
        yield error("docker.install", f"clusterkit's docker node script installs Docker's Ubuntu packages; this "
                    f"cluster runs {spec.os}", "use ubuntu2204 or ubuntu2404, or set docker.install: false and boot "
                    "a custom AMI that has docker", True)
    elif not installs_docker(spec) and spec.queues:
        why = ("the custom AMI must bring it" if spec.image.custom_ami and spec.docker.install is None
               else "runtime: docker jobs are refused by the preflight")
        yield info("docker.install", f"clusterkit installs no docker on the compute nodes: {why}",
                   "use runtime: pyxis, or docker.install: true on Ubuntu", spec.docker.install)

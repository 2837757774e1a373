#!/bin/bash
# clusterkit node script: install the Docker engine at a pinned version, and on GPU nodes the NVIDIA container
# toolkit (docker run --gpus), so that clusterkit's `runtime: docker` jobs run on the nodes of ParallelCluster's
# own images (which carry neither).
# ParallelCluster runs it as root, as an OnNodeConfigured custom action, with its Args as separate words:
#
#   docker.sh --docker VERSION [--nvidia-container-toolkit VERSION]
#
# Packages come from Docker's and NVIDIA's signed apt repositories (Ubuntu) and are held at these versions. The
# image's default user joins the docker group (whoever may use docker is root on the node).
# CLUSTERKIT_NODE_ROOT prefixes every path the script reads or writes (tests point it at a scratch tree).
set -euo pipefail
umask 022

die() {
    printf 'docker.sh: %s\n' "$1" >&2
    exit 2
}

docker_version="" toolkit_version=""
while [ "$#" -gt 0 ]; do
    [ "$#" -ge 2 ] || die "$1 needs a value"
    case "$1" in
        --docker) docker_version=$2 ;;
        --nvidia-container-toolkit) toolkit_version=$2 ;;
        *) die "unknown argument (usage: --docker VERSION [--nvidia-container-toolkit VERSION])" ;;
    esac
    shift 2
done
[[ "$docker_version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "--docker must be a version like 28.5.2"
if [ -n "$toolkit_version" ]; then
    [[ "$toolkit_version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "--nvidia-container-toolkit must be a version like 1.18.2"
fi

root=${CLUSTERKIT_NODE_ROOT:-}
command -v apt-get >/dev/null || die "this node has no apt-get: clusterkit installs docker on Ubuntu nodes only \
(set docker.install: false and bring docker in a custom AMI)"
os_id=$(sed -n 's/^ID=//p' "$root/etc/os-release" | tr -d '"')
os_version=$(sed -n 's/^VERSION_ID=//p' "$root/etc/os-release" | tr -d '"')
codename=$(sed -n 's/^VERSION_CODENAME=//p' "$root/etc/os-release" | tr -d '"')
[ "$os_id" = ubuntu ] || die "this node runs ${os_id:-an unknown OS}, not Ubuntu: clusterkit installs docker on \
Ubuntu nodes only"
[[ "$os_version" =~ ^[0-9]+\.[0-9]+$ && "$codename" =~ ^[a-z]+$ ]] ||
    die "cannot tell this Ubuntu release from /etc/os-release"

arch=$(dpkg --print-architecture)
[[ "$arch" =~ ^[a-z0-9]+$ ]] || die "unexpected architecture"
install -d -m 0755 "$root/etc/apt/keyrings" "$root/etc/apt/sources.list.d"
curl -fsSL https://download.docker.com/linux/ubuntu/gpg | gpg --dearmor --yes -o "$root/etc/apt/keyrings/docker.gpg"
printf 'deb [arch=%s signed-by=/etc/apt/keyrings/docker.gpg] https://download.docker.com/linux/ubuntu %s stable\n' \
    "$arch" "$codename" >"$root/etc/apt/sources.list.d/docker.list"
# Docker's packages carry the epoch 5 and the Ubuntu release in their version.
docker_package="5:$docker_version-1~ubuntu.$os_version~$codename"
packages=("docker-ce=$docker_package" "docker-ce-cli=$docker_package" containerd.io)
held=(docker-ce docker-ce-cli)
if [ -n "$toolkit_version" ]; then
    curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey |
        gpg --dearmor --yes -o "$root/etc/apt/keyrings/nvidia-container-toolkit.gpg"
    printf 'deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.gpg] %s /\n' \
        "https://nvidia.github.io/libnvidia-container/stable/deb/$arch" \
        >"$root/etc/apt/sources.list.d/nvidia-container-toolkit.list"
    for package in nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools \
        libnvidia-container1; do
        packages+=("$package=$toolkit_version-1")
        held+=("$package")
    done
fi
apt-get update -y
DEBIAN_FRONTEND=noninteractive apt-get install -y "${packages[@]}"
apt-mark hold "${held[@]}"
if [ -n "$toolkit_version" ]; then
    # Registers the nvidia runtime in /etc/docker/daemon.json: `docker run --gpus all` then finds the GPUs.
    nvidia-ctk runtime configure --runtime=docker
fi
systemctl enable docker
systemctl restart docker

# ParallelCluster's default user of the image (ubuntu) may run docker, as in AWS's reference clusters.
if getent passwd ubuntu >/dev/null; then
    usermod -aG docker ubuntu
fi
echo "docker.sh: docker $docker_version${toolkit_version:+ and the NVIDIA container toolkit $toolkit_version} installed"

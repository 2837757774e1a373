#!/bin/bash
# clusterkit node script: install the AWS Neuron driver, runtime, collectives and tools at pinned versions,
# on Trainium/Inferentia nodes booted from ParallelCluster's own images (which carry no Neuron software).
# ParallelCluster runs it as root, as an OnNodeConfigured custom action, with its Args as separate words:
#
#   neuron.sh --dkms VERSION --runtime VERSION --collectives VERSION --tools VERSION
#
# Packages come from Neuron's signed apt or yum repository and are held at these versions.
# CLUSTERKIT_NODE_ROOT prefixes every path the script reads or writes (tests point it at a scratch tree).
set -euo pipefail
umask 022

die() {
    printf 'neuron.sh: %s\n' "$1" >&2
    exit 2
}

dkms="" runtime="" collectives="" tools=""
while [ "$#" -gt 0 ]; do
    [ "$#" -ge 2 ] || die "$1 needs a value"
    case "$1" in
        --dkms) dkms=$2 ;;
        --runtime) runtime=$2 ;;
        --collectives) collectives=$2 ;;
        --tools) tools=$2 ;;
        *) die "unknown argument (usage: --dkms V --runtime V --collectives V --tools V)" ;;
    esac
    shift 2
done
for version in "$dkms" "$runtime" "$collectives" "$tools"; do
    [[ "$version" =~ ^[0-9]+(\.[0-9]+){1,4}$ ]] || die "every version must look like 2.26.5.0"
done

root=${CLUSTERKIT_NODE_ROOT:-}
repo_key=GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB
kernel=$(uname -r)
[[ "$kernel" =~ ^[A-Za-z0-9._+-]+$ ]] || die "unexpected kernel release"

if command -v apt-get >/dev/null; then
    codename=$(sed -n 's/^VERSION_CODENAME=//p' "$root/etc/os-release" | tr -d '"')
    [[ "$codename" =~ ^[a-z]+$ ]] || die "cannot tell this Ubuntu release from /etc/os-release"
    install -d -m 0755 "$root/usr/share/keyrings" "$root/etc/apt/sources.list.d"
    curl -fsSL "https://apt.repos.neuron.amazonaws.com/$repo_key" | gpg --dearmor --yes -o "$root/usr/share/keyrings/neuron.gpg"
    printf 'deb [signed-by=/usr/share/keyrings/neuron.gpg] https://apt.repos.neuron.amazonaws.com %s main\n' \
        "$codename" >"$root/etc/apt/sources.list.d/neuron.list"
    apt-get update -y
    DEBIAN_FRONTEND=noninteractive apt-get install -y "linux-headers-$kernel" "aws-neuronx-dkms=$dkms" \
        "aws-neuronx-runtime-lib=$runtime" "aws-neuronx-collectives=$collectives" "aws-neuronx-tools=$tools"
    apt-mark hold aws-neuronx-dkms aws-neuronx-runtime-lib aws-neuronx-collectives aws-neuronx-tools
else
    installer=$(command -v dnf || command -v yum) || die "found neither apt-get, dnf nor yum"
    install -d -m 0755 "$root/etc/yum.repos.d"
    printf '%s\n' '[neuron]' 'name=Neuron YUM Repository' 'baseurl=https://yum.repos.neuron.amazonaws.com' \
        'enabled=1' 'gpgcheck=1' "gpgkey=https://yum.repos.neuron.amazonaws.com/$repo_key" \
        >"$root/etc/yum.repos.d/neuron.repo"
    rpm --import "https://yum.repos.neuron.amazonaws.com/$repo_key"
    "$installer" install -y "kernel-devel-$kernel" "aws-neuronx-dkms-$dkms" "aws-neuronx-runtime-lib-$runtime" \
        "aws-neuronx-collectives-$collectives" "aws-neuronx-tools-$tools"
fi

install -d -m 0755 "$root/etc/profile.d"
# shellcheck disable=SC2016
printf '%s\n' 'export PATH=/opt/aws/neuron/bin:$PATH' >"$root/etc/profile.d/neuron.sh"
modprobe neuron
echo "neuron.sh: Neuron driver $dkms, runtime $runtime, collectives $collectives, tools $tools installed"

#!/bin/bash
# clusterkit node script: enable the pyxis and enroot that AWS ParallelCluster (>= 3.11) installs disabled.
# ParallelCluster runs it as root, as an OnNodeConfigured custom action, with its Args as separate words:
#
#   pyxis-enroot.sh --role head|compute --enroot-dir DIR
#
# head:     enroot on this node, and pyxis for the whole cluster (/opt/slurm/etc is shared with every node)
# compute:  enroot on this node, pyxis's runtime directory, and a PATH for the enroot that slurmd starts
# DIR holds enroot's container data and layer cache (local NVMe where the node has it).
# CLUSTERKIT_NODE_ROOT prefixes every path the script reads or writes (tests point it at a scratch tree).
set -euo pipefail
umask 022

die() {
    printf 'pyxis-enroot.sh: %s\n' "$1" >&2
    exit 2
}

role=""
enroot_dir=""
while [ "$#" -gt 0 ]; do
    case "$1" in
        --role)
            [ "$#" -ge 2 ] || die "--role needs a value"
            role=$2
            shift 2
            ;;
        --enroot-dir)
            [ "$#" -ge 2 ] || die "--enroot-dir needs a value"
            enroot_dir=$2
            shift 2
            ;;
        *) die "unknown argument (usage: --role head|compute --enroot-dir DIR)" ;;
    esac
done
case "$role" in
    head | compute) ;;
    *) die "--role must be head or compute" ;;
esac
# enroot reads its configuration through a shell: the directory may hold only these characters.
[[ "$enroot_dir" =~ ^/[A-Za-z0-9._/-]+$ ]] || die "--enroot-dir must be an absolute path of letters, digits, . _ - and /"
case "$enroot_dir/" in
    */./* | */../* | *//*) die "--enroot-dir must not hold empty, . or .. segments" ;;
esac

root=${CLUSTERKIT_NODE_ROOT:-}
examples="$root/opt/parallelcluster/examples"
for file in enroot/enroot.conf spank/plugstack.conf pyxis/pyxis.conf; do
    [ -f "$examples/$file" ] || die "$examples/$file is missing: this image has no ParallelCluster >= 3.11 pyxis/enroot"
done

# enroot: runtime state in RAM (/run), container data and the layer cache under DIR, per user and group.
install -d -m 1777 "$root$enroot_dir" "$root$enroot_dir/data" "$root$enroot_dir/cache"
install -d -m 0755 "$root/etc/enroot"
conf="$root/etc/enroot/enroot.conf"
{
    grep -v -E '^[[:space:]]*(ENROOT_RUNTIME_PATH|ENROOT_DATA_PATH|ENROOT_CACHE_PATH|ENROOT_CONFIG_PATH)([[:space:]]|$)' \
        "$examples/enroot/enroot.conf" || true
    # enroot expands these when it runs ($(id -u) is the calling user's), not this script.
    # shellcheck disable=SC2016
    printf '%s\n' \
        'ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)' \
        "ENROOT_DATA_PATH $enroot_dir/data/user-\$(id -u)" \
        "ENROOT_CACHE_PATH $enroot_dir/cache/group-\$(id -g)" \
        'ENROOT_CONFIG_PATH ${HOME}/.config/enroot'
} >"$conf.clusterkit-new"
chmod 0644 "$conf.clusterkit-new"
mv -f "$conf.clusterkit-new" "$conf"

# pyxis keeps per-job state under /run/pyxis (a tmpfs).
install -d -m 1777 "$root/run/pyxis"

if [ "$role" = head ]; then
    install -d -m 0755 "$root/opt/slurm/etc/plugstack.conf.d"
    install -m 0644 "$examples/spank/plugstack.conf" "$root/opt/slurm/etc/plugstack.conf"
    install -m 0644 "$examples/pyxis/pyxis.conf" "$root/opt/slurm/etc/plugstack.conf.d/pyxis.conf"
    scontrol reconfigure || echo "pyxis-enroot.sh: slurmctld is not up yet; Slurm reads plugstack.conf when it starts"
else
    # slurmd starts enroot (through pyxis) with its own environment: give it a full PATH.
    install -d -m 0755 "$root/etc/systemd/system/slurmd.service.d"
    printf '%s\n' '[Service]' \
        'Environment=PATH=/opt/slurm/sbin:/opt/slurm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        >"$root/etc/systemd/system/slurmd.service.d/clusterkit-enroot-path.conf"
    systemctl daemon-reload
    systemctl try-restart slurmd
fi
echo "pyxis-enroot.sh: pyxis and enroot enabled ($role node, enroot data in $enroot_dir)"

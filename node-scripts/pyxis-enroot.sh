#!/bin/bash
# clusterkit node script: enable the pyxis and enroot that AWS ParallelCluster (>= 3.11) installs disabled.
# ParallelCluster runs it as root, as an OnNodeConfigured custom action, with its Args as separate words:
#
#   pyxis-enroot.sh --role head|compute --enroot-dir DIR
#
# head:     enroot on this node, and pyxis for the whole cluster (/opt/slurm/etc is shared with every node)
# compute:  enroot on this node, pyxis's runtime directory, and a PATH for the enroot that slurmd starts
# DIR holds enroot's container data and layer cache (local NVMe where the node has it); every user may write it, so
# it is a directory of its own: never a system directory or a mount point, reached through directories only root
# may change, made here (or by an earlier run).
# CLUSTERKIT_NODE_ROOT prefixes every path the script reads or writes (tests point it at a scratch tree).
set -euo pipefail
umask 022

die() {
    printf 'pyxis-enroot.sh: %s\n' "$1" >&2
    exit 2
}

# The system directories and ParallelCluster's own mount points. clusterkit.cluster.node_scripts holds the same
# lists (a test keeps them equal), so that this script refuses them on its own, also when run by hand.
system_trees=(
    /bin /boot /dev /etc /lib /lib32 /lib64 /libx32 /proc /root /run /sbin /sys /tmp /usr
    /opt/amazon /opt/aws /opt/intel /opt/parallelcluster /opt/slurm
    /var/adm /var/cache /var/crash /var/db /var/empty /var/lib /var/local /var/lock /var/log /var/mail /var/opt
    /var/run /var/spool /var/tmp /var/yp
)
system_dirs=(/media /mnt /srv)
node_mount_points=(/scratch /home)

# DIR (absolute, plain, normalised) must be a directory of its own: no system directory, nothing inside one of
# system_trees, no mount point, and none of these below it.
own_dir_or_die() {
    local option=$1 dir=$2 system
    for system in "${system_trees[@]}" "${system_dirs[@]}"; do
        if [ "$dir" = "$system" ]; then
            die "$option $dir is a system directory: pass a directory of its own"
        elif [[ "$system" == "$dir"/* ]]; then
            die "$option $dir holds the system directory $system: pass a directory of its own"
        fi
    done
    for system in "${system_trees[@]}"; do
        if [[ "$dir" == "$system"/* ]]; then
            die "$option $dir is inside the system directory $system: pass a directory of its own"
        fi
    done
    for system in "${node_mount_points[@]}"; do
        if [ "$dir" = "$system" ] || [[ "$system" == "$dir"/* ]]; then
            die "$option $dir is or holds the mount point $system: pass a directory of its own below it"
        fi
    done
}

me=$(id -u)

# Whether PATH is a real directory (no symlink) owned by root (who runs this) that no one else may write to; with
# sticky-ok, one that is sticky will do too (/tmp, ParallelCluster's /scratch): others cannot replace root's entries.
trusted_dir() {
    local path=$1 sticky=${2:-} owner_mode owner mode
    if [ -L "$path" ] || [ ! -d "$path" ]; then
        return 1
    fi
    owner_mode=$(stat -c '%u %a' -- "$path")
    owner=${owner_mode% *}
    mode=$((8#${owner_mode#* }))
    [ "$owner" = "$me" ] && { (((mode & 8#022) == 0)) || { [ "$sticky" = sticky-ok ] && ((mode & 8#1000)); }; }
}

# Create the missing directories above DIR (mode 0755), after checking those there are: a symlink, or a directory
# someone else may change, on the way could send this script anywhere. mkdir, never -p: it fails on what appears
# meanwhile instead of following it.
make_parents() {
    local dir=$1 path="" part
    local -a parts
    IFS=/ read -r -a parts <<<"${dir#/}"
    trusted_dir "$root/" sticky-ok || die "/ is not a directory only root may change"
    for part in "${parts[@]:0:${#parts[@]}-1}"; do
        path="$path/$part"
        if [ -e "$root$path" ] || [ -L "$root$path" ]; then
            trusted_dir "$root$path" sticky-ok ||
                die "$path is a symlink, or a directory root does not own or others may change: not creating $dir"
        else
            mkdir -m 0755 -- "$root$path"
        fi
    done
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
own_dir_or_die --enroot-dir "$enroot_dir"

root=${CLUSTERKIT_NODE_ROOT:-}
examples="$root/opt/parallelcluster/examples"
for file in enroot/enroot.conf spank/plugstack.conf pyxis/pyxis.conf; do
    [ -f "$examples/$file" ] || die "$examples/$file is missing: this image has no ParallelCluster >= 3.11 pyxis/enroot"
done

# enroot: runtime state in RAM (/run), container data and the layer cache under DIR, per user and group. Every user
# may write DIR (mode 1777): it is made here, or it is what an earlier run made, never a directory that was there.
make_parents "$enroot_dir"
for dir in "$enroot_dir" "$enroot_dir/data" "$enroot_dir/cache"; do
    if [ ! -e "$root$dir" ] && [ ! -L "$root$dir" ]; then
        mkdir -m 1777 -- "$root$dir"
    elif ! trusted_dir "$root$dir" sticky-ok || [ "$(stat -c %a -- "$root$dir")" != 1777 ] ||
        mountpoint -q -- "$root$dir"; then
        die "$dir is there and is not what this script makes (root's, mode 1777, no symlink or mount point): \
remove it or pass another --enroot-dir"
    fi
done
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

#!/bin/bash
# clusterkit node script: install clusterkit into a virtualenv on the cluster's shared storage, so that every
# node runs the same clusterkit (the supervisor of supervised jobs, the health check). ParallelCluster runs it as
# root on the head node, as an OnNodeConfigured custom action, with its Args as separate words:
#
#   clusterkit-venv.sh --venv DIR --package REQUIREMENT
#
# DIR is on shared storage (/fsx/clusterkit/venv-VERSION): a directory of its own, never a system directory or a
# mount point, reached through directories only root may change; REQUIREMENT is what pip installs
# (clusterkit==VERSION, or an https:// URL of a wheel). A Python >= 3.10 is used, installed from the OS's packages
# when the image has none. The virtualenv counts as installed only once clusterkit imports from it (a marker file,
# written last), so a node that rebooted half-way installs again, and a second run with the virtualenv there
# changes nothing.
# CLUSTERKIT_NODE_ROOT prefixes every path the script writes (tests point it at a scratch tree).
set -euo pipefail
umask 022

die() {
    printf 'clusterkit-venv.sh: %s\n' "$1" >&2
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

venv=""
package=""
while [ "$#" -gt 0 ]; do
    case "$1" in
        --venv)
            [ "$#" -ge 2 ] || die "--venv needs a value"
            venv=$2
            shift 2
            ;;
        --package)
            [ "$#" -ge 2 ] || die "--package needs a value"
            package=$2
            shift 2
            ;;
        *) die "unknown argument (usage: --venv DIR --package REQUIREMENT)" ;;
    esac
done
[[ "$venv" =~ ^/[A-Za-z0-9._/-]+$ ]] || die "--venv must be an absolute path of letters, digits, . _ - and /"
case "$venv/" in
    */./* | */../* | *//*) die "--venv must not hold empty, . or .. segments" ;;
esac
own_dir_or_die --venv "$venv"
# Root installs it: one requirement of the package index (name, extras, version specifiers) or an https:// URL.
# No other scheme (http://, file://, git+...), no local file or archive (pip installs x.whl from the working
# directory), no option (a leading -), nothing a shell would read.
name='[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?'
version='(===|==|!=|~=|<=|>=|<|>)[A-Za-z0-9.*+!_-]+'
requirement="^$name(\\[$name(,$name)*\\])?($version(,$version)*)?\$"
url='^https://[A-Za-z0-9.-]+(:[0-9]{1,5})?/[A-Za-z0-9._~%+=,!@:/-]*$'
case "$package" in
    *.whl | *.zip | *.tar | *.tar.gz | *.tgz | *.tar.bz2 | *.tbz | *.tar.xz | *.txz) archive=yes ;;
    *) archive=no ;;
esac
if ! [[ "$package" =~ $url ]] && ! { [[ "$package" =~ $requirement ]] && [ "$archive" = no ]; }; then
    die "--package must be one requirement of the package index or an https:// URL"
fi

root=${CLUSTERKIT_NODE_ROOT:-}
target="$root$venv"
marker="$target/.clusterkit-installed"
make_parents "$venv"
# Replace only what this script made: a virtualenv of root's that no one else may change. Anything else at DIR is
# somebody's files, or could make jobs run somebody's Python.
if [ -e "$target" ] || [ -L "$target" ]; then
    if ! trusted_dir "$target" || mountpoint -q -- "$target" || [ ! -f "$target/pyvenv.cfg" ]; then
        die "$venv exists and is not a virtualenv of root's: move it away, or pass another --venv"
    fi
fi
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$package" ]; then
    exit 0
fi

good_python() {
    "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' 2>/dev/null
}

find_python() {
    local candidate
    for candidate in python3.13 python3.12 python3.11 python3.10 python3; do
        if command -v "$candidate" >/dev/null && good_python "$candidate"; then
            printf '%s\n' "$candidate"
            return 0
        fi
    done
    return 1
}

python=$(find_python) || {
    # The image's Python is too old or lacks venv/ensurepip (Ubuntu's python3-venv): add it from the OS.
    if command -v apt-get >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y python3-venv
    elif command -v dnf >/dev/null; then
        dnf install -y python3.11
    elif command -v yum >/dev/null; then
        yum install -y python3.11
    fi
    python=$(find_python) || die "no Python >= 3.10 with venv on this node, and none could be installed"
}

rm -rf "$target"
"$python" -m venv "$target"
"$target/bin/python" -m pip install --quiet --no-cache-dir --disable-pip-version-check "$package"
"$target/bin/python" -c 'import clusterkit.resilience.supervisor'
printf '%s\n' "$package" >"$marker"
echo "clusterkit-venv.sh: $package installed in $venv"

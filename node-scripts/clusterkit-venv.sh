#!/bin/bash
# clusterkit node script: install clusterkit into a virtualenv on the cluster's shared storage, so that every
# node runs the same clusterkit (the supervisor of supervised jobs, the health check). ParallelCluster runs it as
# root on the head node, as an OnNodeConfigured custom action, with its Args as separate words:
#
#   clusterkit-venv.sh --venv DIR --package REQUIREMENT
#
# DIR is on shared storage (/fsx/clusterkit/venv-VERSION); REQUIREMENT is what pip installs (clusterkit==VERSION,
# or a URL of a wheel). A Python >= 3.10 is used, installed from the OS's packages when the image has none. The
# virtualenv counts as installed only once clusterkit imports from it (a marker file, written last), so a node
# that rebooted half-way installs again, and a second run with the virtualenv there changes nothing.
# CLUSTERKIT_NODE_ROOT prefixes every path the script writes (tests point it at a scratch tree).
set -euo pipefail
umask 022

die() {
    printf 'clusterkit-venv.sh: %s\n' "$1" >&2
    exit 2
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
# One pip requirement or URL: no spaces, no option (a leading -), nothing a shell would read.
[[ "$package" =~ ^[A-Za-z0-9][A-Za-z0-9._+!=\<\>~,:/@%-]*$ ]] || die "--package must be one pip requirement or URL"

root=${CLUSTERKIT_NODE_ROOT:-}
target="$root$venv"
marker="$target/.clusterkit-installed"
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$package" ]; then
    exit 0
fi
# Replace only what this script made: a directory that is not a virtualenv is somebody's files.
if [ -e "$target" ] && [ ! -f "$target/pyvenv.cfg" ]; then
    die "$venv exists and is not a virtualenv: move it away, or pass another --venv"
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
install -d -m 0755 "$(dirname "$target")"
"$python" -m venv "$target"
"$target/bin/python" -m pip install --quiet --no-cache-dir --disable-pip-version-check "$package"
"$target/bin/python" -c 'import clusterkit.resilience.supervisor'
printf '%s\n' "$package" >"$marker"
echo "clusterkit-venv.sh: $package installed in $venv"

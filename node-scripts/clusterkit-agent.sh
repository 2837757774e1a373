#!/bin/bash
# clusterkit node script: run clusterkit's cluster agent on the head node, as the systemd service
# clusterkit-agent.service. The agent watches the batch hosts of running clusterkit jobs through their liveness
# beacons, marks a silent one DOWN in Slurm with the evidence as reason and releases the requeued job; it must run
# outside every job, where the supervisor cannot (it dies with its batch host). ParallelCluster runs this script as
# root on the head node, as an OnNodeConfigured custom action after clusterkit-venv.sh, with its Args as separate
# words:
#
#   clusterkit-agent.sh --venv DIR
#
# DIR is the virtualenv clusterkit-venv.sh installed (the same --venv): a directory of its own, root's and reached
# through directories only root may change, holding the marker clusterkit-venv.sh writes last. The service runs
# DIR/bin/python as root, so anything else at DIR is refused. A second run writes the same unit and changes nothing.
# CLUSTERKIT_NODE_ROOT prefixes every path the script reads and writes (tests point it at a scratch tree).
set -euo pipefail
umask 022

die() {
    printf 'clusterkit-agent.sh: %s\n' "$1" >&2
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

# The directories above DIR: a symlink, or a directory someone else may change, on the way could make root's
# service run somebody's Python.
trusted_parents_or_die() {
    local dir=$1 path="" part
    local -a parts
    IFS=/ read -r -a parts <<<"${dir#/}"
    trusted_dir "$root/" sticky-ok || die "/ is not a directory only root may change"
    for part in "${parts[@]:0:${#parts[@]}-1}"; do
        path="$path/$part"
        trusted_dir "$root$path" sticky-ok ||
            die "$path is missing, a symlink, or a directory root does not own or others may change: not running $dir"
    done
}

venv=""
while [ "$#" -gt 0 ]; do
    case "$1" in
        --venv)
            [ "$#" -ge 2 ] || die "--venv needs a value"
            venv=$2
            shift 2
            ;;
        *) die "unknown argument (usage: --venv DIR)" ;;
    esac
done
# The path also reaches the unit file: these characters are neither systemd specifiers (%) nor expansions ($).
[[ "$venv" =~ ^/[A-Za-z0-9._/-]+$ ]] || die "--venv must be an absolute path of letters, digits, . _ - and /"
case "$venv/" in
    */./* | */../* | *//*) die "--venv must not hold empty, . or .. segments" ;;
esac
own_dir_or_die --venv "$venv"

root=${CLUSTERKIT_NODE_ROOT:-}
target="$root$venv"
trusted_parents_or_die "$venv"
# Only the virtualenv clusterkit-venv.sh made and finished: root's, no one else may change it, its marker written.
if ! trusted_dir "$target" || mountpoint -q -- "$target" || ! trusted_dir "$target/bin" ||
    [ -L "$target/.clusterkit-installed" ] || [ ! -f "$target/.clusterkit-installed" ] ||
    [ ! -x "$target/bin/python" ]; then
    die "$venv is not a virtualenv clusterkit-venv.sh finished (root's): run clusterkit-venv.sh --venv $venv first"
fi
# A clusterkit without the agent (an older clusterkit.package) would restart for ever: refuse it here, by name.
"$target/bin/python" -c 'import clusterkit.resilience.agent' ||
    die "the clusterkit in $venv has no clusterkit.resilience.agent: install a clusterkit that has it"

unit_dir="$root/etc/systemd/system"
unit="$unit_dir/clusterkit-agent.service"
install -d -m 0755 "$unit_dir"
# LogsDirectory: systemd makes /var/log/clusterkit (root's, 0755) before each start. Restart=always with a pause:
# the agent comes back after a crash, and keeps trying while the shared storage holding DIR is not mounted yet.
printf '%s\n' \
    '[Unit]' \
    'Description=clusterkit agent: marks a silent batch host of a clusterkit job DOWN and releases its job' \
    'After=slurmctld.service' \
    '' \
    '[Service]' \
    'Environment=PATH=/opt/slurm/bin:/opt/slurm/sbin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "ExecStart=$venv/bin/python -m clusterkit.resilience.agent --log /var/log/clusterkit/agent.jsonl" \
    'LogsDirectory=clusterkit' \
    'Restart=always' \
    'RestartSec=5' \
    '' \
    '[Install]' \
    'WantedBy=multi-user.target' \
    >"$unit.clusterkit-new"
chmod 0644 "$unit.clusterkit-new"
mv -f "$unit.clusterkit-new" "$unit"
systemctl daemon-reload
systemctl enable --now clusterkit-agent.service
echo "clusterkit-agent.sh: clusterkit-agent.service runs $venv/bin/python -m clusterkit.resilience.agent"

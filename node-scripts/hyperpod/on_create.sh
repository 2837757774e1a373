#!/bin/bash
# clusterkit lifecycle script for SageMaker HyperPod (the OnCreate of every instance group). HyperPod runs it as
# root, with no arguments, from the directory it copied the lifecycle prefix into. It reads
#
#   clusterkit-lifecycle.json            beside it: which group is the controller, the FSx for Lustre file system,
#                                        accounting, enroot's directories, clusterkit's virtualenv
#   /opt/ml/config/resource_config.json  HyperPod's groups and their instances' addresses
#                                        (or $SAGEMAKER_RESOURCE_CONFIG_PATH)
#
# finds this node's group by its address, and then, only what clusterkit's jobs need: mounts the file system (and
# keeps it in fstab); on the controller keeps Slurm accounting in a local MariaDB through slurmdbd and starts
# slurmctld; elsewhere starts slurmd against the controller; puts enroot's data on the instance store (NVMe) and
# enables pyxis where the image has them; installs clusterkit into a virtualenv on the file system and runs its
# cluster agent from it (controller); authorizes the public keys given at create for ubuntu (controller, login).
# Every value is checked before anything changes; a second run changes nothing.
# CLUSTERKIT_NODE_ROOT prefixes every path the script reads or writes (tests point it at a scratch tree), and
# CLUSTERKIT_SLURM_CONF_WAIT is how long (s) it waits for HyperPod's slurm.conf to name the controller (60).
set -euo pipefail
umask 022

die() {
    printf 'on_create.sh: %s\n' "$1" >&2
    exit 2
}
say() {
    printf 'on_create.sh: %s\n' "$1"
}

[ "$#" -eq 0 ] || die "takes no arguments (HyperPod passes none; the cluster's values are in clusterkit-lifecycle.json)"

root=${CLUSTERKIT_NODE_ROOT:-}
here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
parameters="$here/clusterkit-lifecycle.json"
resources=${SAGEMAKER_RESOURCE_CONFIG_PATH:-/opt/ml/config/resource_config.json}
[ -f "$parameters" ] || die "$parameters is missing: upload the whole lifecycle set clusterkit planned"
[ -f "$root$resources" ] || die "$resources is missing: this is not a HyperPod node"

# The system directories (clusterkit.cluster.node_scripts holds the same lists; a test keeps them equal).
system_trees=(
    /bin /boot /dev /etc /lib /lib32 /lib64 /libx32 /proc /root /run /sbin /sys /tmp /usr
    /opt/amazon /opt/aws /opt/intel /opt/parallelcluster /opt/slurm
    /var/adm /var/cache /var/crash /var/db /var/empty /var/lib /var/local /var/lock /var/log /var/mail /var/opt
    /var/run /var/spool /var/tmp /var/yp
)
system_dirs=(/media /mnt /srv)

plain_dir_or_die() {
    local what=$1 dir=$2 system
    [[ "$dir" =~ ^/[A-Za-z0-9._/-]+$ ]] || die "$what must be an absolute path of letters, digits, . _ - and /"
    case "$dir/" in
        */./* | */../* | *//*) die "$what must not hold empty, . or .. segments" ;;
    esac
    for system in "${system_trees[@]}" "${system_dirs[@]}"; do
        if [ "$dir" = "$system" ] || [[ "$system" == "$dir"/* ]]; then
            die "$what $dir is or holds the system directory $system"
        fi
    done
    for system in "${system_trees[@]}"; do
        [[ "$dir" != "$system"/* ]] || die "$what $dir is inside the system directory $system"
    done
}

# Both JSON files, read by Python and printed as NUL-separated key=value records of known keys only; a value with
# a control character is refused there, every value is checked again here.
addresses=$(hostname -I)
records=$(python3 -I -c '
import json, re, sys
def text(value):
    if not isinstance(value, str) or re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029]", value):
        sys.exit("on_create.sh: a value in the lifecycle files is not one line of text: %r" % (value,))
    return value
def read():
    params = json.load(open(sys.argv[1]))
    resources = json.load(open(sys.argv[2]))
    mine = set(sys.argv[3].split())
    out = {}
    groups = resources["InstanceGroups"]
    for group in groups:
        if any(i.get("CustomerIpAddress") in mine for i in group["Instances"]):
            out["group"] = text(group["Name"])
    controller = text(params["controller_group"])
    out["controller_ip"] = next((text(i["CustomerIpAddress"]) for g in groups if g["Name"] == controller
                                 for i in g["Instances"]), "")
    group = out.get("group", "")
    out["role"] = ("controller" if group == controller else
                   "login" if group in [text(name) for name in params["login_groups"]] else "compute")
    lustre = params.get("lustre")
    if lustre:
        for key in ("dns_name", "mount_name", "mount_dir"):
            out["lustre_" + key] = text(lustre[key])
    out["accounting"] = "1" if params.get("accounting") is True else "0"
    for key in ("enroot_dir", "enroot_root_volume_dir"):
        if params.get(key) is not None:
            out[key] = text(params[key])
    out["nvme"] = "1" if group in [text(name) for name in params.get("nvme_groups", [])] else "0"
    clusterkit = params.get("clusterkit")
    if clusterkit:
        out["venv"], out["package"] = text(clusterkit["venv"]), text(clusterkit["package"])
    keys = params.get("authorized_keys") or []
    if not isinstance(keys, list):
        raise TypeError("authorized_keys is not a list")
    out["authorized_keys"] = "|".join(text(key) for key in keys)
    sys.stdout.write("".join("%s=%s\0" % item for item in out.items()))
try:
    read()
except (KeyError, TypeError, ValueError, OSError, AttributeError) as error:
    sys.exit("on_create.sh: the lifecycle files cannot be read: %s %r" % (type(error).__name__, str(error)))
' "$parameters" "$root$resources" "$addresses" | tr '\0' '\036') || exit 2

group="" role="" controller_ip="" accounting=0 nvme=0
lustre_dns_name="" lustre_mount_name="" lustre_mount_dir="" enroot_dir="" enroot_root_volume_dir="" venv="" package=""
authorized_keys=""
IFS=$'\036' read -r -a fields <<<"$records"
for field in "${fields[@]}"; do
    value=${field#*=}
    case "${field%%=*}" in
        group) group=$value ;;
        role) role=$value ;;
        controller_ip) controller_ip=$value ;;
        accounting) accounting=$value ;;
        nvme) nvme=$value ;;
        lustre_dns_name) lustre_dns_name=$value ;;
        lustre_mount_name) lustre_mount_name=$value ;;
        lustre_mount_dir) lustre_mount_dir=$value ;;
        enroot_dir) enroot_dir=$value ;;
        enroot_root_volume_dir) enroot_root_volume_dir=$value ;;
        venv) venv=$value ;;
        package) package=$value ;;
        authorized_keys) authorized_keys=$value ;;
    esac
done

[ -n "$group" ] || die "no instance group of $resources holds this node's address ($addresses)"
[[ "$group" =~ ^[a-zA-Z0-9](-*[a-zA-Z0-9])*$ ]] || die "the instance group name is not HyperPod's kind of name"
ipv4='^([0-9]{1,3}\.){3}[0-9]{1,3}$'
[[ "$controller_ip" =~ $ipv4 ]] || die "the controller group has no instance with an IPv4 address"
if [ -n "$lustre_mount_dir" ]; then
    [[ "$lustre_dns_name" =~ ^fs-[0-9a-f]{8,}\.fsx\.[a-z0-9-]+\.amazonaws\.com(\.cn)?$ ]] ||
        die "lustre dns_name must be an FSx file system's DNS name (fs-....fsx.REGION.amazonaws.com)"
    [[ "$lustre_mount_name" =~ ^[A-Za-z0-9_]{1,8}$ ]] || die "lustre mount_name must be 1-8 letters, digits or _"
    plain_dir_or_die "lustre mount_dir" "$lustre_mount_dir"
fi
for dir in "$enroot_dir" "$enroot_root_volume_dir"; do
    [ -z "$dir" ] || plain_dir_or_die "enroot's directory" "$dir"
done
if [ -n "$venv" ]; then
    [ -n "$lustre_mount_dir" ] && [[ "$venv" == "$lustre_mount_dir"/* ]] ||
        die "clusterkit's virtualenv must be on the shared file system"
    plain_dir_or_die "clusterkit's virtualenv" "$venv"
    [[ "$package" =~ ^[A-Za-z0-9._+:/=@-]+$ ]] || die "clusterkit's package is not a requirement clusterkit writes"
fi
keys=()
[ -z "$authorized_keys" ] || IFS='|' read -r -a keys <<<"$authorized_keys"
key_types='ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com'
for key in "${keys[@]}"; do
    if ! [[ "$key" =~ ^($key_types)\ [A-Za-z0-9+/]+={0,3}$ ]] || [ "${#key}" -gt 8300 ]; then
        die "an authorized key is not an OpenSSH public key's type and base64"
    fi
done
ubuntu_ssh=/home/ubuntu/.ssh
if [ "${#keys[@]}" -gt 0 ] && [ "$role" != compute ]; then
    if [ ! -d "$root/home/ubuntu" ] || [ -L "$root/home/ubuntu" ]; then
        die "the image has no /home/ubuntu for the authorized keys"
    fi
    if [ -L "$root$ubuntu_ssh" ] || [ -L "$root$ubuntu_ssh/authorized_keys" ]; then
        die "$ubuntu_ssh or its authorized_keys is a symbolic link"
    fi
fi
say "node of group $group ($role); controller $controller_ip"

# Write FILE (under root) with TEXT unless it already holds exactly that.
put() {
    local file=$1 mode=$2 text=$3
    if [ -f "$root$file" ] && [ "$(cat -- "$root$file")" = "$text" ]; then
        return 0
    fi
    install -d -m 0755 "$root$(dirname -- "$file")"
    printf '%s\n' "$text" >"$root$file.clusterkit-new"
    chmod "$mode" "$root$file.clusterkit-new"
    mv -f "$root$file.clusterkit-new" "$root$file"
}

if [ -n "$lustre_mount_dir" ]; then
    source="$lustre_dns_name@tcp:/$lustre_mount_name"
    entry="$source $lustre_mount_dir lustre defaults,noatime,flock,_netdev 0 0"
    touch "$root/etc/fstab"
    if ! grep -qxF -- "$entry" "$root/etc/fstab"; then
        [ -z "$(awk -v dir="$lustre_mount_dir" '$1 !~ /^#/ && $2 == dir' "$root/etc/fstab")" ] ||
            die "/etc/fstab mounts something else on $lustre_mount_dir"
        printf '%s\n' "$entry" >>"$root/etc/fstab"
    fi
    if ! mountpoint -q -- "$root$lustre_mount_dir"; then
        install -d -m 0755 "$root$lustre_mount_dir"
        modprobe lustre
        mount -t lustre -o noatime,flock -- "$source" "$root$lustre_mount_dir"
        say "mounted $source on $lustre_mount_dir"
    fi
fi

# The public keys given at create, for ubuntu on the controller and login nodes: clusterkit logs in there over SSH
# through SSM Session Manager. clusterkit's scripts leave ubuntu's home where the image has it.
if [ "${#keys[@]}" -gt 0 ] && [ "$role" != compute ]; then
    if [ ! -d "$root$ubuntu_ssh" ]; then
        install -d -m 0700 "$root$ubuntu_ssh"
        chown ubuntu:ubuntu "$root$ubuntu_ssh"
    fi
    authorized="$root$ubuntu_ssh/authorized_keys"
    for key in "${keys[@]}"; do
        if ! { [ -f "$authorized" ] && grep -qF -- "$key" "$authorized"; }; then
            printf '%s clusterkit\n' "$key" >>"$authorized"
            chmod 0600 "$authorized"
            chown ubuntu:ubuntu "$authorized"
            say "authorized a public key for ubuntu"
        fi
    done
fi

# HyperPod's agent writes slurm.conf; Slurm starts once it names the controller (a login or compute node may have
# none: its slurmd fetches it from the controller).
slurm_conf=/opt/slurm/etc/slurm.conf
waited=0
while [ -f "$root$slurm_conf" ] && ! grep -qwF -- "$controller_ip" "$root$slurm_conf"; do
    [ "$waited" -lt "${CLUSTERKIT_SLURM_CONF_WAIT:-60}" ] ||
        die "$slurm_conf does not name the controller $controller_ip after $waited s"
    sleep 5
    waited=$((waited + 5))
done

if [ "$role" = controller ]; then
    if [ "$accounting" = 1 ]; then
        dbd_conf=/opt/slurm/etc/slurmdbd.conf
        systemctl enable --now mariadb
        if [ ! -f "$root$dbd_conf" ]; then
            # 24 random bytes in hex: nothing in the password ends the SQL string.
            password=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
            printf '%s\n' "CREATE DATABASE IF NOT EXISTS slurm_acct_db;" \
                "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$password';" \
                "ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$password';" \
                "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" | mysql --user=root
            put "$dbd_conf" 0600 "$(printf '%s\n' 'AuthType=auth/munge' 'DbdHost=localhost' 'SlurmUser=slurm' \
                'StorageType=accounting_storage/mysql' 'StorageHost=localhost' 'StorageUser=slurm' \
                "StoragePass=$password" 'StorageLoc=slurm_acct_db' 'LogFile=/var/log/slurmdbd.log' \
                'PidFile=/run/slurmdbd.pid')"
            chown slurm:slurm "$root$dbd_conf"
        fi
        # HyperPod's slurm.conf includes accounting.conf, empty until accounting is set up.
        put /opt/slurm/etc/accounting.conf 0644 "$(printf '%s\n' 'AccountingStorageType=accounting_storage/slurmdbd' \
            "AccountingStorageHost=$controller_ip" 'AccountingStoragePort=6819' \
            'JobAcctGatherType=jobacct_gather/linux')"
        systemctl enable --now slurmdbd
        say "Slurm accounting in MariaDB on the controller"
    fi
    systemctl enable --now slurmctld
else
    put /etc/systemd/system/slurmd.service.d/clusterkit-conf-server.conf 0644 \
        "$(printf '%s\n' '[Service]' "Environment=SLURMD_OPTIONS=--conf-server=$controller_ip")"
    systemctl daemon-reload
    systemctl enable slurmd
    systemctl restart slurmd
fi
say "Slurm started ($role)"

if command -v enroot >/dev/null && [ -n "$enroot_dir" ]; then
    dir=$enroot_root_volume_dir
    if [ "$nvme" = 1 ] && mountpoint -q -- "$root${enroot_dir%/*}"; then
        dir=$enroot_dir
    fi
    for sub in "$dir" "$dir/data" "$dir/cache"; do
        [ -d "$root$sub" ] || install -d -m 1777 "$root$sub"
    done
    conf=/etc/enroot/enroot.conf
    kept=""
    if [ -f "$root$conf" ]; then
        kept=$(grep -v -E '^[[:space:]]*(ENROOT_RUNTIME_PATH|ENROOT_DATA_PATH|ENROOT_CACHE_PATH)([[:space:]]|$)' \
            "$root$conf" || true)
    fi
    # enroot expands $(id -u) and $(id -g) when it runs, for the calling user; this script does not.
    # shellcheck disable=SC2016
    put "$conf" 0644 "$(printf '%s\n' ${kept:+"$kept"} 'ENROOT_RUNTIME_PATH /run/enroot/user-$(id -u)' \
        "ENROOT_DATA_PATH $dir/data/user-\$(id -u)" "ENROOT_CACHE_PATH $dir/cache/group-\$(id -g)")"
    say "enroot keeps its data in $dir"
fi
pyxis=/usr/local/lib/slurm/spank_pyxis.so
if [ -f "$root$pyxis" ]; then
    put /opt/slurm/etc/plugstack.conf.d/pyxis.conf 0644 "required $pyxis runtime_path=/run/pyxis"
    install -d -m 1777 "$root/run/pyxis"
    say "pyxis enabled"
fi

if [ "$role" = controller ] && [ -n "$venv" ]; then
    # Files fetched from S3 keep no execute bit: run them with bash. The cluster agent runs from that virtualenv,
    # after slurmctld, outside every job (clusterkit-agent.service): on HyperPod it also asks for a gone node's
    # replacement.
    bash "$here/clusterkit-venv.sh" --venv "$venv" --package "$package"
    bash "$here/clusterkit-agent.sh" --venv "$venv"
fi
say "done"

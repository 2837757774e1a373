#!/usr/bin/env bash
# Install what the local provider needs on Debian/Ubuntu: Slurm, munge, slurmdbd, MariaDB, and
# OpenSSH (an sshd for `create-cluster --ssh`, the client for clusters reached over SSH), and PMIx
# (for `srun --mpi=pmix`; Slurm's plugin opens the unversioned libpmix.so, which libpmix-dev ships).
# Idempotent; the packaged services are not started (clusterkit starts its own daemons).
#
#   --slurm host    (the default) the host's own Slurm packages (Debian 12: 22.05)
#   --slurm 24.11   also a Debian 13 (trixie) root with Slurm 24.11 in /opt/clusterkit/slurm/24.11, built once with
#                   mmdebstrap and reused: a local cluster created with `--slurm 24.11` runs its daemons, clients and
#                   job steps from it (its /usr bind-mounted over /usr in their mount namespace). The host's MariaDB
#                   serves its accounting.
set -euo pipefail
slurm=host
while [ $# -gt 0 ]; do
  case "$1" in
    --slurm) slurm="${2:-}"; shift 2 || { echo "install-slurm: --slurm needs a value (host or 24.11)" >&2; exit 2; } ;;
    --slurm=*) slurm="${1#--slurm=}"; shift ;;
    *) echo "install-slurm: unknown argument '$1' (use --slurm host|24.11)" >&2; exit 2 ;;
  esac
done
case "$slurm" in
  host|24.11) ;;
  *) echo "install-slurm: --slurm '$slurm' is not a Slurm this script installs; use host or 24.11" >&2; exit 2 ;;
esac

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
policy_added=""
building=""
cleanup() {
  [ -z "$policy_added" ] || $sudo rm -f /usr/sbin/policy-rc.d
  [ -z "$building" ] || $sudo rm -rf "$building"
}
trap cleanup EXIT

install_host_packages() {
  local missing=() package
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    return 0
  fi
  # Keep the packages' own services from starting where no policy-rc.d does so already.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
    $sudo chmod +x /usr/sbin/policy-rc.d
    policy_added=1
  fi
  echo "install-slurm: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

install_host_packages slurm-wlm munge slurmdbd mariadb-server shellcheck util-linux openssh-server openssh-client \
  libpmix2 libpmix-dev
if [ "$slurm" = host ]; then
  echo "install-slurm: host Slurm ready ($(dpkg-query -W -f='${Version}' slurm-wlm))"
  exit 0
fi

# --slurm 24.11: Debian 13's packages in a root of their own. What job steps need besides Slurm: Python's shared
# libraries (python3 brings them; the driving venv's Python itself lives outside /usr), the C++ runtime (PyTorch),
# and the tools a batch script uses.
root=/opt/clusterkit/slurm/24.11
suite=trixie
root_packages=(slurm-wlm slurmctld slurmd slurmdbd slurm-client munge libpmix2t64 libpmix-dev python3 libstdc++6
               libcrypt1 hostname procps)
stamp="$suite ${root_packages[*]}"
if [ -f "$root/.clusterkit-root" ] && [ "$(cat "$root/.clusterkit-root")" = "$stamp" ]; then
  echo "install-slurm: Slurm $(cat "$root/.clusterkit-version") root ready in $root (reused)"
  exit 0
fi
install_host_packages mmdebstrap
started=$(date +%s)
building="$root.building.$$"
$sudo rm -rf "$building"
$sudo mkdir -p "$(dirname "$root")"
echo "install-slurm: building a Debian $suite root with Slurm in $root (once, then reused)"
# Manual pages, documentation and translations are left out: nothing runs them.
$sudo mmdebstrap --variant=essential --mode=root --quiet \
  --include="$(IFS=,; echo "${root_packages[*]}")" \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  "$suite" "$building" "http://deb.debian.org/debian"
# shellcheck disable=SC2016  # dpkg-query's own format, not the shell's
version=$($sudo chroot "$building" dpkg-query -W -f='${Version}' slurmctld)
case "$version" in
  24.11.*) ;;
  *) echo "install-slurm: $suite's slurmctld is $version, not 24.11" >&2; exit 1 ;;
esac
echo "${version%%-*}" | $sudo tee "$building/.clusterkit-version" >/dev/null
echo "$stamp" | $sudo tee "$building/.clusterkit-root" >/dev/null
$sudo rm -rf "$root"
$sudo mv "$building" "$root"
building=""
echo "install-slurm: Slurm ${version%%-*} root ready in $root ($(du -sh "$root" | cut -f1), $(( $(date +%s) - started )) s)"

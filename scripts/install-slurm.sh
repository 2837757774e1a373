#!/usr/bin/env bash
# Install what the local provider needs on Debian/Ubuntu: Slurm, munge, slurmdbd, MariaDB, and
# OpenSSH (an sshd for `create-cluster --ssh`, the client for clusters reached over SSH), and PMIx
# (for `srun --mpi=pmix`; Slurm's plugin opens the unversioned libpmix.so, which libpmix-dev ships).
# Idempotent; the packaged services are not started (clusterkit starts its own daemons).
set -euo pipefail
packages=(slurm-wlm munge slurmdbd mariadb-server shellcheck util-linux openssh-server openssh-client libpmix2 libpmix-dev)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-slurm: all packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
# Keep the packages' own services from starting where no policy-rc.d does so already.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
  $sudo chmod +x /usr/sbin/policy-rc.d
  trap '$sudo rm -f /usr/sbin/policy-rc.d' EXIT
fi
echo "install-slurm: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# Run the whole test suite, set-up included (idempotent). Extra arguments go to pytest.
#   bash scripts/test.sh [--slurm both|host|24.11] [PYTEST ARGS...]
# both (the default): everything on the host's Slurm (Debian 12's 22.05), then the tests marked `slurm` of the
# modules where the two releases were found to differ (the local cluster's daemons, clients, faults and node
# names; describe over SSH) again on Debian 13's Slurm 24.11 (scripts/install-slurm.sh --slurm 24.11 builds its root
# once). After, not beside: on two cores a second session beside the first slows the time-limit tests past their
# bounds and the run past CI's 35 minutes (measured). host or 24.11: everything on that one only (every slurm test
# on 24.11: --slurm 24.11 -m slurm, about 22 minutes).
# Two workers: one runs the tests on the real local cluster, in order (they share it and mostly wait), the other
# everything else beside them, at a lower CPU priority (see tests/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."
slurm=both
if [ "${1:-}" = "--slurm" ]; then
  [ "$#" -ge 2 ] || { echo "test.sh: --slurm needs a value: both, host or 24.11" >&2; exit 2; }
  slurm=$2
  shift 2
fi
case "$slurm" in
  both | host | 24.11) ;;
  *) echo "test.sh: --slurm $slurm: not one of both, host, 24.11" >&2; exit 2 ;;
esac
bash scripts/setup-dev.sh
[ "$slurm" = host ] || bash scripts/install-slurm.sh --slurm 24.11
if [ "$slurm" != both ]; then
  CLUSTERKIT_TEST_SLURM=$slurm exec .venv/bin/python -m pytest --numprocesses=2 --dist=loadgroup "$@"
fi
status=0
CLUSTERKIT_TEST_SLURM=host .venv/bin/python -m pytest --numprocesses=2 --dist=loadgroup "$@" || status=$?
echo "== the tests marked slurm where 22.05 and 24.11 differ, on Slurm 24.11"
CLUSTERKIT_TEST_SLURM=24.11 .venv/bin/python -m pytest "$@" -m slurm \
  tests/providers/test_local_cluster.py tests/providers/test_local_faults.py tests/providers/test_local_isolation.py \
  tests/test_remote_ssh.py || status=$?
exit "$status"

#!/usr/bin/env bash
# Run the whole test suite, set-up included (idempotent). Extra arguments go to pytest.
#   bash scripts/test.sh [--slurm both|host|24.11] [PYTEST ARGS...]
# both (the default): everything on the host's Slurm (Debian 12's 22.05) and, beside it in a second pytest session,
# the tests marked `slurm` again on Debian 13's Slurm 24.11 (scripts/install-slurm.sh --slurm 24.11 builds its root
# once); the two sessions' clusters have homes and ports of their own. host or 24.11: everything on that one only.
# Two workers in the main session: one runs the tests on the real local cluster, in order (they share it and mostly
# wait), the other everything else beside them, at a lower CPU priority (see tests/conftest.py).
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
newer_log=$(mktemp)
trap 'rm -f "$newer_log"' EXIT
CLUSTERKIT_TEST_SLURM=24.11 .venv/bin/python -m pytest "$@" -m slurm >"$newer_log" 2>&1 &
newer=$!
status=0
CLUSTERKIT_TEST_SLURM=host .venv/bin/python -m pytest --numprocesses=2 --dist=loadgroup "$@" || status=$?
newer_status=0
wait "$newer" || newer_status=$?
echo "== beside it: the tests marked slurm, on Slurm 24.11 (exit $newer_status)"
cat "$newer_log"
[ "$status" -ne 0 ] || status=$newer_status
exit "$status"

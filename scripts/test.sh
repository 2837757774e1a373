#!/usr/bin/env bash
# Run the whole test suite, set-up included (idempotent). Extra arguments go to pytest.
# Two workers: one runs the tests on the real local cluster, in order (they share it and mostly wait),
# the other everything else beside them, at a lower CPU priority (see tests/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-dev.sh
exec .venv/bin/python -m pytest --numprocesses=2 --dist=loadgroup "$@"

#!/usr/bin/env bash
# Run the whole test suite, set-up included (idempotent). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-dev.sh
exec .venv/bin/python -m pytest "$@"

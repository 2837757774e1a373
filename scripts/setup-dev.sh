#!/usr/bin/env bash
# Set up a development environment: system packages, then a virtualenv in .venv with clusterkit
# and its dev, validate, torch and timeline extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-slurm.sh
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
stamp=.venv/.clusterkit-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # torch 2.13.0 is the CPU build these machines carry; numpy for it.
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev,validate,torch,timeline]' 'torch==2.13.0'
  touch "$stamp"
fi
echo "setup-dev: ready (.venv)"

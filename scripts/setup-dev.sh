#!/usr/bin/env bash
# Set up a development environment: system packages, then a virtualenv in .venv with clusterkit
# and its dev, validate, torch and timeline extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-slurm.sh
# Headless Chromium for the timeline's browser test (tests/jobs/test_timeline_browser.py), which skips without it
# except in CI: there a failed install fails here.
if ! command -v chromium >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup-dev: installing chromium"
  if ! { $sudo apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium; }; then
    [ -z "${CI:-}" ] || { echo "setup-dev: chromium did not install" >&2; exit 1; }
    echo "setup-dev: no chromium: the timeline's browser test will be skipped" >&2
  fi
fi
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

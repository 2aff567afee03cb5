#!/usr/bin/env bash
# Installs skbnngp with the given extras, keeping an already installed torch. On a bare
# machine it installs the CPU wheel torch==2.13.0 first, so pip never pulls the multi-GB
# CUDA build. Usage: bash scripts/install.sh [extras]   (e.g. "test" or "examples")
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  "$PY" -m pip install --quiet "torch==2.13.0"
fi
extras="${1:-}"
if [ -n "$extras" ]; then
  "$PY" -m pip install --quiet -e ".[${extras}]"
else
  "$PY" -m pip install --quiet -e .
fi

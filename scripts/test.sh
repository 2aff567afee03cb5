#!/usr/bin/env bash
# The README's test command: install (keeping any torch) and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh test
exec "${PYTHON:-python3}" -m pytest -q -p no:cacheprovider "$@"

#!/usr/bin/env bash
# Installs everything (browser included), then runs the whole test suite and the linter.
#   scripts/test.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --browser
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"

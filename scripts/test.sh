#!/usr/bin/env bash
# Installs everything (browser included), then runs the whole test suite and the linter.
#   scripts/test.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
# The Ray extra too, so the Ray executor's tests start their real two-node cluster (KB_WITH_RAY=0 skips them).
KB_WITH_RAY="${KB_WITH_RAY:-1}" bash scripts/install.sh --browser
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"

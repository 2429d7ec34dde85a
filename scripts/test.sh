#!/usr/bin/env bash
# Installs everything (browser included), then runs the linter, the whole test suite on Python 3.11 and the smoke set
# (tests/smoke) on Python 3.12 and 3.13 (scripts/smoke_pythons.sh).
#   scripts/test.sh [pytest arguments]   with arguments: only that pytest run, on 3.11
#   KB_SMOKE_PYTHONS=0 scripts/test.sh   leaves the other Pythons out
set -euo pipefail
cd "$(dirname "$0")/.."
# The Ray extra too, so the Ray executor's tests start their real two-node cluster (KB_WITH_RAY=0 skips them).
KB_WITH_RAY="${KB_WITH_RAY:-1}" bash scripts/install.sh --browser
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
if [ "$#" = 0 ] && [ "${KB_SMOKE_PYTHONS:-1}" != 0 ]; then
  bash scripts/smoke_pythons.sh 3.12 3.13
fi

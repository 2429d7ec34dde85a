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
smoke=0
[ "$#" = 0 ] && [ "${KB_SMOKE_PYTHONS:-1}" != 0 ] && smoke=1
if [ "$smoke" = 1 ]; then
  # The other Pythons' environments install (mostly downloads and disk) while the suite runs.
  smoke_log="$(mktemp)"
  bash scripts/smoke_pythons.sh --install-only 3.12 3.13 >"$smoke_log" 2>&1 &
  smoke_install=$!
  trap 'kill "$smoke_install" 2>/dev/null || true' EXIT
fi
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
if [ "$smoke" = 1 ]; then
  if ! wait "$smoke_install"; then
    grep -v "is ignored: it is neither" "$smoke_log" >&2
    echo "smoke: installing Python 3.12 / 3.13 environments failed (above)" >&2
    exit 1
  fi
  bash scripts/smoke_pythons.sh 3.12 3.13
fi

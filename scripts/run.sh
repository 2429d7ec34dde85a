#!/usr/bin/env bash
# Installs everything, then serves the app on a ready demo knowledge base (built on first start).
#   PORT=8501 KB_HOME=data/home scripts/run.sh
#   scripts/run.sh --demo     a public demo (KB_DEMO=1): visitors in sandboxes, quotas, an operator (README: Deployment)
set -euo pipefail
cd "$(dirname "$0")/.."
demo=0
if [ "${1:-}" = "--demo" ]; then
  demo=1
elif [ -n "${1:-}" ]; then
  echo "usage: scripts/run.sh [--demo]" >&2
  exit 2
fi
bash scripts/install.sh
if [ "$demo" = 1 ]; then
  export KB_DEMO=1
fi
exec bash scripts/serve.sh

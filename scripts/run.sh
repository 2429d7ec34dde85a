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
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
extra=()
if [ "$demo" = 1 ]; then
  export KB_DEMO=1
  # Streamlit refuses a larger upload in the browser, before it reaches the server (whose memory holds uploads).
  extra+=(--server.maxUploadSize "$(.venv/bin/python -c 'from kb_core.public_demo import DemoLimits as D; print(D.from_environment().upload_limit_mb)')")
fi
exec .venv/bin/streamlit run app.py --server.port "${PORT:-8501}" --server.address "${ADDRESS:-127.0.0.1}" \
  --server.headless true --browser.gatherUsageStats false --client.toolbarMode viewer ${extra[@]+"${extra[@]}"}

#!/usr/bin/env bash
# Installs everything, then serves the app on a ready demo knowledge base (built on first start).
#   PORT=8501 KB_HOME=data/home scripts/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/streamlit run app.py --server.port "${PORT:-8501}" --server.address "${ADDRESS:-127.0.0.1}" \
  --server.headless true --browser.gatherUsageStats false --client.toolbarMode viewer

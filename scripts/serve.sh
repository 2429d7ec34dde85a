#!/usr/bin/env bash
# Serves the app, the one way it is served: scripts/run.sh (after installing), the browser tests,
# benchmarks/bench_app.py and scripts/screenshots.py all start it with this script. Settings are in
# .streamlit/config.toml (file watcher off, headless); serve.py wraps app.py so that stopping the server (SIGTERM,
# Ctrl-C) cancels the running imports first and exits within seconds.
#   PORT=8501 ADDRESS=127.0.0.1 KB_HOME=data/home scripts/serve.sh      (PYTHON: the interpreter, default .venv's)
#   KB_DEMO=1 scripts/serve.sh                                          a public demo (README: Deployment)
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python="${PYTHON:-.venv/bin/python}"
extra=()
if [ "${KB_DEMO:-}" = 1 ]; then
  # Streamlit refuses a larger upload in the browser, before it reaches the server (whose memory holds uploads).
  extra+=(--server.maxUploadSize "$("$python" -c 'from kb_core.session.public_demo import DemoLimits as D; print(D.from_environment().upload_limit_mb)')")
fi
exec "$python" -m streamlit run serve.py \
  --server.port "${PORT:-8501}" --server.address "${ADDRESS:-127.0.0.1}" ${extra[@]+"${extra[@]}"}

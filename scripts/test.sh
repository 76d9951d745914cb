#!/usr/bin/env bash
# The whole test suite, as CI runs it: set-up, then ruff, mypy and pytest.
# pytest's exit code 5 ("no tests ran") fails the run like any other failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$PWD/.tools/bin:$PATH"
echo "== ruff"
.venv/bin/ruff check operator tests benchmarks scripts
.venv/bin/ruff format --check operator tests benchmarks scripts
echo "== mypy"
.venv/bin/mypy
echo "== pytest"
.venv/bin/python -m pytest "$@"

#!/usr/bin/env bash
# Set up a virtual environment (once) and run the whole test suite:
# unit tests, real-kernel tests with the shipped fake agent, and the notebooks under nbval.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k manifest`).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${ESCOUADE_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[test]"
exec "$venv/bin/python" -m pytest "$@"

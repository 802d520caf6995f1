#!/usr/bin/env bash
# Set up a virtual environment (once) and open JupyterLab on the quickstart notebook,
# which drives the shipped scripted agent `fake` (no model, no network needed).
# Extra arguments go to `jupyter lab` (e.g. `--port 8899`).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${ESCOUADE_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[lab]"
extra=()
[ "$(id -u)" = 0 ] && extra+=(--allow-root)
exec "$venv/bin/jupyter" lab --ip=127.0.0.1 "${extra[@]}" "$@" notebooks/01-quickstart.ipynb

#!/usr/bin/env bash
# Set up a virtual environment (once) and open JupyterLab on the quickstart notebook,
# which drives the shipped scripted agent `fake` (no model, no network needed).
# Extra arguments go to `jupyter lab` (e.g. `--port 8899`, `--no-browser`). The URL it prints
# (and opens) is the quickstart notebook's, token included, not the Launcher's.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${ESCOUADE_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[lab]"
extra=()
[ "$(id -u)" = 0 ] && extra+=(--allow-root)
# the notebook as the server's default URL: the URL printed (and the one opened) is the notebook's
exec "$venv/bin/jupyter" lab --ip=127.0.0.1 --LabApp.default_url=/lab/tree/notebooks/01-quickstart.ipynb \
    "${extra[@]}" "$@"

#!/usr/bin/env bash
# Take the README's pictures again from a real JupyterLab: the browser suite (tests/browser: JupyterLab on
# 127.0.0.1 in throw-away folders, driven by Python playwright through Debian's chromium; never
# `playwright install`) runs the tests that take them, with ESCOUADE_BROWSER_UPDATE_DOCS=1 so that each
# picture named in tests/browser/conftest.py's DOCS_SHOTS is copied to docs/. Each picture must stay small.
#
#   bash scripts/docs-pictures.sh [VENV] [TEST_FILE…]
#
# VENV: the project's environment with jupyterlab and playwright (default $ESCOUADE_VENV, else .venv;
# bash scripts/ci-browser.sh VENV installs them). TEST_FILE: default the front page's picture of a reviewed
# cell (docs/reviewed-cell.png, from tests/browser/test_lab_fake_agent_cells.py).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-${ESCOUADE_VENV:-.venv}}"
shift || true
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(tests/browser/test_lab_fake_agent_cells.py)
max=150000  # bytes: a README picture is cropped to what it shows

before=$(date +%s)
ESCOUADE_BROWSER_UPDATE_DOCS=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}"
status=0
for png in docs/*.png; do
    [ "$(stat -c %Y "$png")" -ge "$before" ] || continue
    size=$(stat -c %s "$png")
    echo "docs-pictures: $png ($size bytes)"
    if [ "$size" -ge "$max" ]; then
        echo "docs-pictures: $png is $size bytes, over $max: crop it to what it shows" >&2
        status=1
    fi
done
exit "$status"

#!/usr/bin/env bash
# Install what the browser suite (tests/browser) needs on a fresh Debian machine:
#   - Debian's chromium (apt) and fonts for legible screenshots, unless /usr/bin/chromium is there;
#   - Python playwright, JupyterLab and Notebook 7 into the given virtual environment (created if missing).
# Playwright drives /usr/bin/chromium; it never downloads a browser (no `playwright install`).
#
#   bash scripts/ci-browser.sh VENV        # e.g. bash scripts/ci-browser.sh "$ESCOUADE_VENV"
#
# Then `VENV/bin/python -m pytest tests/browser` (or the whole suite) runs it; without chromium or
# playwright the browser tests are skipped with a one-line reason.
set -euo pipefail
venv="${1:-${ESCOUADE_VENV:-.venv}}"

# shellcheck source=as-root.sh
. "$(dirname "$0")/as-root.sh"
if [ ! -x /usr/bin/chromium ]; then
    if ! can_be_root; then
        echo "ci-browser: /usr/bin/chromium is missing and this user cannot run apt-get (not root, no sudo)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -q
    as_root apt-get install -y -q chromium fonts-liberation fonts-dejavu-core
fi

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "playwright>=1.45,<2" "jupyterlab>=4,<5" "notebook>=7,<8"

/usr/bin/chromium --version 2>/dev/null | sed 's/^/ci-browser: /'
"$venv/bin/python" - <<'EOF'
from importlib.metadata import version
print(f"ci-browser: playwright {version('playwright')}, jupyterlab {version('jupyterlab')}, notebook {version('notebook')}")
EOF

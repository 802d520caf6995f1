#!/usr/bin/env bash
# The JupyterLab 4 / Notebook 7 extension (labextension/: the kernel's channel to its notebook's page).
# The package's build makes it: `pip install -e .` (what scripts/test.sh and scripts/demo.sh run) and a wheel
# build run `npm ci` (labextension/package-lock.json) and its build into labextension/prebuilt/ and
# widgets/escouade.js (the views' module, from widgets/src; both git-ignored) when a source is newer than them
# (labextension/stale.py). This rebuilds them by hand, the same way, without pip:
#
#   bash scripts/labextension.sh        # npm ci (when node_modules is missing or older than the lock), build
#
# then `pip install -e .` again (an editable install copies the build at install time). Needs node ≥ 20 and
# npm (the npm registry, or a warm npm cache).
set -euo pipefail
cd "$(dirname "$0")/../labextension"
node npm-ci.mjs install
rm -rf prebuilt
npm run --silent build
echo "labextension: built labextension/prebuilt ($(du -sh prebuilt | cut -f1))"

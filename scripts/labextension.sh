#!/usr/bin/env bash
# The JupyterLab 4 / Notebook 7 extension (labextension/: the kernel's channel to its notebook's page).
# Its build, labextension/prebuilt/, is committed: `pip install` and `pip install -e .` use it as is
# (hatch-jupyter-builder's skip-if-exists), so a clone needs no node. After a change to labextension/src:
#
#   bash scripts/labextension.sh           # npm ci (first time), then rebuild labextension/prebuilt/
#   bash scripts/labextension.sh --check   # CI: rebuild from the sources in a temporary copy (a fresh
#                                          # `npm ci` from package-lock.json); exit 1 if it differs
#
# Needs node ≥ 20 and npm (the npm registry, or a warm npm cache).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--check" ]; then
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    mkdir "$work/labextension"
    cp -r labextension/package.json labextension/package-lock.json labextension/build.mjs labextension/webpack.config.js \
        labextension/src \
        "$work/labextension/"
    started=$SECONDS
    (cd "$work/labextension" && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build >/dev/null)
    if diff -r "$work/labextension/prebuilt" labextension/prebuilt; then
        echo "labextension: a rebuild from the sources gives the committed labextension/prebuilt ($((SECONDS - started)) s)"
    else
        echo "labextension: labextension/prebuilt differs from a rebuild of labextension/src:" \
             "run bash scripts/labextension.sh and commit labextension/prebuilt" >&2
        exit 1
    fi
    exit 0
fi
cd labextension
[ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error
rm -rf prebuilt
npm run --silent build
echo "labextension: built labextension/prebuilt ($(du -sh prebuilt | cut -f1))"

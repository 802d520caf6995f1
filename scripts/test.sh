#!/usr/bin/env bash
# Set up a virtual environment (once) and run the tests.
#   bash scripts/test.sh          everything: unit tests, real-kernel tests with the shipped fake agent,
#                                 and the notebooks under nbval (the browser and agent suites skip with a
#                                 reason when their tools are missing)
#   bash scripts/test.sh --fast   the one-minute loop: tests/core, tests/wire, tests/permissions (no kernel)
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k manifest`, `bash scripts/test.sh --fast -x`);
# a path among them (a word with a / , a .py or .ipynb file, tests, notebooks) replaces the default
# ones (e.g. `bash scripts/test.sh tests/engine`).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${ESCOUADE_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[test]"
fast=0
args=()
paths=0
for arg in "$@"; do
    if [ "$arg" = "--fast" ]; then
        fast=1
        continue
    fi
    case "$arg" in -*) ;; tests|notebooks|*/*|*.py|*.py::*|*.ipynb) paths=1 ;; esac
    args+=("$arg")
done
if [ "$fast" = 1 ]; then
    [ "$paths" = 1 ] || args=(tests/core tests/wire tests/permissions "${args[@]}")
    exec "$venv/bin/python" -m pytest "${args[@]}"
fi
# the notebooks under nbval: run as a reader runs them, outputs compared to the saved ones
[ "$paths" = 1 ] || args=(tests notebooks "${args[@]}")
exec "$venv/bin/python" -m pytest --nbval --nbval-current-env --nbval-sanitize-with notebooks/nbval-sanitize.cfg \
    "${args[@]}"

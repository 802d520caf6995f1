#!/usr/bin/env bash
# Set up a virtual environment (once) and run the tests.
#   bash scripts/test.sh          everything, in two runs whose exit codes both count:
#                                 1. unit tests, real-kernel tests with the shipped fake agent, the released
#                                    agents' suite and the notebooks under nbval: everything but tests/browser,
#                                    spread over pytest-xdist workers a file at a time (`--dist loadfile`: a
#                                    module's kernel is started once, a notebook's cells stay together; the
#                                    kernel tests mostly wait on kernels and agents: workers overlap the waits);
#                                 2. the browser suite, in one process (one JupyterLab and one chromium for the
#                                    whole suite; it skips with a reason when its tools are missing)
#   bash scripts/test.sh --fast   the one-minute loop: tests/core, tests/wire, tests/permissions (no kernel), in
#                                 workers too
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k manifest`, `bash scripts/test.sh --fast -x`), to
# both runs; a path among them (a word with a / , a .py or .ipynb file, tests, notebooks) replaces the default
# ones and makes one run, in one process unless a -n is given (e.g. `bash scripts/test.sh tests/engine -n 4`).
# ESCOUADE_TEST_WORKERS sets the number of workers (default 4 for the whole run: its kernel tests wait on
# kernels and agents more than they compute; 2 for --fast, whose tests compute — starting Python programs —
# and ran faster on 2 workers than on 4 on a 2-core machine; measured in issue 33).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${ESCOUADE_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[test]"
workers=(--dist loadfile -n)
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
pytest=("$venv/bin/python" -m pytest)
# the notebooks under nbval: run as a reader runs them, outputs compared to the saved ones
nbval=(--nbval --nbval-current-env --nbval-sanitize-with notebooks/nbval-sanitize.cfg)
if [ "$paths" = 1 ]; then
    [ "$fast" = 1 ] && exec "${pytest[@]}" "${args[@]}"
    exec "${pytest[@]}" -n 0 "${nbval[@]}" "${args[@]}"
fi
if [ "$fast" = 1 ]; then
    exec "${pytest[@]}" "${workers[@]}" "${ESCOUADE_TEST_WORKERS:-2}" tests/core tests/wire tests/permissions "${args[@]}"
fi
# exit code 5 (nothing collected: a -k that picks tests of one run only) counts as a pass when the other run ran
status=0
"${pytest[@]}" "${workers[@]}" "${ESCOUADE_TEST_WORKERS:-4}" "${nbval[@]}" tests notebooks --ignore=tests/browser \
    "${args[@]}" || status=$?
second=0
"${pytest[@]}" tests/browser "${args[@]}" -n 0 || second=$?
if [ "$status" = 5 ] && [ "$second" != 5 ]; then status=0; fi
if [ "$second" != 0 ] && [ "$second" != 5 ] && [ "$status" = 0 ]; then status=$second; fi
if [ "$status" != 0 ]; then echo "scripts/test.sh: the runs failed (exit codes: $status, $second)" >&2; fi
exit "$status"

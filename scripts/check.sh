#!/usr/bin/env bash
# The tool belt: ruff (lint) on the package, scripts/, benchmarks/ and tests/, and mypy (types, with
# the pydantic plugin) on the package, both as configured in pyproject.toml. Installs the
# `test` and `dev` extras into the virtual environment scripts/test.sh uses (ESCOUADE_VENV,
# else .venv). Their caches go outside the checkout: MYPY_CACHE_DIR and RUFF_CACHE_DIR, else
# ~/.cache/escouade_nb/{mypy,ruff}. Runs both, then exits non-zero if either found anything.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${ESCOUADE_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[test,dev]"
caches="${XDG_CACHE_HOME:-$HOME/.cache}/escouade_nb"
mypy_cache="${MYPY_CACHE_DIR:-$caches/mypy}"
ruff_cache="${RUFF_CACHE_DIR:-$caches/ruff}"
failed=0
echo "ruff check escouade_nb scripts benchmarks tests"
"$venv/bin/python" -m ruff check --cache-dir "$ruff_cache" escouade_nb scripts benchmarks tests || failed=1
echo "mypy (cache: $mypy_cache)"
"$venv/bin/python" -m mypy --cache-dir "$mypy_cache" || failed=1
exit "$failed"

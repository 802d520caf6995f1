#!/usr/bin/env bash
# The tool belt: ruff (lint) on the package, scripts/ and benchmarks/, and mypy (types, with
# the pydantic plugin) on the package, both as configured in pyproject.toml. Installs the
# `test` and `dev` extras into the virtual environment scripts/test.sh uses (ESCOUADE_VENV,
# else .venv); mypy's cache goes outside the checkout (MYPY_CACHE_DIR, else
# ~/.cache/escouade_nb/mypy). Runs both, then exits non-zero if either found anything.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${ESCOUADE_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[test,dev]"
cache="${MYPY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/escouade_nb/mypy}"
failed=0
echo "ruff check escouade_nb scripts benchmarks"
"$venv/bin/python" -m ruff check escouade_nb scripts benchmarks || failed=1
echo "mypy (cache: $cache)"
"$venv/bin/python" -m mypy --cache-dir "$cache" || failed=1
exit "$failed"

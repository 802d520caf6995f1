#!/usr/bin/env bash
# Install the released ACP agents that tests/agents/ drives, at the versions the
# shipped manifests were tested with, into a cache folder OUTSIDE the repository:
#
#   ${ESCOUADE_AGENTS_DIR:-$HOME/.cache/escouade_nb/agents}/<agent>/
#       PyPI agents: a Python virtual environment (programs in <agent>/bin)
#       npm agents:  an npm prefix             (programs in <agent>/node_modules/.bin)
#
# Usage: scripts/install-agents.sh [AGENT ...]
#   AGENT is one of: mistral-vibe fast-agent kimi claude-agent codex opencode gemini
#   (none given = all seven; goose is not on PyPI/npm, its tests use a scripted stand-in).
#
# Each agent is installed into a fresh temporary folder that replaces the old one only
# on success, so an interrupted run never leaves a half-installed agent behind. A line
# "installed AGENT VERSION in N s" is printed per agent (and appended to
# <dir>/install-times.tsv). Exit status: the number of agents that failed (0 = all ok).
#
# The PyPI agents need Python >= 3.12: $ESCOUADE_AGENTS_PYTHON, else python3.13 /
# python3.12 on PATH, else a pyenv 3.13 / 3.12 install. npm agents need node >= 20.
set -u

DIR="${ESCOUADE_AGENTS_DIR:-$HOME/.cache/escouade_nb/agents}"
ALL=(mistral-vibe fast-agent kimi claude-agent codex opencode gemini)

# agent -> "pypi|npm  package==version / package@version  program"
spec() {
    case "$1" in
        mistral-vibe) echo "pypi mistral-vibe==3.0.2 vibe-acp" ;;
        fast-agent)   echo "pypi fast-agent-mcp==0.10.48 fast-agent-acp" ;;
        kimi)         echo "pypi kimi-cli==1.51.0 kimi" ;;
        claude-agent) echo "npm @zed-industries/claude-agent-acp@0.23.1 claude-agent-acp" ;;
        codex)        echo "npm @zed-industries/codex-acp@0.16.0 codex-acp" ;;
        opencode)     echo "npm opencode-ai@1.18.33 opencode" ;;
        gemini)       echo "npm @google/gemini-cli@0.61.0 gemini" ;;
        *) return 1 ;;
    esac
}

find_python() {
    if [ -n "${ESCOUADE_AGENTS_PYTHON:-}" ]; then echo "$ESCOUADE_AGENTS_PYTHON"; return 0; fi
    local c
    for c in python3.13 python3.12; do
        if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
            command -v "$c"; return 0
        fi
    done
    local root="${PYENV_ROOT:-$HOME/.pyenv}"
    for c in "$root"/versions/3.13*/bin/python3 "$root"/versions/3.12*/bin/python3; do
        if [ -x "$c" ]; then echo "$c"; return 0; fi
    done
    for c in python3; do
        if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
            command -v "$c"; return 0
        fi
    done
    return 1
}

install_one() {
    local agent="$1" kind pkg prog dest start secs
    read -r kind pkg prog < <(spec "$agent")
    dest="$DIR/$agent"
    # Venvs are not relocatable: install in place; the marker file .installed (written
    # last) is what tests/agents/ looks for, so a half-finished install counts as absent.
    rm -rf "$dest"
    mkdir -p "$dest"
    start=$(date +%s.%N)
    if [ "$kind" = pypi ]; then
        local py
        py="$(find_python)" || { echo "$agent: needs Python >= 3.12 (set ESCOUADE_AGENTS_PYTHON)" >&2; return 1; }
        { "$py" -m venv "$dest" && "$dest/bin/python" -m pip install --quiet "$pkg"; } >"$dest/install.log" 2>&1 \
            || { echo "$agent: install failed, log: $dest/install.log" >&2; tail -5 "$dest/install.log" >&2; return 1; }
    else
        command -v npm >/dev/null 2>&1 || { echo "$agent: npm not found" >&2; return 1; }
        npm install --prefix "$dest" --no-audit --no-fund --loglevel=error "$pkg" >"$dest/install.log" 2>&1 \
            || { echo "$agent: install failed, log: $dest/install.log" >&2; tail -5 "$dest/install.log" >&2; return 1; }
        mkdir -p "$dest/bin"
        ln -sf "../node_modules/.bin/$prog" "$dest/bin/$prog"
    fi
    [ -x "$dest/bin/$prog" ] || { echo "$agent: $prog missing after install" >&2; return 1; }
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
    printf '%s\n' "$pkg" >"$dest/.installed"
    echo "installed $agent ($pkg) in $secs s"
    printf '%s\t%s\t%s\t%s\n' "$agent" "$pkg" "$secs" "$(date -u +%FT%TZ)" >>"$DIR/install-times.tsv"
}

agents=("$@")
[ ${#agents[@]} -eq 0 ] && agents=("${ALL[@]}")
for a in "${agents[@]}"; do
    spec "$a" >/dev/null || { echo "unknown agent: $a (known: ${ALL[*]})" >&2; exit 2; }
done

mkdir -p "$DIR"
# Installs run in parallel; ESCOUADE_AGENTS_JOBS=1 makes them sequential.
jobs_max="${ESCOUADE_AGENTS_JOBS:-4}"
for a in "${agents[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 0.5; done
    install_one "$a" &
done
wait
failed=0
for a in "${agents[@]}"; do [ -f "$DIR/$a/.installed" ] || failed=$((failed + 1)); done
echo "agents in $DIR (failed: $failed)"
exit "$failed"

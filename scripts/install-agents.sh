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
# Each agent is installed into a fresh folder beside its target (<dir>/<agent>.XXXXXX, the
# path it keeps: venvs are not relocatable); only once that install is complete does
# <dir>/<agent>, a symlink, switch to it — one rename(2), atomic — and the previous install
# go. A failed or interrupted install leaves the installed agent as it was (its log:
# <dir>/<agent>.install.log). Two runs installing the same agent take turns (flock on
# <dir>/.<agent>.lock); different agents install in parallel. A line "installed AGENT
# (PACKAGE) in N s" is printed per agent (and appended to <dir>/install-times.tsv). Exit
# status: the number of agents that failed (0 = all ok).
#
# ESCOUADE_AGENT_SPEC_<AGENT> (upper case, "-" as "_") replaces an agent's line below,
# "pypi|npm PACKAGE PROGRAM" (PACKAGE: anything pip or npm installs, a path too), e.g. to
# try another version.
#
# The PyPI agents need Python >= 3.12: $ESCOUADE_AGENTS_PYTHON, else python3.13 /
# python3.12 on PATH, else a pyenv 3.13 / 3.12 install. npm agents need node >= 20.
set -u

DIR="${ESCOUADE_AGENTS_DIR:-$HOME/.cache/escouade_nb/agents}"
ALL=(mistral-vibe fast-agent kimi claude-agent codex opencode gemini)

# agent -> "pypi|npm  package==version / package@version  program"
spec() {
    local line var
    case "$1" in
        mistral-vibe) line="pypi mistral-vibe==3.0.2 vibe-acp" ;;
        fast-agent)   line="pypi fast-agent-mcp==0.10.48 fast-agent-acp" ;;
        kimi)         line="pypi kimi-cli==1.51.0 kimi" ;;
        claude-agent) line="npm @zed-industries/claude-agent-acp@0.23.1 claude-agent-acp" ;;
        codex)        line="npm @zed-industries/codex-acp@0.16.0 codex-acp" ;;
        opencode)     line="npm opencode-ai@1.18.33 opencode" ;;
        gemini)       line="npm @google/gemini-cli@0.61.0 gemini" ;;
        *) return 1 ;;
    esac
    var="ESCOUADE_AGENT_SPEC_${1//-/_}"
    var="${var^^}"
    echo "${!var:-$line}"
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
    # In a subshell of its own (each agent is a background job): its lock, its trap.
    local agent="$1" kind pkg prog link build log start secs old
    read -r kind pkg prog < <(spec "$agent")
    link="$DIR/$agent"
    log="$DIR/$agent.install.log"
    # One install of an agent at a time, whatever runs it: a lock beside the target.
    exec {lock_fd}>"$DIR/.$agent.lock"
    if ! flock -n "$lock_fd"; then
        echo "$agent: waiting for another install of it to finish"
        flock "$lock_fd"
    fi
    # Builds of it left by an install that was killed (the lock is ours: none is under way)
    local current stale
    current="$(readlink "$link" 2>/dev/null || true)"
    for stale in "$DIR/$agent".??????; do
        [ -d "$stale" ] && [ ! -L "$stale" ] && [ "$(basename "$stale")" != "$current" ] && rm -rf "$stale"
    done
    # A fresh folder beside the target, at the path it keeps (venvs are not relocatable);
    # until the swap below, the installed agent (if any) is untouched.
    build="$(mktemp -d "$DIR/$agent.XXXXXX")"
    trap 'rm -rf "$build"' EXIT
    trap 'exit 1' TERM HUP  # the EXIT trap runs then too
    start=$(date +%s.%N)
    if [ "$kind" = pypi ]; then
        local py
        py="$(find_python)" || { echo "$agent: needs Python >= 3.12 (set ESCOUADE_AGENTS_PYTHON)" >&2; return 1; }
        { "$py" -m venv "$build" && "$build/bin/python" -m pip install --quiet "$pkg"; } >"$log" 2>&1 \
            || { echo "$agent: install failed (the installed one, if any, is kept), log: $log" >&2
                 tail -5 "$log" >&2; return 1; }
    else
        command -v npm >/dev/null 2>&1 || { echo "$agent: npm not found" >&2; return 1; }
        npm install --prefix "$build" --no-audit --no-fund --loglevel=error "$pkg" >"$log" 2>&1 \
            || { echo "$agent: install failed (the installed one, if any, is kept), log: $log" >&2
                 tail -5 "$log" >&2; return 1; }
        mkdir -p "$build/bin"
        ln -sf "../node_modules/.bin/$prog" "$build/bin/$prog"
    fi
    [ -x "$build/bin/$prog" ] || { echo "$agent: $prog missing after install (the installed one, if any, is kept)" >&2
                                   return 1; }
    chmod 755 "$build"  # mktemp made it 700
    printf '%s\n' "$pkg" >"$build/.installed"
    # The swap: <agent> is a symlink to its build, replaced by rename(2), atomic.
    old="$(readlink "$link" 2>/dev/null || true)"
    if [ -e "$link" ] && [ ! -L "$link" ]; then  # an install of the old layout (a folder): set aside once
        old="$link.previous-$$"
        mv "$link" "$old"
    fi
    ln -s "$(basename "$build")" "$link.new-$$" && mv -T "$link.new-$$" "$link" \
        || { rm -f "$link.new-$$"; echo "$agent: could not swap the new install in" >&2; return 1; }
    trap - EXIT
    case "$old" in  # the previous install goes, once the new one is in
        "" | "$(basename "$build")") ;;
        /*) rm -rf "$old" ;;
        *) rm -rf "${DIR:?}/$old" ;;
    esac
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
    echo "installed $agent ($pkg) in $secs s"
    printf '%s\t%s\t%s\t%s\n' "$agent" "$pkg" "$secs" "$(date -u +%FT%TZ)" >>"$DIR/install-times.tsv"
}

agents=("$@")
[ ${#agents[@]} -eq 0 ] && agents=("${ALL[@]}")
for a in "${agents[@]}"; do
    spec "$a" >/dev/null || { echo "unknown agent: $a (known: ${ALL[*]})" >&2; exit 2; }
done

command -v flock >/dev/null 2>&1 || { echo "install-agents: needs flock (util-linux)" >&2; exit 2; }
mkdir -p "$DIR"
# Installs run in parallel; ESCOUADE_AGENTS_JOBS=1 makes them sequential.
jobs_max="${ESCOUADE_AGENTS_JOBS:-4}"
pids=()
for a in "${agents[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 0.5; done
    install_one "$a" &
    pids+=("$!")
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
echo "agents in $DIR (failed: $failed)"
exit "$failed"

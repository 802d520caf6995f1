#!/usr/bin/env bash
# Install Debian's bubblewrap (`bwrap`) and passt (which ships `pasta`, the sandbox's user-mode network) for
# the sandbox tests (tests/engine/launch/test_sandbox_bwrap.py, tests/adversarial/test_sandbox_*.py, the sandboxed
# released agents of tests/agents/), unless both are on PATH. They need no daemon and no setuid: user
# namespaces, or root. Without them those tests are skipped with a one-line reason.
set -euo pipefail
if command -v bwrap >/dev/null 2>&1 && command -v pasta >/dev/null 2>&1; then
    exit 0
fi
# shellcheck source=as-root.sh
. "$(dirname "$0")/as-root.sh"
if ! can_be_root; then
    echo "ci-bubblewrap: bwrap or pasta is missing and this user cannot run apt-get (not root, no sudo)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
as_root apt-get install -y -q bubblewrap passt \
    || { as_root apt-get update -q && as_root apt-get install -y -q bubblewrap passt; }
command -v bwrap >/dev/null 2>&1 && command -v pasta >/dev/null 2>&1

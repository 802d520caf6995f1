#!/usr/bin/env bash
# Install Debian's openssh-server for the launcher tests (tests/test_via_ssh.py), unless sshd is
# there. The tests start their own sshd on 127.0.0.1 (own host key, config and user key in a temp
# folder) and stop it; nothing here starts a service (policy-rc.d refuses it during the install).
# Without sshd the tests are skipped with a one-line reason.
set -euo pipefail
if command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; then
    exit 0
fi
if [ "$(id -u)" = 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
else
    echo "ci-sshd: sshd is missing and this user cannot run apt-get (not root, no sudo)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod +x "$policy"
    made_policy=1
fi
"${sudo[@]}" apt-get install -y -q openssh-server || { "${sudo[@]}" apt-get update -q && "${sudo[@]}" apt-get install -y -q openssh-server; }
[ "$made_policy" = 1 ] && "${sudo[@]}" rm -f "$policy"
exit 0

#!/usr/bin/env bash
# Install Debian's openssh-server for the launcher tests (tests/ssh_servers.py: test_via_ssh.py,
# test_kernel_tools_via_ssh.py, test_agents_via_ssh.py), unless sshd is
# there. The tests start their own sshd on 127.0.0.1 (own host key, config and user key in a temp
# folder) and stop it; nothing here starts a service (policy-rc.d refuses it during the install).
# Without sshd the tests are skipped with a one-line reason.
set -euo pipefail
if command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; then
    exit 0
fi
# shellcheck source=as-root.sh
. "$(dirname "$0")/as-root.sh"
if ! can_be_root; then
    echo "ci-sshd: sshd is missing and this user cannot run apt-get (not root, no sudo)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod +x "$policy"
    made_policy=1
fi
as_root apt-get install -y -q openssh-server || { as_root apt-get update -q && as_root apt-get install -y -q openssh-server; }
[ "$made_policy" = 1 ] && as_root rm -f "$policy"
exit 0

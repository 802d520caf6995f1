#!/usr/bin/env bash
# Install Debian's slurm-wlm and munge for the --via "srun -N1 --unbuffered" tests (tests/remote_places.py:
# a single-node Slurm on 127.0.0.1 — munged with its own key, slurmctld and slurmd from a generated slurm.conf,
# all in a temporary folder — started by the tests and stopped after), unless srun, slurmctld, slurmd and munged
# are there. Nothing here starts a service (policy-rc.d refuses it during the install). slurmd must be root to
# start job steps: as another user the tests are skipped with a one-line reason, as they are without Slurm.
set -euo pipefail
if command -v srun >/dev/null 2>&1 && [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/munged ]; then
    exit 0
fi
# shellcheck source=as-root.sh
. "$(dirname "$0")/as-root.sh"
if ! can_be_root; then
    echo "ci-slurm: Slurm or munge is missing and this user cannot run apt-get (not root, no sudo)" >&2
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
as_root apt-get install -y -q slurm-wlm munge || { as_root apt-get update -q && as_root apt-get install -y -q slurm-wlm munge; }
[ "$made_policy" = 1 ] && as_root rm -f "$policy"
exit 0

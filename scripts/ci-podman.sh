#!/usr/bin/env bash
# Install Debian's podman (and debootstrap) for the --via "podman exec -i …" / "docker exec -i …" tests
# (tests/remote_places.py), unless podman is there, then build their image once: `escouade-nb-test:bookworm`,
# a minimal Debian root file system (debootstrap --variant=minbase, with python3 for the scripted agent) imported
# with `podman import`, and `escouade-nb-test:bookworm-bwrap`, the same with bubblewrap (--sandbox --via: bwrap
# inside the container). No image registry is needed: the packages come from the Debian mirror apt uses. The image
# lives in podman's own store (outside the checkout): built once per machine, in about 2-4 minutes each (~170 MB).
# Nothing here starts a service. Without podman or the image the tests are skipped with a one-line reason.
set -euo pipefail
IMAGE=${ESCOUADE_TEST_IMAGE:-escouade-nb-test:bookworm}
SANDBOX_IMAGE=${ESCOUADE_TEST_SANDBOX_IMAGE:-escouade-nb-test:bookworm-bwrap}  # the same with bubblewrap (--sandbox --via)
# shellcheck source=as-root.sh
. "$(dirname "$0")/as-root.sh"
if ! command -v podman >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
    if ! can_be_root; then
        echo "ci-podman: podman or debootstrap is missing and this user cannot run apt-get (not root, no sudo)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get install -y -q podman debootstrap uidmap runc \
        || { as_root apt-get update -q && as_root apt-get install -y -q podman debootstrap uidmap runc; }
fi
build() {  # build IMAGE PACKAGES: debootstrap's minbase with PACKAGES, podman import-ed, unless it exists
    if podman image exists "$1"; then
        return 0
    fi
    if ! can_be_root; then
        echo "ci-podman: debootstrap needs root (or sudo) to make the image's root file system" >&2
        exit 1
    fi
    mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
    root=$(mktemp -d)
    as_root debootstrap --variant=minbase --include="$2" bookworm "$root/fs" "$mirror" >"$root/log" 2>&1 \
        || { tail -20 "$root/log" >&2; as_root rm -rf "$root"; exit 1; }
    as_root rm -rf "$root/fs/var/cache/apt/archives/"*.deb "$root/fs/var/lib/apt/lists/"*
    as_root tar -C "$root/fs" -c . | podman import --change 'CMD ["sleep", "infinity"]' - "$1" >/dev/null
    as_root rm -rf "$root"
    podman image exists "$1"
}
build "$IMAGE" python3,procps
build "$SANDBOX_IMAGE" python3,procps,bubblewrap

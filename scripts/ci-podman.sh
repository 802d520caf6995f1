#!/usr/bin/env bash
# Install Debian's podman (and debootstrap) for the --via "podman exec -i …" / "docker exec -i …" tests
# (tests/remote_places.py), unless podman is there, then build their image once: `escouade-nb-test:bookworm`,
# a minimal Debian root file system (debootstrap --variant=minbase, with python3 for the scripted agent) imported
# with `podman import`, and `escouade-nb-test:bookworm-bwrap`, the same with bubblewrap (--sandbox --via: bwrap
# inside the container). No image registry is needed: the packages come from the Debian mirror apt uses. The image
# lives in podman's own store (outside the checkout): built once per machine from one debootstrap (about 3 minutes; ~170 MB). `--packages`: install the
# packages only (CI then builds the images in the background while the agents install: .ci/run).
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
packages_only=0
[ "${1:-}" = "--packages" ] && packages_only=1
[ "$packages_only" = 1 ] && exit 0
if podman image exists "$IMAGE" && podman image exists "$SANDBOX_IMAGE"; then
    exit 0
fi
if ! can_be_root; then
    echo "ci-podman: debootstrap needs root (or sudo) to make the images' root file system" >&2
    exit 1
fi
# one debootstrap (the slow part: ~3 min) for both images: the bwrap image is that tree, the plain one the
# same tree without bubblewrap's program (the "no bwrap over there" case)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=$(mktemp -d)
trap 'as_root rm -rf "$root"' EXIT
as_root debootstrap --variant=minbase --include=python3,procps,bubblewrap bookworm "$root/fs" "$mirror" \
    >"$root/log" 2>&1 || { tail -20 "$root/log" >&2; exit 1; }
as_root rm -rf "$root/fs/var/cache/apt/archives/"*.deb "$root/fs/var/lib/apt/lists/"*
as_root tar -C "$root/fs" -c . | podman import --change 'CMD ["sleep", "infinity"]' - "$SANDBOX_IMAGE" >/dev/null
as_root tar -C "$root/fs" --exclude=./usr/bin/bwrap -c . \
    | podman import --change 'CMD ["sleep", "infinity"]' - "$IMAGE" >/dev/null
podman image exists "$IMAGE" && podman image exists "$SANDBOX_IMAGE"

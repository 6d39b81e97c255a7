#!/usr/bin/env bash
# Builds the gateway's image (deploy/Containerfile) with podman, never needing a registry: the base, Debian 12 from
# Debian's packages (debootstrap, as root, then podman import), when the local store has none; the project's wheel
# and its gateway extra's wheels (and redis-py's), for the image's Python (Debian's 3.11), from this checkout and
# the package index pip is configured with; then podman build.
# Usage: scripts/image.sh [TAG] (default localhost/mcp-sessions:VERSION).
# BASE names another base (docker.io/library/debian:bookworm-slim where a registry is reachable); DEBIAN_MIRROR
# another mirror; PYTHON the interpreter whose pip builds the wheels (default .venv's, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="${BASE:-localhost/mcp-sessions-base:bookworm}"
# The npm that npx-run servers get (Debian 12's node is 18.19: npm 10 supports it).
NPM_VERSION="10.9.9"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PYTHON="${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}"
# podman's default open files limit (1048576) is above what some hosts (and sandboxes) let a process raise its own
# to: the build's steps take this shell's.
ULIMIT="nofile=$(ulimit -Hn):$(ulimit -Hn)"
# The build's apt reaches Debian's mirror as this host does (--network host): where the host's resolver is not
# reachable from podman's bridge (a resolver on loopback, a firewall forwarding no DNS), a bridged build has none.
if ! podman image exists "$BASE"; then
    if [ "$BASE" != "localhost/mcp-sessions-base:bookworm" ]; then
        echo "$BASE is not in podman's store: podman pull it, or unset BASE to make Debian's here" >&2
        exit 1
    fi
    if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap >/dev/null 2>&1; then
        echo "$BASE is made with debootstrap, as root: scripts/system-deps.sh --all installs it" >&2
        exit 1
    fi
    rootfs="$(mktemp -d /var/tmp/mcp-sessions-base.XXXXXX)"
    trap 'rm -rf "$rootfs"' EXIT
    debootstrap --variant=minbase bookworm "$rootfs" "$DEBIAN_MIRROR"
    # Security updates too, as Debian's own images have; no package files or lists left in the layer.
    security="${DEBIAN_MIRROR%/debian}/debian-security"
    printf '%s\n' "deb $DEBIAN_MIRROR bookworm main" "deb $DEBIAN_MIRROR bookworm-updates main" \
        "deb $security bookworm-security main" > "$rootfs/etc/apt/sources.list"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
    # Debian's slim images: no documentation (but each package's copyright), manual pages or translations, and
    # dpkg told to leave them out of what is installed later.
    printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
        'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' 'path-exclude /usr/share/locale/*' \
        > "$rootfs/etc/dpkg/dpkg.cfg.d/docker"
    find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
    tar -C "$rootfs" -c . | podman import --message "debootstrap --variant=minbase bookworm" - "$BASE"
fi
context="$(mktemp -d)"
trap 'rm -rf "$context" ${rootfs:+"$rootfs"}' EXIT
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$context" .
wheel="$(ls "$context"/mcp_sessions-*.whl)"
version="$(basename "$wheel" | cut -d- -f2)"
# pip takes each platform a wheel may name, not those below it: glibc 2.36's, and each older manylinux's.
platforms=()
for minor in $(seq 36 -1 5); do
    platforms+=(--platform "manylinux_2_${minor}_$(uname -m)")
done
for legacy in manylinux2014 manylinux2010 manylinux1; do
    platforms+=(--platform "${legacy}_$(uname -m)")
done
# pip evaluates a requirement's markers with its own interpreter's version, not --python-version's: redis-py's
# async-timeout (python_full_version < "3.11.3", as Debian's 3.11.2 is) is named.
"$PYTHON" -m pip download --quiet --dest "$context" --only-binary :all: --python-version 3.11 \
    --implementation cp "${platforms[@]}" "$wheel[gateway,redis]" "async-timeout>=4.0.3"
# npm from its own package, which bundles what it needs: Debian's npm brings 140 MB of node-* packages and a
# compiler's headers.
npm pack --silent --pack-destination "$context" "npm@$NPM_VERSION" >/dev/null
TAG="${1:-localhost/mcp-sessions:$version}"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
podman build --format docker --ulimit "$ULIMIT" --network host --build-arg "BASE=$BASE" --build-arg "VERSION=$version" \
    --build-arg "REVISION=$revision" --file deploy/Containerfile --tag "$TAG" "$context"
podman image inspect --format "{{.Id}} $TAG {{.Size}} bytes" "$TAG"

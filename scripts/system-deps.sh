#!/usr/bin/env bash
# Installs what the test suite runs for real: redis-server, node, bubblewrap and nftables (Debian/Ubuntu packages), and
# the MCP Inspector CLI and the gateway tests' node packages (from the npm registry, into .cache/, pinned).
# `make test` calls it; with --all (`make test-all`, `make bench`) it adds the interop matrix's and the
# benchmarks' node packages (the conformance suite and supergateway), and podman, runc and debootstrap (the image).
# It does nothing when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
all=""
if [ "${1:-}" = "--all" ]; then
    all=1
fi
INSPECTOR_VERSION="2.12.0"
# The gateway's tests: server-everything and the TypeScript SDK's client (under the system node).
EVERYTHING_VERSION="2026.8.31"
TS_SDK_VERSION="1.32.2"
# server-filesystem asks its client's roots as soon as it is initialized: the stdio gateway's tests run it.
FILESYSTEM_VERSION="2026.8.31"
# server-memory writes one file under its install directory: the stdio gateway's tests show that a uid per process
# makes that a permission error, not another user's graph (and run the per-conversation file recipe).
MEMORY_VERSION="2026.8.31"
# Node 22, in a prefix of its own (.cache/node22): the masked credentials' tests run its own fetch, which reads
# HTTPS_PROXY (NODE_USE_ENV_PROXY, from 22.21), and the conformance suite (--all) runs under it.
NODE22_VERSION="22.23.3"
CONFORMANCE_VERSION="0.2.0-alpha.12"
# benchmarks/bench_stdio.py compares `mcp-sessions gateway --stdio` with supergateway --stateful.
SUPERGATEWAY_VERSION="4.0.0"
# benchmarks/bench_connect.py compares `mcp-sessions connect` with mcp-remote, the usual stdio-to-HTTP bridge.
MCP_REMOTE_VERSION="0.15.1"
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
# The stdio gateway's --process-containment bwrap (util-linux's unshare and setpriv are there already).
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
# The contained processes' seccomp filter: libseccomp compiles it (apt and systemd need it: there already on Debian).
ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2 ' || missing+=(libseccomp2)
# The stdio gateway's --process-network egress (the default with --process-uids): its rules are nftables'.
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || missing+=(nftables)
# iproute2's ip: this host's addresses (a trusted front the processes could pose as), unshare's own loopback under
# --process-network none, and each egress process's veth pair. Debian's minimal images leave it out.
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing+=(iproute2)
# conntrack-tools' conntrack: an egress process's flows deleted from the host's connection tracking table as it ends.
command -v conntrack >/dev/null 2>&1 || [ -x /usr/sbin/conntrack ] || missing+=(conntrack)
# The system's venv: where this checkout's Python lies under a 0700 home (pyenv's, under /root), the tests make the
# environments that --process-uids processes run from the system's python3, which those uids may run.
if [ -x /usr/bin/python3 ] && ! /usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1; then
    missing+=(python3-venv)
fi
# make test-all's image (tests/e2e/test_image.py, scripts/image.sh): podman builds and runs it (under runc), and
# debootstrap makes its Debian base from Debian's packages where no registry is reachable.
if [ -n "$all" ]; then
    command -v podman >/dev/null 2>&1 || missing+=(podman)
    command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || missing+=(runc)
    command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
    # a podman network's DNS: the front's pod reaches each replica by its headless Service's name (a network alias)
    [ -x /usr/lib/podman/aardvark-dns ] || missing+=(aardvark-dns)
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
if [ "${#missing[@]}" -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "${missing[*]} missing and apt-get is not available: install them, then run make test again" >&2
        exit 1
    fi
    $sudo apt-get update
    $sudo apt-get install -y --no-install-recommends "${missing[@]}"
fi
# podman's --userns=auto (the image's sealed run, as a pod's hostUsers: false) takes each container's uids from
# the "containers" range of /etc/subuid and /etc/subgid, which Debian's podman leaves to the host: where there is
# none, one is named, 2^30 up, 2^26 uids (1024 containers of 65536). Above what useradd gives users' ranges
# (SUB_UID_MAX, 600100000 by default) and every uid the docs and tests give processes (process-uids, a few
# hundred thousand at most), so that no container's uid is a user's or a process's on the host; below 2^31,
# which tools that hold a uid in a signed 32-bit integer cannot pass.
if [ -n "$all" ] && command -v podman >/dev/null 2>&1; then
    for ids in /etc/subuid /etc/subgid; do
        if ! grep -qs '^containers:' "$ids"; then
            echo "containers:1073741824:67108864" | $sudo tee -a "$ids" >/dev/null
        fi
    done
fi
inspector=".cache/inspector/node_modules/@modelcontextprotocol/inspector"
if ! grep -q "\"version\": \"$INSPECTOR_VERSION\"" "$inspector/package.json" 2>/dev/null; then
    npm install --no-audit --no-fund --silent --prefix .cache/inspector "@modelcontextprotocol/inspector@$INSPECTOR_VERSION"
fi
everything=".cache/everything/node_modules/@modelcontextprotocol"
if ! grep -q "\"version\": \"$EVERYTHING_VERSION\"" "$everything/server-everything/package.json" 2>/dev/null \
    || ! grep -q "\"version\": \"$TS_SDK_VERSION\"" "$everything/sdk/package.json" 2>/dev/null; then
    npm install --no-audit --no-fund --silent --prefix .cache/everything \
        "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" "@modelcontextprotocol/sdk@$TS_SDK_VERSION"
fi
filesystem=".cache/filesystem/node_modules/@modelcontextprotocol/server-filesystem/package.json"
if ! grep -q "\"version\": \"$FILESYSTEM_VERSION\"" "$filesystem" 2>/dev/null; then
    npm install --no-audit --no-fund --silent --prefix .cache/filesystem "@modelcontextprotocol/server-filesystem@$FILESYSTEM_VERSION"
fi
memory=".cache/memory/node_modules/@modelcontextprotocol/server-memory/package.json"
if ! grep -q "\"version\": \"$MEMORY_VERSION\"" "$memory" 2>/dev/null; then
    npm install --no-audit --no-fund --silent --prefix .cache/memory "@modelcontextprotocol/server-memory@$MEMORY_VERSION"
fi
node22=".cache/node22/node_modules/node/package.json"
if ! grep -q "\"version\": \"$NODE22_VERSION\"" "$node22" 2>/dev/null; then
    npm install --no-audit --no-fund --silent --prefix .cache/node22 "node@$NODE22_VERSION"
fi
if [ -z "$all" ]; then
    exit 0
fi
conformance=".cache/conformance/node_modules/@modelcontextprotocol/conformance/package.json"
if ! grep -q "\"version\": \"$CONFORMANCE_VERSION\"" "$conformance" 2>/dev/null; then
    npm install --no-audit --no-fund --silent --prefix .cache/conformance "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION"
fi
supergateway=".cache/supergateway/node_modules/supergateway/package.json"
if ! grep -q "\"version\": \"$SUPERGATEWAY_VERSION\"" "$supergateway" 2>/dev/null; then
    npm install --no-audit --no-fund --silent --prefix .cache/supergateway "supergateway@$SUPERGATEWAY_VERSION"
fi
mcp_remote=".cache/mcp-remote/node_modules/mcp-remote/package.json"
if ! grep -q "\"version\": \"$MCP_REMOTE_VERSION\"" "$mcp_remote" 2>/dev/null; then
    npm install --no-audit --no-fund --silent --prefix .cache/mcp-remote "mcp-remote@$MCP_REMOTE_VERSION"
fi

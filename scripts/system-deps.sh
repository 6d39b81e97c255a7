#!/usr/bin/env bash
# Installs what the test suite runs for real: redis-server and node (Debian/Ubuntu packages), and
# the MCP Inspector CLI (from the npm registry, into .cache/inspector, pinned).
# `make test` calls it; it does nothing when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
INSPECTOR_VERSION="2.12.0"
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ "${#missing[@]}" -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "${missing[*]} missing and apt-get is not available: install them, then run make test again" >&2
        exit 1
    fi
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo="sudo"
    fi
    $sudo apt-get update
    $sudo apt-get install -y --no-install-recommends "${missing[@]}"
fi
inspector=".cache/inspector/node_modules/@modelcontextprotocol/inspector"
if ! grep -q "\"version\": \"$INSPECTOR_VERSION\"" "$inspector/package.json" 2>/dev/null; then
    npm install --no-audit --no-fund --silent --prefix .cache/inspector "@modelcontextprotocol/inspector@$INSPECTOR_VERSION"
fi

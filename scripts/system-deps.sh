#!/usr/bin/env bash
# Installs the system packages the test suite runs for real: redis-server (Debian/Ubuntu).
# `make test` calls it; it does nothing when everything is already there.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "redis-server is missing and apt-get is not available: install redis-server, then run make test again" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
$sudo apt-get update
$sudo apt-get install -y --no-install-recommends redis-server

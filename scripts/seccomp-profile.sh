#!/usr/bin/env bash
# Takes Docker's default seccomp profile again (moby's profiles/seccomp/default.json) from Debian's
# golang-github-docker-docker-dev, the docker.io source's package, into the gateway's package, where every contained
# process's filter is compiled from (middleware/mcp_sessions/_gateway/sealed/seccomp.json). Only that file is
# extracted: the package itself is not installed. Then name its version in _seccomp.DOCKER.
set -euo pipefail
cd "$(dirname "$0")/.."
into="$PWD/middleware/mcp_sessions/_gateway/sealed/seccomp.json"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download golang-github-docker-docker-dev >/dev/null)
deb="$(ls "$work"/*.deb)"
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/gocode/src/github.com/docker/docker/profiles/seccomp/default.json >"$into"
echo "$into: docker.io $(dpkg-deb -f "$deb" Version)"

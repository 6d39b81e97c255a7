#!/usr/bin/env bash
# Takes Docker's default seccomp profile again (moby's profiles/seccomp/default.json) from Debian's
# golang-github-docker-docker-dev, the docker.io source's package, into the gateway's package, where every contained
# process's filter is compiled from (middleware/mcp_sessions/_gateway/sealed/seccomp.json). The package is Debian 13's
# (trixie: docker.io 26.1.5, whose profile refuses io_uring, as moby's have since 25.0), fetched from the Debian
# archive by its Packages index and checked against the SHA-256 the index gives; only that file is extracted: the
# package itself is not installed. Then name its version in _seccomp.DOCKER.
set -euo pipefail
cd "$(dirname "$0")/.."
archive="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
into="$PWD/middleware/mcp_sessions/_gateway/sealed/seccomp.json"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
curl -fsS "$archive/dists/trixie/main/binary-all/Packages.xz" | xz -dc >"$work/Packages"
read -r path sha < <(awk '/^Package: /{p=($2=="golang-github-docker-docker-dev")} p&&/^Filename: /{f=$2}
    p&&/^SHA256: /{s=$2} /^$/&&f&&s{print f, s; exit}' "$work/Packages")
curl -fsS -o "$work/package.deb" "$archive/$path"
echo "$sha  $work/package.deb" | sha256sum --check --quiet
dpkg-deb --fsys-tarfile "$work/package.deb" | tar -xO ./usr/share/gocode/src/github.com/docker/docker/profiles/seccomp/default.json >"$into"
echo "$into: docker.io $(dpkg-deb -f "$work/package.deb" Version)"
# The gateway's own profile, for the container that runs it (deploy/seccomp.json, docs/deployment.md): Docker's, with
# pivot_root beside mount and unshare where CAP_SYS_ADMIN is granted, which bubblewrap needs to give each process a
# root of its own (Docker's refuses pivot_root to every process).
python3 - "$into" deploy/seccomp.json <<'PYTHON'
import json
import sys

profile = json.load(open(sys.argv[1]))
[admin] = [rule for rule in profile["syscalls"] if rule.get("includes") == {"caps": ["CAP_SYS_ADMIN"]} and "unshare" in rule["names"]]
admin["names"].append("pivot_root")
with open(sys.argv[2], "w") as out:
    json.dump(profile, out, indent="\t")
    out.write("\n")
PYTHON
echo "deploy/seccomp.json: that, with pivot_root under CAP_SYS_ADMIN"

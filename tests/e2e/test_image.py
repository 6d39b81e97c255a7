"""The gateway's image (``deploy/Containerfile``) as ``scripts/image.sh`` builds it and podman runs it: the team's
file mounted at ``/etc/mcp-sessions/gateway.toml``, a stdio server (the tests' ``_plain_stdio.py``, mounted) behind
it, its port published on loopback, its health check, a tool called through it by the ``mcp`` SDK's client, and
``podman stop`` ending it cleanly.

The build is podman's: its layer cache makes a second build of the same checkout a few seconds' work (the wheels
are made again, the same bytes, and every step is cached); the base, Debian's packages under debootstrap, is made
once (as root) and kept in podman's store.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mcp import Client

import mcp_sessions
from _redis import free_port, missing, only_skips
from _waits import until
from conftest import SECRET
from e2e._stdio import text_of

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
SERVER = Path(__file__).with_name("_plain_stdio.py")
# podman's default limits (1048576 open files; the host's process count) are above what some hosts let a container
# raise its own to ("error setting rlimit ...: operation not permitted"): this process's open files, and podman
# build's own default for processes.
_, FILES = resource.getrlimit(resource.RLIMIT_NOFILE)
LIMITS = ("--ulimit", f"nofile={FILES}:{FILES}", "--ulimit", "nproc=32768:32768")
CONFIG = """\
[gateway]
host = "0.0.0.0"
port = 8000

[servers.plain]
command = "python3"
args = ["/srv/mcp/server.py"]
"""


def podman(*arguments: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *arguments], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def image() -> str:
    """The image of this checkout, built (or found in podman's cache) by scripts/image.sh: its tag, this checkout's
    own, so that two clones on one host build theirs side by side."""
    __tracebackhide__ = only_skips
    if shutil.which("podman") is None:
        missing("podman is not installed: scripts/system-deps.sh --all installs it (with runc and debootstrap)")
    tag = "localhost/mcp-sessions:test-" + hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    environ = {**os.environ, "PYTHON": sys.executable}
    built = subprocess.run(
        [str(ROOT / "scripts" / "image.sh"), tag], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=1200
    )
    assert built.returncode == 0, f"scripts/image.sh failed ({built.returncode}):\n{built.stdout}\n{built.stderr}"
    return tag


@pytest.fixture
def container(image: str, tmp_path: Path) -> Iterator[tuple[str, int]]:
    """The image run with the file and the server mounted, its port published on 127.0.0.1: its name and port."""
    (tmp_path / "gateway.toml").write_text(CONFIG)
    shutil.copy(SERVER, tmp_path / "server.py")
    port = free_port()
    name = f"mcp-sessions-test-{os.getpid()}-{port}"
    run = subprocess.run(
        [
            *("podman", "run", "--detach", "--name", name, *LIMITS, "--env", "MCP_SESSIONS_SECRET"),
            *("--publish", f"127.0.0.1:{port}:8000"),
            *("--volume", f"{tmp_path / 'gateway.toml'}:/etc/mcp-sessions/gateway.toml:ro"),
            *("--volume", f"{tmp_path / 'server.py'}:/srv/mcp/server.py:ro", image),
        ],
        env={**os.environ, "MCP_SESSIONS_SECRET": SECRET},  # by name: never on a command line
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    try:
        yield name, port
    finally:
        podman("rm", "--force", "--time", "0", name)


def logs(name: str) -> str:
    said = podman("logs", name)
    return said.stdout + said.stderr


def healthy(name: str, port: int) -> bool:
    state = podman("inspect", "--format", "{{.State.Status}}", name).stdout.strip()
    assert state == "running", f"the container is {state}:\n{logs(name)}"
    return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200


@pytest.mark.timeout(1500)  # a cold build: the base (debootstrap) and every layer, about 3 minutes here
async def test_the_image_serves_a_stdio_server_and_stops_cleanly(image: str, container: tuple[str, int]) -> None:
    name, port = container
    until(lambda: healthy(name, port), lambda: f"no /healthz:\n{logs(name)}", within=60, ignoring=(httpx.HTTPError,))
    checked = podman("healthcheck", "run", name)
    assert checked.returncode == 0, f"the image's HEALTHCHECK: {checked.stdout}{checked.stderr}"

    async with Client(f"http://127.0.0.1:{port}/servers/plain/mcp") as client:
        assert client.server_info is not None
        assert client.server_info.name == "stdio-test-server"
        answer = json.loads(text_of(await client.call_tool("whoami", {})))
    assert answer["leaked"] == []  # the gateway had MCP_SESSIONS_SECRET; its server's process does not

    stopped = podman("stop", "--time", "30", name)
    assert stopped.returncode == 0, stopped.stderr
    assert podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip() == "0", logs(name)
    said = logs(name)
    assert "Application shutdown complete." in said
    assert "PID 1 without an init" not in said, said  # tini is PID 1, and reaps


def test_the_image_says_what_it_is(image: str) -> None:
    [inspected] = json.loads(podman("image", "inspect", image).stdout)
    labels = inspected["Config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == mcp_sessions.__version__
    assert labels["org.opencontainers.image.licenses"] == "MIT AND Apache-2.0"
    assert "http://127.0.0.1:8000/healthz" in " ".join(inspected["Healthcheck"]["Test"])
    entrypoint = inspected["Config"]["Entrypoint"]
    assert entrypoint[-4:] == ["mcp-sessions", "gateway", "--config", "/etc/mcp-sessions/gateway.toml"]
    # No build tools: pip left the environment, and no compiler came with the packages.
    unbuilt = podman("run", "--rm", *LIMITS, "--entrypoint", "sh", image, "-c", "command -v pip pip3 gcc cc make")
    assert unbuilt.stdout == "", unbuilt.stdout

"""The package as a user gets it: ``make dist``'s build, installed into fresh environments.

``python -m build`` makes the sdist and then the wheel from that sdist, so a file the sdist leaves out breaks the
wheel here; it runs once for the module. The wheel goes into a new ``python -m venv`` with its dependencies from the
package index (pip's cache makes that quick; this environment's pip installs into the venv, which needs none of its
own), and the installed package, never this checkout, is imported and run there. With its ``gateway`` extra it goes
where a user's installer puts it, given by its path (the package is not on the index, and is never fetched from it by
name): a fresh venv's own pip, ``pipx run --spec`` and ``uvx --from``; the gateway each runs starts in front of a
stdio server and of an upstream, answers ``/readyz``, and relays a tool call of the ``mcp`` SDK's client.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from mcp import Client

import mcp_sessions
from _redis import missing, only_skips
from _waits import until
from conftest import serve
from e2e._gateway import gateway_process, upstream_server
from e2e._stdio import text_of

ROOT = Path(__file__).resolve().parents[2]
VERSION = mcp_sessions.__version__
# The tests' stdio server, which imports nothing but the standard library.
STDIO_SERVER = shlex.join([sys.executable, str(Path(__file__).with_name("_plain_stdio.py"))])
# What an installed package of the gateway extra fails to import, and why: the modules of the other extras.
OTHER_EXTRAS = {
    "mcp_sessions.stores._redis": "the redis extra of mcp-sessions",
    "mcp_sessions.stores._redis_client": "the redis extra of mcp-sessions",
    "mcp_sessions.telemetry": "No module named 'opentelemetry.sdk'",
}
IMPORT_EVERY_MODULE = """
import importlib, pkgutil, mcp_sessions
for module in pkgutil.walk_packages(mcp_sessions.__path__, "mcp_sessions."):
    if module.name != "mcp_sessions.__main__":
        try:
            importlib.import_module(module.name)
        except ImportError as exc:
            print(module.name, exc, sep="\\t")
"""


def run(*args: str | Path, cwd: Path, environ: Mapping[str, str] | None = None, timeout: float = 120) -> str:
    # Without PYTHONPATH and VIRTUAL_ENV, the new venv sees only what is installed in it.
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    result = subprocess.run(
        [str(arg) for arg in args],
        cwd=cwd,
        env={**env, **(environ or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"{args} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result.stdout


def tool(name: str) -> str:
    """``name``, of pyproject's dist group, beside this interpreter or on PATH; skipped without it, failed under CI."""
    __tracebackhide__ = only_skips
    found = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if found is None:
        missing(f"{name} is not installed: pip install --group dist (make test-all installs it)")
    return found


@dataclass(frozen=True)
class Built:
    sdist: Path
    wheel: Path

    @property
    def gateway(self) -> str:
        """The wheel with its gateway extra, as pip, pipx and uv take it: a direct reference to its file."""
        return f"mcp-sessions[gateway] @ {self.wheel.as_uri()}"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """``make dist``'s build, once for the module (about 10 s here)."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, ROOT, cwd=out)
    sdist = out / f"mcp_sessions-{VERSION}.tar.gz"
    wheel = out / f"mcp_sessions-{VERSION}-py3-none-any.whl"
    assert sorted(p.name for p in out.iterdir()) == sorted([sdist.name, wheel.name])
    return Built(sdist, wheel)


def members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


# About 5 s here, after the build; the margin is for a busy machine.
@pytest.mark.timeout(300)
def test_the_sdist_and_the_wheel_hold_what_a_user_needs(built: Built, tmp_path: Path) -> None:
    with tarfile.open(built.sdist) as archive:
        in_sdist = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for expected in (
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "CHANGELOG.md",
        "middleware/mcp_sessions/__init__.py",
        "middleware/mcp_sessions/py.typed",
        "docs/getting-started.md",
        "mkdocs.yml",
    ):
        assert expected in in_sdist, f"{expected} is missing from the sdist"

    in_wheel = members(built.wheel)
    metadata = in_wheel[f"mcp_sessions-{VERSION}.dist-info/METADATA"].decode()
    entry_points = in_wheel[f"mcp_sessions-{VERSION}.dist-info/entry_points.txt"].decode()
    for expected in (
        "mcp_sessions/__init__.py",
        "mcp_sessions/py.typed",
        "mcp_sessions/stores/_redis.py",
        "mcp_sessions/client/_httpx2.py",
        "mcp_sessions/telemetry.py",
        "mcp_sessions/_gateway/sealed/seccomp.json",  # Docker's profile, and the notice of its license
        f"mcp_sessions-{VERSION}.dist-info/licenses/LICENSE",
        f"mcp_sessions-{VERSION}.dist-info/licenses/NOTICE",
    ):
        assert expected in in_wheel, f"{expected} is missing from the wheel"
    assert not [name for name in in_wheel if name.startswith(("tests/", "examples/", "docs/", "middleware/"))]
    for line in (
        f"Version: {VERSION}",
        "License-Expression: MIT AND Apache-2.0",
        "License-File: LICENSE",
        "License-File: NOTICE",
        "Requires-Python: >=3.11",
        "Provides-Extra: gateway",
        "Provides-Extra: redis",
        "Classifier: Programming Language :: Python :: 3 :: Only",
        "Classifier: Typing :: Typed",
        "Description-Content-Type: text/markdown",
    ):
        assert f"\n{line}\n" in metadata, f"{line} is missing from the wheel's METADATA"
    assert "mcp-sessions = mcp_sessions._cli:main" in entry_points

    # The sdist builds the wheel the checkout builds, byte for byte.
    direct = tmp_path / "direct"
    run(sys.executable, "-m", "build", "--wheel", "--outdir", direct, ROOT, cwd=tmp_path)
    assert members(direct / built.wheel.name) == in_wheel


# About 10 s here; the margin is for a busy machine or a cold pip cache.
@pytest.mark.timeout(300)
def test_the_built_wheel_installs_and_runs_in_a_fresh_venv(built: Built, tmp_path: Path) -> None:
    # A venv without pip of its own (seeding one costs seconds): this pip installs into it and checks it.
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    pip = (sys.executable, "-m", "pip", "--python", python)
    run(*pip, "install", "--quiet", built.wheel, cwd=tmp_path)

    probe = """
import mcp_sessions
from mcp_sessions import MCPSessionMiddleware, KeySet, get_session
from mcp_sessions.client import HeldSession
print(mcp_sessions.__version__)
print(mcp_sessions.__file__)
try:
    from mcp_sessions.client import SessionTransport
except ImportError as exc:
    print(exc)
"""
    version, location, transport_error = run(python, "-c", probe, cwd=tmp_path).splitlines()
    assert version == VERSION
    assert Path(location).is_relative_to(venv), location
    # The client package adds no dependency: the httpx2 transport says what to install.
    assert transport_error == "SessionTransport needs httpx2 (the mcp SDK client's HTTP library): pip install httpx2"

    usage = run(bin_dir / "mcp-sessions", "--help", cwd=tmp_path)
    assert usage.startswith("usage: mcp-sessions")
    assert "keygen" in usage
    run(*pip, "check", cwd=tmp_path)


def with_pip(built: Built, directory: Path) -> tuple[list[str], dict[str, str]]:
    """``python3 -m venv``, then its own pip installs the wheel with its gateway extra: every module of the package
    imports there, but those of the other extras."""
    venv = directory / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=directory)
    run(venv / "bin" / "pip", "install", "--quiet", built.gateway, cwd=directory)
    run(venv / "bin" / "pip", "check", cwd=directory)
    failed = run(venv / "bin" / "python", "-c", IMPORT_EVERY_MODULE, cwd=directory).splitlines()
    assert {line.split("\t")[0] for line in failed} == OTHER_EXTRAS.keys(), failed
    for line in failed:
        module, error = line.split("\t")
        assert OTHER_EXTRAS[module] in error, line
    return [str(venv / "bin" / "mcp-sessions")], {}


def with_pipx(built: Built, directory: Path) -> tuple[list[str], dict[str, str]]:
    """``pipx run --spec``, with pip (pipx 1.18 installs with uv where uv is installed, as uvx does below)."""
    environ = {"PIPX_HOME": str(directory / "pipx"), "PIPX_DEFAULT_BACKEND": "pip"}
    return [tool("pipx"), "run", "--spec", built.gateway, "mcp-sessions"], environ


def with_uvx(built: Built, directory: Path) -> tuple[list[str], dict[str, str]]:
    return [tool("uvx"), "--from", built.gateway, "mcp-sessions"], {}


Installer = Callable[[Built, Path], tuple[list[str], dict[str, str]]]


def answered(url: str) -> bool:
    return httpx.get(url, timeout=5).status_code == 200


@pytest.mark.anyio
@pytest.mark.parametrize("installer", [with_pip, with_pipx, with_uvx], ids=["pip", "pipx", "uvx"])
@pytest.mark.timeout(300)  # pip's about 15 s here, pipx's 10 s, uvx's 5 s; the margin is for a busy machine
async def test_the_gateway_extra_runs_as_installed(installer: Installer, built: Built, tmp_path: Path) -> None:
    program, environ = installer(built, tmp_path)
    environ["PYTHONPATH"] = ""  # the installed package, never this checkout's
    usage = run(*program, "gateway", "--help", cwd=tmp_path, environ=environ)
    assert usage.startswith("usage: mcp-sessions gateway")

    with gateway_process([], "--stdio", STDIO_SERVER, program=program, environ=environ) as gateway:
        until(lambda: answered(gateway.url("/readyz")), "no /readyz", ignoring=(httpx.HTTPError,))
        async with Client(gateway.url()) as client:
            said = json.loads(text_of(await client.call_tool("whoami", {})))
        assert said["leaked"] == []  # the gateway's MCP_SESSIONS_SECRET is its own

    with (
        serve(upstream_server("upstream").streamable_http_app()) as upstream,
        gateway_process([upstream + "/mcp"], program=program, environ=environ) as gateway,
    ):
        until(lambda: answered(gateway.url("/readyz")), "no /readyz", ignoring=(httpx.HTTPError,))
        async with Client(gateway.url()) as client:
            assert text_of(await client.call_tool("echo", {"message": "through"})) == "through"

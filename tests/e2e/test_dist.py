"""The package as a user gets it: ``make dist``'s build, installed into a fresh virtualenv.

``python -m build`` makes the sdist and then the wheel from that sdist, so a
file the sdist leaves out breaks the wheel here. The wheel goes into a new
``python -m venv`` with its dependencies from the package index (pip's cache
makes that quick; this environment's pip installs into the venv, which needs
none of its own), and the installed package, never this checkout, is
imported and run there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import mcp_sessions

ROOT = Path(__file__).resolve().parents[2]
VERSION = mcp_sessions.__version__


def run(*args: str | Path, cwd: Path, timeout: float = 120) -> str:
    # Without PYTHONPATH and VIRTUAL_ENV, the new venv sees only what is installed in it.
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    result = subprocess.run(
        [str(arg) for arg in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{args} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result.stdout


# About 10 s here; the margin is for a busy machine or a cold pip cache.
@pytest.mark.timeout(300)
def test_the_built_wheel_installs_and_runs_in_a_fresh_venv(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--outdir", out, ROOT, cwd=tmp_path)
    sdist = out / f"mcp_sessions-{VERSION}.tar.gz"
    wheel = out / f"mcp_sessions-{VERSION}-py3-none-any.whl"
    assert sorted(p.name for p in out.iterdir()) == sorted([sdist.name, wheel.name])

    with tarfile.open(sdist) as archive:
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

    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
        metadata = archive.read(f"mcp_sessions-{VERSION}.dist-info/METADATA").decode()
        entry_points = archive.read(f"mcp_sessions-{VERSION}.dist-info/entry_points.txt").decode()
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
    assert f"Version: {VERSION}\n" in metadata
    assert "Provides-Extra: redis\n" in metadata
    assert "License-Expression: MIT AND Apache-2.0\n" in metadata
    assert "mcp-sessions = mcp_sessions._cli:main" in entry_points

    # A venv without pip of its own (seeding one costs seconds): this pip installs into it and checks it.
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    pip = (sys.executable, "-m", "pip", "--python", python)
    run(*pip, "install", "--quiet", wheel, cwd=tmp_path)

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

"""The conformance pack as a distribution of its own (issue 51): ``pip install ./conformance`` in a fresh venv.

The pack needs httpx and PyYAML only and imports nothing of mcp_sessions: installed from the directory
as the docs say, into a new ``python -m venv`` with its dependencies from the package index (pip's cache
makes that quick), it brings no Starlette, PyJWT, cryptography or OpenTelemetry, and runs there against
a real server. Where mcp_sessions is installed too (this environment), importing and running the pack
loads no module of it.
"""

from __future__ import annotations

import ast
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from examples.quickstart import build_app

import mcp_sessions_conformance
from conftest import SECRET, serve
from mcp_sessions._cli import main

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("starlette", "pyjwt", "cryptography", "opentelemetry")
"""The starts of the names of distributions the middleware needs and the pack must not bring."""


def run(*args: str | Path, cwd: Path, timeout: float = 120, ok: bool = True) -> subprocess.CompletedProcess[str]:
    # Without PYTHONPATH and VIRTUAL_ENV, the new venv sees only what is installed in it.
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    result = subprocess.run(
        [str(arg) for arg in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if ok:
        assert result.returncode == 0, f"{args} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result


# About 15 s here; the margin is for a busy machine or a cold pip cache.
@pytest.mark.timeout(300)
def test_pip_install_conformance_brings_httpx_and_pyyaml_only_and_runs(tmp_path: Path) -> None:
    # A venv without pip of its own (seeding one costs seconds): this pip installs into it and checks it.
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    pip = (sys.executable, "-m", "pip", "--python", python)
    run(*pip, "install", "--quiet", ROOT / "conformance", cwd=tmp_path)

    installed = {row["name"].lower() for row in json.loads(run(*pip, "list", "--format=json", cwd=tmp_path).stdout)}
    assert "mcp-sessions-conformance" in installed
    assert "mcp-sessions" not in installed
    assert not [name for name in installed if name.startswith(FORBIDDEN)], sorted(installed)
    probe = "from importlib.metadata import metadata; m = metadata('mcp-sessions-conformance')\n"
    probe += "print([m.get_all('Requires-Dist'), m.get_all('License-File')])"
    requires, licenses = ast.literal_eval(run(python, "-c", probe, cwd=tmp_path).stdout)
    assert sorted(requires) == ["httpx>=0.28", "pyyaml>=6"]
    assert licenses == ["LICENSE"]

    usage = run(bin_dir / "mcp-sessions-conformance", "--help", cwd=tmp_path).stdout
    assert usage.startswith("usage: mcp-sessions-conformance")
    assert "--expected-failures" in usage
    run(*pip, "check", cwd=tmp_path)

    # The installed pack, with its traceability files, against a real server: the draft wire passes.
    app = build_app(environ={"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_PROFILES": "draft"})
    with serve(app) as url:
        result = run(bin_dir / "mcp-sessions-conformance", f"{url}/mcp", "--wire", "draft", cwd=tmp_path)
    assert "Passed:" in result.stdout
    assert "FAILURE" not in result.stdout


def test_the_pack_loads_no_module_of_mcp_sessions() -> None:
    """Imported and run (its help, every module of it loaded) where mcp_sessions is installed too."""
    probe = (
        "import sys, pkgutil, importlib, contextlib, io\n"
        "import mcp_sessions_conformance as pack\n"
        "for info in pkgutil.iter_modules(pack.__path__, pack.__name__ + '.'):\n"
        "    if not info.name.endswith('__main__'): importlib.import_module(info.name)\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()): pack.main(['--help'])\n"
        "print(sorted(m for m in sys.modules if m == 'mcp_sessions' or m.startswith('mcp_sessions.')))\n"
    )
    result = run(sys.executable, "-c", probe, cwd=ROOT)
    assert result.stdout.strip() == "[]"


def test_mcp_sessions_conformance_is_the_pack_with_the_same_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    """The same parser behind both names: the same help but for the command's name, the same usage error."""
    for argv, run_it in ((["--help"], mcp_sessions_conformance.main), (["conformance", "--help"], main)):
        with pytest.raises(SystemExit) as exited:
            run_it(argv, environ={})
        assert exited.value.code == 0
    pack_help, ours_help = capsys.readouterr().out.split("usage: ")[1:]
    assert pack_help.startswith("mcp-sessions-conformance ")
    assert " ".join(ours_help.replace("mcp-sessions conformance", "mcp-sessions-conformance").split()) == " ".join(
        pack_help.split()
    )
    for argv, run_it, name in (
        ([], mcp_sessions_conformance.main, "mcp-sessions-conformance"),
        (["conformance"], main, "mcp-sessions conformance"),
    ):
        err = io.StringIO()
        assert run_it([*argv, "http://127.0.0.1:1/mcp", "--header", "bad"], stderr=err, environ={}) == 2
        assert err.getvalue() == f"{name}: --header takes 'Name: value', got 'bad'\n"


def test_without_the_pack_mcp_sessions_conformance_says_how_to_install_it(tmp_path: Path) -> None:
    """mcp_sessions alone (the pack hidden from the import system): exit 2 and an install line that is true."""
    probe = (
        "import sys\n"
        "sys.modules['mcp_sessions_conformance'] = None  # as if not installed\n"
        "from mcp_sessions._cli import main\n"
        "sys.exit(main(['conformance', 'http://127.0.0.1:1/mcp']))\n"
    )
    result = run(sys.executable, "-c", probe, cwd=tmp_path, ok=False)
    assert result.returncode == 2
    assert "pip install ./conformance" in result.stderr
    assert (ROOT / "conformance" / "pyproject.toml").is_file()  # what that line installs, from a clone

"""Issue 51: a correct draft implementation written without this project's code passes the default run.

The server is ``_independent_draft.py``: the draft's data-layer sessions written from the draft's text on
the real ``mcp`` SDK, importing nothing of this project. The pack's own command runs against it in a
process of its own, with no ``--wire``, no ``--conventions`` and no baseline, at each era, the SDK app
stateless and with its own transport sessions.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import _independent_draft
from _mcp import MCP_PATH
from conftest import serve
from e2e._pack import LEGACY, MODERN

SERVER = Path(_independent_draft.__file__)
# The default run's checks of the draft (docs/conformance.md): every one applies to a server that has a
# tool needing a session (`count`, which is also the counter that shows the session).
DEFAULT_CHECKS = {
    "sessions-draft-capability",
    "sessions-draft-create",
    "sessions-draft-session-id-visible-ascii",
    "sessions-draft-session-id-unique",
    "sessions-draft-expires-at",
    "sessions-draft-session-is-context",
    "sessions-draft-echo",
    "sessions-draft-echo-same-session-id",
    "sessions-draft-delete",
    "sessions-draft-deleted-session",
    "sessions-draft-delete-unknown",
    "sessions-draft-session-not-found",
    "sessions-draft-not-found-data",
    "sessions-draft-session-required",
}


def _imported_modules(source: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))
    return found


def test_the_independent_server_imports_nothing_of_this_project() -> None:
    imported = _imported_modules(SERVER.read_text(encoding="utf-8"))

    assert not {name for name in imported if name.split(".")[0].startswith("mcp_sessions")}, imported
    assert not {name for name in imported if name.startswith(".")}, imported  # nothing beside it either
    assert {"mcp.server.mcpserver", "starlette.types"} <= imported  # the real SDK, and Starlette's types
    assert "importlib" not in {name.split(".")[0] for name in imported}  # no import by name to get round it


def test_the_import_check_sees_a_forbidden_import() -> None:
    forbidden = "import json\nfrom mcp_sessions import MCPSessionMiddleware\nimport mcp_sessions_conformance._draft\n"

    assert _imported_modules(forbidden) == {"json", "mcp_sessions", "mcp_sessions_conformance._draft"}


@pytest.fixture(scope="module")
def independent() -> Iterator[dict[str, str]]:
    stateless, stateful = _independent_draft.build_app(), _independent_draft.build_app(stateless=False)
    with serve(stateless) as plain, serve(stateful) as transport_sessions:
        yield {"stateless": plain + MCP_PATH, "stateful": transport_sessions + MCP_PATH}


@pytest.mark.parametrize("era", [MODERN, LEGACY])
@pytest.mark.parametrize("kind", ["stateless", "stateful"])
def test_the_default_run_passes_an_independent_draft_server(
    independent: dict[str, str], kind: str, era: str, tmp_path: Path
) -> None:
    command = [sys.executable, "-m", "mcp_sessions_conformance", independent[kind], "--spec-version", era]
    run = subprocess.run([*command, "--json", str(tmp_path)], capture_output=True, text=True, timeout=300)

    assert run.returncode == 0, run.stdout + run.stderr
    [written] = list(tmp_path.glob("server-sessions-draft-*/checks.json"))  # the one wire it advertises
    checks = json.loads(written.read_text(encoding="utf-8"))
    assert {check["id"] for check in checks} == DEFAULT_CHECKS, run.stdout
    assert {check["status"] for check in checks} == {"SUCCESS"}, run.stdout
    assert "0 failed" in run.stdout

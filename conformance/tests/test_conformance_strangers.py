"""Issue 51: the pack against servers that are not the quickstart, as a stranger's server would be.

No check fails for a fixture the server does not have, nor for a rule that is this project's own: a
server with one tool of another name passes, with SKIPPED where a check needs what it lacks; a real mcp
1.x server, which refuses every batch, has its batch checks SKIPPED; a server that answers the codes
MCP 2026-07-28 asks of new codes (``error_codes="application"``) fails the draft's codes until the run
is told to accept them, and then says which sentence each code comes from.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from examples.quickstart import build_app
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp

from _mcp import MCP_PATH
from conftest import SECRET, serve
from e2e._pack import LEGACY, MODERN, run_pack
from e2e._versioned import VENVS, versioned_server
from mcp_sessions import MCPSessionMiddleware

CODES = {"sessions-draft-session-not-found", "sessions-draft-deleted-session", "sessions-draft-delete-unknown"}


def stranger(*, stateless: bool) -> ASGIApp:
    """An ``MCPServer`` with none of the quickstart's tools: one that needs an argument, listed first, and ``ping``."""
    server = MCPServer("stranger")

    @server.tool()
    async def lookup(query: str) -> str:
        """An answer to ``query``: it needs an argument, so the pack does not call it."""
        return query

    @server.tool()
    async def ping() -> str:
        """``pong``."""
        return "pong"

    app = server.streamable_http_app(streamable_http_path="/mcp", stateless_http=stateless)
    return MCPSessionMiddleware(app, secret=SECRET)


@pytest.fixture(scope="module")
def strangers() -> Iterator[dict[str, str]]:
    with serve(stranger(stateless=False)) as stateful, serve(stranger(stateless=True)) as stateless:
        yield {"stateful": stateful + MCP_PATH, "stateless": stateless + MCP_PATH}


@pytest.mark.parametrize("era", [MODERN, LEGACY])
@pytest.mark.parametrize("kind", ["stateful", "stateless"])
def test_a_server_without_the_quickstart_s_tools_passes_where_it_conforms(
    strangers: dict[str, str], kind: str, era: str
) -> None:
    run = run_pack(strangers[kind], "--spec-version", era)

    assert (run.code, run.failing()) == (0, set()), run.out
    assert set(run.checks) == {"sessions-draft"}  # the one wire it advertises
    statuses = run.statuses()
    assert statuses["sessions-draft-session-is-context"] == {"SKIPPED"}  # no counter to show the session
    assert statuses["sessions-draft-session-required"] == {"SKIPPED"}  # ping needs no session
    assert statuses["sessions-draft-echo"] == {"SUCCESS"}
    assert {status for found in statuses.values() for status in found} <= {"SUCCESS", "SKIPPED"}
    echoes = [c for c in run.checks["sessions-draft"] if c["id"] == "sessions-draft-echo"]
    assert [c["details"]["case"] for c in echoes] == ["tools/list", "tools/call ping"]  # the tool it found


def test_a_tool_named_with_tool_is_the_one_called(strangers: dict[str, str]) -> None:
    run = run_pack(strangers["stateful"], "--wire", "draft", "--tool", "lookup")  # {} is a tool error: still served

    assert run.code == 0, run.out
    checks = run.checks["sessions-draft"]
    required = next(c for c in checks if c["id"] == "sessions-draft-session-required")
    assert (required["status"], required["details"]["tool"]) == ("SKIPPED", "lookup")
    assert "the tool 'lookup' was served without a session" in required["details"]["reason"]
    assert [c["details"]["case"] for c in checks if c["id"] == "sessions-draft-echo"] == [
        "tools/list",
        "tools/call lookup",
    ]


@pytest.mark.parametrize("venv", [v for v in VENVS if "mcp1" in Path(v).name and "fastmcp" not in v])
def test_a_real_mcp1_server_that_refuses_every_batch_has_its_batch_checks_skipped(venv: str) -> None:
    """mcp 1.x answers a batch with one error, id "server-error", code -32602: not a batch to judge."""
    with versioned_server(venv, SECRET, "sdk") as base, httpx.Client() as http:
        url = base + MCP_PATH
        probe = http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers={"Accept": "*/*"})
        if probe.is_redirect:  # mcp up to 1.11 redirects /mcp to /mcp/
            url += "/"
        default = run_pack(url, "--spec-version", LEGACY)
        conventions = run_pack(url, "--wire", "draft", "--spec-version", LEGACY, "--conventions")

    assert (default.code, default.failing()) == (0, set()), default.out
    statuses = conventions.statuses()
    for check in ("sessions-draft-batch-session-method", "sessions-draft-batch-bad-session"):
        assert statuses[check] == {"SKIPPED"}, conventions.out
    batch = next(c for c in conventions.checks["sessions-draft"] if c["id"] == "sessions-draft-batch-session-method")
    assert "server-error" in batch["details"]["answer"] or "server-error" in batch["details"].get("body", "")


@pytest.fixture(scope="module")
def application_codes() -> Iterator[str]:
    environ = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_ERROR_CODES": "application"}
    with serve(build_app(json_response=True, environ=environ)) as url:
        yield url + MCP_PATH


def test_other_codes_than_the_draft_s_fail_until_the_run_is_told_to_accept_them(application_codes: str) -> None:
    told = ["--not-found-code", "-31043", "--required-code=-31044"]
    refused = run_pack(application_codes, "--wire", "draft")
    accepted = run_pack(application_codes, "--wire", "draft", *told)

    assert refused.code == 1
    assert refused.failing() == CODES | {"sessions-draft-session-required"}, refused.out
    assert (accepted.code, accepted.failing()) == (0, set()), accepted.out
    not_found = next(c for c in accepted.checks["sessions-draft"] if c["id"] == "sessions-draft-session-not-found")
    assert not_found["details"]["codeFrom"] == (
        "Unknown sessions MUST result in a `-32043 SESSION_NOT_FOUND` Error. (PR #20)"
    )
    assert not_found["details"]["accepted"] == {"codes": [-31043], "option": "--not-found-code"}
    assert "-31043" in json.dumps(not_found["details"]["answer"])

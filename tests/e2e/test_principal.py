"""The principal= option: none binds nothing, and a hook that fails reaches nothing (real Starlette auth, in process).

The binding itself is run elsewhere: Starlette's auth in either order (docs/security.md's snippet,
tests/e2e/test_docs.py), the SDK's bearer auth in both eras, a delete by another principal
included (tests/e2e/test_inside_server.py), an async hook (tests/e2e/test_attacks.py), and the token's
``pbh`` claim against every edit (test_attacks.py's table).
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.types import Scope

from _mcp import ModernClient, jwt_claims
from _users import signed_in
from conftest import in_process
from mcp_sessions import get_session


def build(calls: list[str], **options: Any) -> Starlette:
    server = MCPServer("principal")

    @server.tool()
    async def whoami() -> str:
        calls.append("whoami")
        session = get_session()
        return session.id if session is not None else "none"

    return signed_in(server, server.streamable_http_app(streamable_http_path="/mcp"), path="/mcp", **options)


def test_with_principal_none_no_session_is_bound() -> None:
    with in_process(build([], principal=None)) as http:
        assert "pbh" not in jwt_claims(ModernClient(http, "").create_session(x_user="alice")["sessionId"])


def test_a_failing_principal_hook_is_an_internal_error_and_reaches_nothing() -> None:
    calls: list[str] = []

    def broken(scope: Scope) -> str | None:
        raise RuntimeError("boom")

    with in_process(build(calls, principal=broken)) as http:
        client = ModernClient(http, "")
        response, answer = client.request("sessions/create")
        assert response.status_code == 200
        assert answer["error"]["code"] == -32603
        assert "boom" not in response.text
    assert calls == []

"""Sessions bound to the authenticated principal that created them (real Starlette auth, in process)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Mount
from starlette.types import Scope

from _mcp import SESSION_NOT_FOUND, ModernClient, jwt_claims, session_meta, tool_text
from _users import HeaderUser
from conftest import SECRET, in_process
from mcp_sessions import MCPSessionMiddleware, get_session


def build(calls: list[str], **options: Any) -> Starlette:
    server = MCPServer("principal")

    @server.tool()
    async def whoami() -> str:
        calls.append("whoami")
        session = get_session()
        return session.id if session is not None else "none"

    mcp_app = server.streamable_http_app(streamable_http_path="/mcp")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        async with server.session_manager.run():
            yield

    # Authentication runs first (outermost), so the session middleware sees scope["user"].
    return Starlette(
        routes=[Mount("/", mcp_app)],
        middleware=[
            Middleware(AuthenticationMiddleware, backend=HeaderUser()),
            Middleware(MCPSessionMiddleware, secret=SECRET, path="/mcp", **options),
        ],
        lifespan=lifespan,
    )


@pytest.fixture
def calls() -> list[str]:
    return []


@pytest.fixture
def client(calls: list[str]) -> Iterator[ModernClient]:
    with in_process(build(calls)) as http:
        yield ModernClient(http, "")


def whoami(client: ModernClient, session: dict[str, Any], user: str | None) -> dict[str, Any]:
    extra = {} if user is None else {"x_user": user}  # the X-User header
    # arguments named: mypy then knows that **extra can only be headers
    return client.call_tool("whoami", arguments=None, session=session_meta(session), **extra)[1]


def test_the_creator_uses_the_session_and_nobody_else_does(client: ModernClient, calls: list[str]) -> None:
    session = client.create_session(x_user="alice")
    assert "pbh" in jwt_claims(session["sessionId"])
    assert "alice" not in str(jwt_claims(session["sessionId"]))  # a digest, not the name

    assert tool_text(whoami(client, session, "alice")) == jwt_claims(session["sessionId"])["sid"]
    assert calls == ["whoami"]
    for intruder in ("bob", None):
        answer = whoami(client, session, intruder)
        assert answer["error"]["code"] == SESSION_NOT_FOUND
    assert calls == ["whoami"]  # the refused requests never reached the tool


def test_an_anonymous_session_is_not_bound_and_never_a_principals(client: ModernClient, calls: list[str]) -> None:
    session = client.create_session()
    assert "pbh" not in jwt_claims(session["sessionId"])
    assert tool_text(whoami(client, session, None)) == jwt_claims(session["sessionId"])["sid"]
    # Fixation: signed in, bob cannot adopt a session its anonymous creator could read.
    assert whoami(client, session, "bob")["error"]["code"] == SESSION_NOT_FOUND


def test_a_delete_by_another_principal_is_refused(client: ModernClient) -> None:
    session = client.create_session(x_user="alice")
    _, refused = client.request("sessions/delete", session=session_meta(session), x_user="bob")
    assert refused["error"]["code"] == SESSION_NOT_FOUND
    _, deleted = client.request("sessions/delete", session=session_meta(session), x_user="alice")
    assert "error" not in deleted


def test_an_async_principal_hook_and_no_binding(calls: list[str]) -> None:
    async def tenant(scope: Scope) -> str | None:
        return dict(scope["headers"]).get(b"x-tenant", b"").decode() or None

    with in_process(build(calls, principal=tenant)) as http:
        client = ModernClient(http, "")
        session = client.create_session(x_tenant="t1")
        sid = jwt_claims(session["sessionId"])["sid"]
        assert tool_text(client.call_tool("whoami", session=session_meta(session), x_tenant="t1")[1]) == sid
        refused = client.call_tool("whoami", session=session_meta(session), x_tenant="t2")[1]
        assert refused["error"]["code"] == SESSION_NOT_FOUND

    with in_process(build(calls, principal=None)) as http:
        client = ModernClient(http, "")
        assert "pbh" not in jwt_claims(client.create_session(x_user="alice")["sessionId"])


def test_a_failing_principal_hook_is_an_internal_error_and_reaches_nothing(calls: list[str]) -> None:
    def broken(scope: Scope) -> str | None:
        raise RuntimeError("boom")

    with in_process(build(calls, principal=broken)) as http:
        client = ModernClient(http, "")
        response, answer = client.request("sessions/create")
        assert response.status_code == 200
        assert answer["error"]["code"] == -32603
        assert "boom" not in response.text
    assert calls == []

"""Which echoes the client shim takes: a server cannot move it to another session; ``null`` state revokes.

The server here is a small real ASGI app, called in process (``httpx2.ASGITransport``), that answers
like an MCP server with sessions, except for the tools named below, which echo
a session the client does not hold, or echo the held one where it does not
belong (an answer to a request that never carried it, a stray id). The shim
must keep its own session, and keep stamping it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from _client import sent_session
from _mcp import MCP_PATH, SESSION_KEY, SESSION_NOT_FOUND, modern_headers, modern_request
from mcp_sessions.client import HeldSession, SessionTransport

pytestmark = pytest.mark.anyio

MINE = "tok-mine"  # what sessions/create returns: the only session the shim may hold
OTHER = "tok-other"
FUTURE = "2099-01-01T00:00:00Z"
LATER = "2100-01-01T00:00:00Z"


def result(request_id: Any, echo: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"content": []}
    if echo is not None:
        body["_meta"] = {SESSION_KEY: echo}
    return {"jsonrpc": "2.0", "id": request_id, "result": body}


def sse(*messages: dict[str, Any]) -> Response:
    events = b"".join(b"event: message\ndata: " + json.dumps(m).encode() + b"\n\n" for m in messages)
    return Response(events, media_type="text/event-stream")


class HostileServer:
    """Records what the client sent; ``tools/call`` answers by tool name (see ``answer``)."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.app = Starlette(routes=[Route(MCP_PATH, self.endpoint, methods=["POST"])])

    async def endpoint(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.received.append(body)
        rid, method = body.get("id"), body["method"]
        if method == "server/discover":
            return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": {"capabilities": {"sessions": {}}}})
        if method == "sessions/create":
            return JSONResponse(result(rid) | {"result": {"session": {"sessionId": MINE, "expiresAt": FUTURE}}})
        return self.answer(body["params"]["name"], rid, sent_session(body))

    def answer(self, tool: str, rid: Any, sent: Any) -> Response:
        honest = {**sent, "state": f"honest-{len(self.received)}", "expiresAt": FUTURE} if sent != "absent" else None
        if tool == "move":  # another session, with its own state and expiry
            return JSONResponse(result(rid, {"sessionId": OTHER, "state": "moved", "expiresAt": LATER}))
        if tool == "move_sse":
            return sse(result(rid, {"sessionId": OTHER, "state": "moved", "expiresAt": LATER}))
        if tool == "held_echo":  # the held session, whatever the request carried
            return JSONResponse(result(rid, {"sessionId": MINE, "state": "moved", "expiresAt": LATER}))
        if tool == "stray":  # the held session's echo on an answer to a request never sent
            return JSONResponse(result("not-yours", {"sessionId": MINE, "state": "moved", "expiresAt": LATER}))
        if tool == "stray_sse":  # the same, then the real answer (whose echo leaves the state alone)
            stray = result("not-yours", {"sessionId": MINE, "state": "moved", "expiresAt": LATER})
            return sse(stray, result(rid, {"sessionId": MINE}))
        if tool == "stray_not_found":  # -32043 for a request never sent
            error = {"code": SESSION_NOT_FOUND, "message": "Session not found", "data": {"sessionId": MINE}}
            return sse({"jsonrpc": "2.0", "id": "not-yours", "error": error}, result(rid, {"sessionId": MINE}))
        if tool == "malformed":  # the held session, with a state and an expiry of the wrong types
            return JSONResponse(result(rid, {"sessionId": MINE, "state": 42, "expiresAt": "soon"}))
        if tool == "revoke":  # the held session, its client-held state revoked (an explicit null)
            return JSONResponse(result(rid, {**sent, "state": None}))
        if tool == "no_state":  # the held session, state absent: the held state stays
            return JSONResponse(result(rid, {"sessionId": sent["sessionId"]}))
        if tool == "not_a_string":
            return JSONResponse(result(rid, {"sessionId": {"id": OTHER}, "state": "moved"}))
        return JSONResponse(result(rid, honest))


@pytest.fixture
def hostile() -> tuple[HostileServer, str]:
    return HostileServer(), "http://mcp.test" + MCP_PATH


def shim_to(server: HostileServer, **options: Any) -> SessionTransport:
    """The session transport, calling ``server`` in process."""
    return SessionTransport(httpx2.ASGITransport(server.app), **options)


async def call(http: httpx2.AsyncClient, url: str, tool: str, **meta: Any) -> dict[str, Any]:
    body = modern_request("tools/call", {"name": tool, "arguments": {}}, id=tool, meta=meta or None)
    response = await http.post(url, json=body, headers=modern_headers(body))
    assert response.status_code == 200, response.text
    return response.json() if response.headers["content-type"].startswith("application/json") else {}


IGNORED_ECHOES = {"move", "move_sse", "held_echo", "stray", "stray_sse", "not_a_string"}
HOSTILE_TOOLS = ["move", "move_sse", "held_echo", "stray", "stray_sse", "stray_not_found", "malformed", "not_a_string"]


@pytest.mark.parametrize("tool", HOSTILE_TOOLS)
async def test_the_shim_keeps_its_own_session(
    hostile: tuple[HostileServer, str], tool: str, caplog: pytest.LogCaptureFixture
) -> None:
    server, url = hostile
    caplog.set_level(logging.DEBUG, "mcp_sessions.client")
    shim = shim_to(server)
    async with httpx2.AsyncClient(transport=shim) as http:
        await call(http, url, "honest")  # creates the session; the echo sets the state
        held = shim.session.to_dict()
        if tool == "held_echo":  # a request that carries the caller's own session, not the held one
            await call(http, url, tool, **{SESSION_KEY: {"sessionId": "callers-own"}})
        else:
            await call(http, url, tool)
        after = shim.session.to_dict()
        server.received.clear()
        await call(http, url, "honest")

    assert held["sessionId"] == MINE
    assert held["state"].startswith("honest-")
    assert after == held
    assert [sent_session(body)["sessionId"] for body in server.received] == [MINE]
    assert OTHER not in caplog.text
    assert MINE not in caplog.text
    assert "moved" not in caplog.text
    if tool in IGNORED_ECHOES:
        assert any(r.levelno == logging.DEBUG and "ignored a session echo" in r.message for r in caplog.records)


async def test_a_resumed_session_is_not_replaced_by_an_echo(hostile: tuple[HostileServer, str]) -> None:
    server, url = hostile
    shim = shim_to(server, session=HeldSession(MINE, state="saved"))
    async with httpx2.AsyncClient(transport=shim) as http:
        await call(http, url, "move")
        await call(http, url, "move_sse")

    assert shim.session.to_dict() == {"sessionId": MINE, "state": "saved"}


async def test_a_null_state_revokes_the_held_state_and_an_absent_one_keeps_it(
    hostile: tuple[HostileServer, str],
) -> None:
    server, url = hostile
    changes: list[dict[str, str]] = []
    shim = shim_to(server, on_change=lambda session: changes.append(session.to_dict()))
    async with httpx2.AsyncClient(transport=shim) as http:
        await call(http, url, "honest")
        state = shim.session.state
        await call(http, url, "no_state")
        kept = shim.session.state
        await call(http, url, "revoke")
        revoked = shim.session.to_dict()
        server.received.clear()
        await call(http, url, "no_state")

    assert state is not None
    assert state.startswith("honest-")
    assert kept == state
    assert revoked == {"sessionId": MINE, "expiresAt": FUTURE}
    assert [sent_session(body) for body in server.received] == [{"sessionId": MINE}]  # no state sent after it
    assert changes == [{"sessionId": MINE, "expiresAt": FUTURE, "state": state}, revoked]

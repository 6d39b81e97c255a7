"""Which transport session ids are adopted, and when their data ends, by direct ASGI calls.

The SDK's stateful server is replaced by a tiny app that answers with chosen
statuses and headers, to pin the edges a real server rarely shows: an
``initialize`` that failed, a ``DELETE`` the server refused, an id no server sent. A minted id adopted under its
digest is tests/e2e/test_host_conversations.py's, through the real stateful server.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcp_sessions import MCPSessionMiddleware

from ._direct import HANDSHAKE, JSON, PER_REQUEST, Downstream, call, dumps, http_scope, json_response, middleware

pytestmark = pytest.mark.anyio

MINTED = b"5f0e7c0c2b7d4d2e9a6b1c3d4e5f6a7b"


async def handshake(mw: MCPSessionMiddleware, app: Downstream, status: int = 200) -> None:
    """An ``initialize`` that the server answers with ``status`` and the transport session id ``MINTED``."""
    result = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "s", "version": "0"}}
    app.response = json_response({"jsonrpc": "2.0", "id": 0, "result": result}, status=status)
    app.response[0]["headers"] = [*app.response[0]["headers"], (b"mcp-session-id", MINTED)]
    body = dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
    await call(mw, body, http_scope(headers=JSON))
    app.response = json_response({"jsonrpc": "2.0", "id": 1, "result": {}})


async def session_seen(mw: MCPSessionMiddleware, app: Downstream, headers: list[tuple[bytes, bytes]]) -> Any:
    body = dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}})
    await call(mw, body, http_scope(headers=headers))
    return app.seen[2]


@pytest.mark.parametrize(
    ("adopt", "minted_status", "sent", "headers"),
    [
        (True, 400, MINTED, HANDSHAKE),  # the initialize failed: nothing was minted
        (True, 200, b"0" * 32, HANDSHAKE),  # an id the server never sent
        (True, 200, MINTED, PER_REQUEST),  # 2026-07-28 has no transport session: the header is the data-layer token's
        (False, 200, MINTED, HANDSHAKE),  # without the option
    ],
    ids=["failed-initialize", "never-minted", "per-request-era", "option-off"],
)
async def test_what_is_never_adopted(
    adopt: bool, minted_status: int, sent: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    app = Downstream()
    mw = middleware(app, adopt_transport_sessions=adopt)
    await handshake(mw, app, status=minted_status)
    assert await session_seen(mw, app, [*headers, (b"mcp-session-id", sent)]) is None


@pytest.mark.parametrize(("status", "kept"), [(200, False), (204, False), (404, True), (500, True)])
async def test_a_delete_the_server_accepts_drops_the_data(status: int, kept: bool) -> None:
    app = Downstream()
    mw = middleware(app, adopt_transport_sessions=True)
    await handshake(mw, app)
    headers = [*HANDSHAKE, (b"mcp-session-id", MINTED)]
    session = await session_seen(mw, app, headers)
    await session.data.set("k", "v")

    app.response = [
        {"type": "http.response.start", "status": status, "headers": []},
        {"type": "http.response.body", "body": b"", "more_body": False},
    ]
    await call(mw, b"", http_scope("DELETE", headers=[(b"mcp-session-id", MINTED)]))

    assert await mw.store.items(session.id) == ({"k": "v"} if kept else {})
    app.response = json_response({"jsonrpc": "2.0", "id": 1, "result": {}})
    after = await session_seen(mw, app, headers)
    assert (after is not None) is kept  # an ended transport session is no longer adopted

"""Clients for the session wires other than the draft, written from the seeds, not from the middleware.

``StrawmanClient`` behaves as the transports working group's reference client:
it reads the cookie from ``_meta["mcp/session"]`` of every result, drops it on
``null`` (revoked) and sends ``{"id"}`` back. ``Sep1364Client`` puts the
``sessionId`` at the top level of each request and mirrors it in
``Mcp-Session-Id``, as SEP-1364 asks.
"""

from __future__ import annotations

from typing import Any, Final

import httpx

from _mcp import LEGACY, MCP_PATH, MODERN, answer, legacy_request, modern_headers, modern_request

COOKIE: Final = "mcp/session"
STRAWMAN_REQUIRED: Final = -32002
STRAWMAN_REQUIRED_MESSAGE: Final = (  # the strawman's words (its shape file), then where the id goes
    'Session required. Call session/create first. Send its id in params._meta["mcp/session"].'
)
_BASE: Final = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


class StrawmanClient:
    """The reference client's behaviour on the 2026-07-28 wire: one cookie, echoed, dropped on ``null``."""

    def __init__(self, http: httpx.Client, base_url: str, *, declare: bool = True) -> None:
        self.http = http
        self.url = base_url + MCP_PATH
        self.cookie: dict[str, Any] | None = None
        self.capabilities: dict[str, Any] = {"experimental": {"session": {"version": 1}}} if declare else {}
        self.revocations = 0

    def request(self, method: str, params: dict[str, Any] | None = None, *, id: int = 1) -> dict[str, Any]:
        meta: dict[str, Any] = {"io.modelcontextprotocol/clientCapabilities": self.capabilities}
        if self.cookie is not None:
            meta[COOKIE] = {"id": self.cookie["id"]}
        body = modern_request(method, params, id=id, meta=meta)
        message = answer(self.http.post(self.url, json=body, headers=modern_headers(body)))
        result = message.get("result")
        if isinstance(result, dict) and COOKIE in (result.get("_meta") or {}):
            cookie = result["_meta"][COOKIE]
            if cookie is None:
                self.cookie = None
                self.revocations += 1
            else:
                self.cookie = cookie
        return message

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.request("tools/call", {"name": name, "arguments": arguments or {}})


class Sep1364Client:
    """A top-level ``sessionId`` on every request, mirrored in ``Mcp-Session-Id``; either era.

    On the 2025-era wire it runs the ordinary handshake first, and keeps the
    server's transport session header for requests outside a session.
    """

    def __init__(self, http: httpx.Client, base_url: str, *, era: str = MODERN) -> None:
        self.http = http
        self.url = base_url + MCP_PATH
        self.era = era
        self.session_id: str | None = None
        self.transport_id: str | None = None

    def headers(self, body: dict[str, Any]) -> dict[str, str]:
        headers = modern_headers(body) if self.era == MODERN else {**_BASE, "MCP-Protocol-Version": LEGACY}
        header = self.session_id if self.session_id is not None else self.transport_id
        if header is not None:
            headers["Mcp-Session-Id"] = header
        return headers

    def post(self, body: dict[str, Any]) -> httpx.Response:
        response = self.http.post(self.url, json=body, headers=self.headers(body))
        if self.era != MODERN and self.session_id is None and "mcp-session-id" in response.headers:
            self.transport_id = response.headers["mcp-session-id"]
        return response

    def request(
        self, method: str, params: dict[str, Any] | None = None, *, id: int = 1, session: Any = ...
    ) -> dict[str, Any]:
        build = modern_request if self.era == MODERN else legacy_request
        body = build(method, params, id=id)
        chosen = self.session_id if session is ... else session
        if session is not ... or chosen is not None:
            body["sessionId"] = chosen
        return answer(self.post(body))

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.request("tools/call", {"name": name, "arguments": arguments or {}})

    def handshake(self) -> dict[str, Any]:
        """The ordinary 2025-era ``initialize`` (no ``sessionId`` member) and ``notifications/initialized``."""
        result: dict[str, Any] = self.initialize(session=...)["result"]
        return result

    def initialize(self, *, session: Any) -> dict[str, Any]:
        """``initialize``; ``session=...`` leaves the member out, ``None`` sends ``null``, a string resumes."""
        params = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "sep1364", "version": "0"}}
        body = legacy_request("initialize", params, id=0)
        if session is not ...:
            body["sessionId"] = session
        headers = {**_BASE}
        response = self.http.post(self.url, json=body, headers=headers)
        message = answer(response)
        if "mcp-session-id" in response.headers and session is ...:
            self.transport_id = response.headers["mcp-session-id"]
        if isinstance(message.get("sessionId"), str):
            self.session_id = message["sessionId"]
        note = legacy_request("notifications/initialized", id=None)
        if self.session_id is not None and session is not ...:
            note["sessionId"] = self.session_id
        done = self.http.post(self.url, json=note, headers=self.headers(note))
        assert done.status_code == 202, done.text
        return message

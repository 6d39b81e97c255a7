"""The pack's side of the wire: MCP requests of either era over HTTP, as the drafts' clients send them.

Black-box and independent of the middleware's code: built from the drafts. Each
answer is read bounded in bytes (``MAX_BODY``) and time (``TIMEOUT`` between
reads, ``DEADLINE`` in all), and parsed as ``_exchange`` says.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from .._version import __version__
from ._exchange import MAX_BODY, Exchange, Message, Reading, member
from ._model import MODERN

if TYPE_CHECKING:
    import httpx

__all__ = ["CLIENT_INFO", "DEADLINE", "TIMEOUT", "Peer", "ProbeError", "Unusable"]

TIMEOUT: Final = 10.0
"""Seconds to wait for a connection, or between two reads of an answer."""
DEADLINE: Final = 60.0
"""Seconds one answer may take in all (a stream of comments that never answers ends here)."""
PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO: Final = {"name": "mcp-sessions-conformance", "version": __version__}
_NAME_PARAM: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_ACCEPT: Final = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


class ProbeError(Exception):
    """The server could not be asked at all (refused, timed out, an answer over the bound)."""


class Unusable(Exception):
    """A prerequisite the pack needs from the server is missing (a fixture tool, a result to build on)."""


@dataclass
class Peer:
    """A client of one era at one MCP endpoint; on the 2025 era it keeps the server's transport session."""

    http: httpx.Client
    url: str
    era: str
    extra_headers: Mapping[str, str] = field(default_factory=dict)
    capabilities: Mapping[str, object] = field(default_factory=dict)
    """The client's capabilities, declared in the envelope (2026) or in ``initialize`` (2025)."""
    transport_id: str | None = None
    initialize_result: Message | None = None
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def fresh(self) -> Peer:
        """Another client of the same server: no transport session, nothing shared."""
        return Peer(self.http, self.url, self.era, self.extra_headers, self.capabilities)

    def post(self, body: object, headers: Mapping[str, str], request_id: object = None) -> Exchange:
        """POST ``body`` as JSON and read its answer, bounded in bytes and time."""
        import httpx

        raw = json.dumps(body, separators=(",", ":")).encode()
        deadline = time.monotonic() + DEADLINE
        try:
            with self.http.stream("POST", self.url, content=raw, headers={**headers, **self.extra_headers}) as reply:
                media = reply.headers.get("content-type", "").split(";")[0].strip().lower()
                reading = Reading(media == "text/event-stream", request_id)
                for chunk in reply.iter_bytes():
                    if reading.feed(chunk):
                        break
                    if len(reading.body) > MAX_BODY or time.monotonic() > deadline:
                        raise ProbeError(f"no answer within {MAX_BODY} bytes and {DEADLINE:.0f} s")
        except httpx.HTTPError as exc:
            raise ProbeError(f"{type(exc).__name__}: {exc}") from None
        headers_seen = {name.lower(): value for name, value in reversed(reply.headers.multi_items())}
        return Exchange(reply.status_code, headers_seen, tuple(reading.finish()), reading.sse, request_id)

    def message(
        self, method: str, params: Mapping[str, object] | None = None, *, meta: Mapping[str, object] | None = None
    ) -> Message:
        """A request of this era (2026: with the envelope in ``params._meta``), with a fresh id."""
        body_params: dict[str, object] = dict(params or {})
        full_meta = dict(meta or {})
        if self.era == MODERN:
            full_meta = {PROTOCOL_VERSION_KEY: MODERN, CLIENT_CAPABILITIES_KEY: dict(self.capabilities), **full_meta}
        if full_meta:
            body_params["_meta"] = full_meta
        body: Message = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if body_params:
            body["params"] = body_params
        return body

    def headers(self, body: Mapping[str, object], session_header: str | None = None) -> dict[str, str]:
        """The headers a client of this era sends with ``body``; ``session_header`` is its ``Mcp-Session-Id``.

        On the 2025 era, without one, the server's own transport session goes there.
        """
        headers = {**_ACCEPT, "Mcp-Protocol-Version": self.era}
        method = body.get("method")
        if self.era == MODERN and isinstance(method, str):
            headers["Mcp-Method"] = method
            name = member(body, "params", _NAME_PARAM.get(method, ""))
            if isinstance(name, str):
                headers["Mcp-Name"] = name
        chosen = session_header if session_header is not None or self.era == MODERN else self.transport_id
        if chosen is not None:
            headers["Mcp-Session-Id"] = chosen
        return headers

    def call(
        self,
        method: str,
        params: Mapping[str, object] | None = None,
        *,
        meta: Mapping[str, object] | None = None,
        top: Mapping[str, object] | None = None,
        session_header: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Exchange:
        """Send one request; ``top`` adds top-level members (SEP-1364's ``sessionId``), ``headers`` HTTP ones."""
        body = {**self.message(method, params, meta=meta), **(top or {})}
        return self.post(body, {**self.headers(body, session_header), **(headers or {})}, body["id"])

    def notify(self, method: str, *, top: Mapping[str, object] | None = None, session_header: str | None = None) -> int:
        """Send a notification; the HTTP status of its answer."""
        body: Message = {"jsonrpc": "2.0", "method": method, **(top or {})}
        if self.era == MODERN:
            body["params"] = {"_meta": {PROTOCOL_VERSION_KEY: MODERN, CLIENT_CAPABILITIES_KEY: {}}}
        return self.post(body, self.headers(body, session_header)).status

    def handshake(self, *, top: Mapping[str, object] | None = None) -> Exchange:
        """2025 era: ``initialize`` (with ``top`` members) and ``notifications/initialized``; keeps the transport."""
        params = {"protocolVersion": self.era, "capabilities": dict(self.capabilities), "clientInfo": CLIENT_INFO}
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": "initialize", "params": params, **(top or {})}
        opened = self.post(body, _ACCEPT, body["id"])
        self.transport_id = opened.headers.get("mcp-session-id")
        self.initialize_result = opened.result
        note_top = {key: member(opened.answer, key) for key in (top or {})}
        self.notify("notifications/initialized", top=note_top)
        return opened

    def server_capabilities(self) -> Mapping[str, object]:
        """What the server advertises: ``server/discover`` (2026) or the ``initialize`` result (2025)."""
        if self.era == MODERN:
            found = member(self.call("server/discover").result, "capabilities")
        else:
            if self.initialize_result is None:
                self.handshake()
            found = member(self.initialize_result, "capabilities")
        if not isinstance(found, dict):
            raise Unusable("the server advertises no capabilities (server/discover or initialize failed)")
        return found

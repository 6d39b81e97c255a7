"""The pack's side of the wire: MCP requests of either era, and their answers, never trusted.

Black-box and independent of the middleware's code: built from the drafts. The HTTP, and the bounds
on each answer, are :class:`~._link.Link`'s.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from ._answers import excerpt, handshake_only
from ._link import Answer, Link, Message, ProbeError, Reading, is_answer
from ._model import LEGACY, MODERN
from ._version import __version__

__all__ = ["Exchange", "Peer", "ProbeError", "Reading", "Unusable"]

PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO: Final = {"name": "mcp-sessions-conformance", "version": __version__}
UNKNOWN_ID: Final = "sess-conformance-unknown"
"""A session id no server minted."""
MISMATCH: Final = -32020
"""The error of an ``Mcp-Session-Id`` that differs from the session the request names."""
_NAME_PARAM: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
ACCEPT: Final = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


class Unusable(Exception):
    """A prerequisite the pack needs from the server is missing (a fixture tool, a result to build on)."""


def member(value: object, *path: str) -> object:
    """``value[path[0]][path[1]]…``, or ``None`` where a step is missing or not an object."""
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


@dataclass(frozen=True)
class Exchange(Answer):
    """One POST and its :class:`Answer`, with the id of the request it answers."""

    request_id: object = None

    @property
    def answer(self) -> Message | None:
        """The response to the request (a message with its id and no method)."""
        return next((message for message in self.messages if is_answer(message, self.request_id)), None)

    @property
    def notifications(self) -> tuple[Message, ...]:
        """The messages the server sent before its answer (notifications, requests)."""
        return tuple(message for message in self.messages if "method" in message)

    @property
    def result(self) -> Message | None:
        """The answer's ``result`` when it is an object."""
        result = member(self.answer, "result")
        return result if isinstance(result, dict) else None

    @property
    def answer_is_error(self) -> bool:
        """Whether the answer is a JSON-RPC error (or the server gave none: a refusal all the same)."""
        return self.result is None

    @property
    def error_code(self) -> object:
        """The answer's ``error.code`` (``None`` when it is not an error)."""
        return member(self.answer, "error", "code")

    def summary(self) -> dict[str, object]:
        """What a check's ``details`` keep of the exchange: the status and the answer, cut short; without an
        answer, the start of the body (what the server said instead)."""
        answer = json.dumps(self.answer, separators=(",", ":"))
        kept: dict[str, object] = {
            "status": self.status,
            "answer": answer if len(answer) <= 600 else answer[:600] + "…",
        }
        if self.answer is None and self.head:
            kept["body"] = excerpt(self.head)
        return kept

    def explained(self, era: str) -> str:
        """The status and the start of the body, for a person; at 2026-07-28, a hint when the server refused
        the request as a server that speaks only 2025-11-25 does."""
        said = f"HTTP {self.status}: {excerpt(self.head)}" if self.head else f"HTTP {self.status}, no body"
        if era == MODERN and handshake_only(self.status, self.head.decode("utf-8", "replace")):
            said += f". The server seems to speak only {LEGACY}: run the pack with --spec-version {LEGACY}"
        return said


def tool_names(exchange: Exchange) -> frozenset[str]:
    """The names of the tools a ``tools/list`` answer lists."""
    tools = member(exchange.result, "tools")
    names = (member(tool, "name") for tool in tools) if isinstance(tools, list) else ()
    return frozenset(name for name in names if isinstance(name, str))


def tool_text(exchange: Exchange) -> str | None:
    """The text of a successful tool result with a single text content, else ``None``."""
    result = exchange.result
    content = member(result, "content")
    if result is None or result.get("isError") is True or not isinstance(content, list) or len(content) != 1:
        return None
    text = member(content[0], "text")
    return text if isinstance(text, str) else None


@dataclass
class Peer:
    """A client of one era at one MCP endpoint; on the 2025 era it keeps the server's transport session."""

    link: Link
    url: str
    era: str
    extra_headers: Mapping[str, str] = field(default_factory=dict)
    capabilities: Mapping[str, object] = field(default_factory=dict)
    """The client's capabilities, declared in the envelope (2026) or in ``initialize`` (2025)."""
    transport_id: str | None = None
    initialize_result: Message | None = None
    last: Exchange | None = None
    """The last answer the server gave this client (what an :class:`Unusable` is about)."""
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def post(self, body: object, headers: Mapping[str, str], request_id: object = None) -> Exchange:
        """POST ``body`` as JSON and read its answer, bounded in bytes and time (:class:`ProbeError` if none)."""
        raw = json.dumps(body, separators=(",", ":")).encode()
        got = self.link.post(self.url, raw, {**headers, **self.extra_headers}, request_id)
        self.last = Exchange(got.status, got.headers, got.messages, got.sse, got.head, request_id)
        return self.last

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
        headers = {**ACCEPT, "Mcp-Protocol-Version": self.era}
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
        session_header: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Exchange:
        """Send one request; ``headers`` adds HTTP ones."""
        body = self.message(method, params, meta=meta)
        return self.post(body, {**self.headers(body, session_header), **(headers or {})}, body["id"])

    def initialized(self) -> None:
        """2025 era: ``notifications/initialized`` (no envelope: the pack sends no notification on 2026-07-28)."""
        body: Message = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        self.post(body, self.headers(body))

    def handshake(self) -> None:
        """2025 era: ``initialize`` and ``notifications/initialized``; keeps the server's transport session."""
        params = {"protocolVersion": self.era, "capabilities": dict(self.capabilities), "clientInfo": CLIENT_INFO}
        body = self.message("initialize", params)
        opened = self.post(body, ACCEPT, body["id"])
        self.transport_id = opened.headers.get("mcp-session-id")
        self.initialize_result = opened.result
        self.initialized()

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

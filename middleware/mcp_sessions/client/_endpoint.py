"""Where and how the client sends its own ``sessions/create`` and ``sessions/delete``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from .._wire import jsonrpc
from ..profiles import SessionCarrier
from ._answers import decodable_encodings
from ._outgoing import Era, Headers, OutgoingPost

__all__ = ["Endpoint"]

# Headers that describe one message; a request the client builds sets its own.
_PER_MESSAGE_HEADERS: Final = frozenset({"content-length", "transfer-encoding", "mcp-method", "mcp-name"})
_ENVELOPE_PREFIX: Final = "io.modelcontextprotocol/"


@dataclass(slots=True)
class Endpoint:
    """An MCP endpoint with the era, headers, ``_meta`` envelope and timeout of the client's own requests."""

    url: object  # a str, or the HTTP library's URL of the caller's request
    headers: Headers
    era: Era
    envelope: dict[str, object]
    extensions: dict[str, object]

    @classmethod
    def learn(cls, post: OutgoingPost) -> Endpoint:
        """The endpoint of a caller's POST: its URL, headers (auth included), envelope and timeout."""
        headers = [
            (k, decodable_encodings(v) if k.lower() == "accept-encoding" else v)
            for k, v in post.headers
            if k.lower() not in _PER_MESSAGE_HEADERS and not (post.era.session_header and k.lower() == "mcp-session-id")
        ]
        carrier = post.profile.carrier
        session_key = carrier.meta_key if isinstance(carrier, SessionCarrier) else None
        envelope: dict[str, object] = {}
        for message in post.messages:
            meta = jsonrpc.params_meta(message)
            if meta:
                envelope = {k: v for k, v in meta.items() if k.startswith(_ENVELOPE_PREFIX) and k != session_key}
                break
        extensions = {k: v for k, v in post.extensions.items() if k == "timeout"}
        return cls(post.url, headers, post.era, envelope, extensions)

    @classmethod
    def explicit(cls, url: str, protocol_version: str, headers: Mapping[str, str] | None, timeout: float) -> Endpoint:
        """An endpoint the caller named, with the headers a client of ``protocol_version`` sends."""
        era = Era.of(protocol_version)
        base = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": protocol_version,
        }
        base.update({k.lower(): v for k, v in (headers or {}).items()})
        envelope: dict[str, object] = {}
        if era is Era.PER_REQUEST:
            envelope = {
                _ENVELOPE_PREFIX + "protocolVersion": protocol_version,
                _ENVELOPE_PREFIX + "clientCapabilities": {},
            }
        seconds = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
        return cls(url, list(base.items()), era, envelope, {"timeout": seconds})

    def headers_for(self, method: str, token: str | None, length: int) -> Headers:
        """The headers of one of the client's own requests (``Mcp-Session-Id`` only on 2026-07-28)."""
        headers = [(k, v) for k, v in self.headers if not (self.era.session_header and k.lower() == "mcp-session-id")]
        if self.era is Era.PER_REQUEST:
            headers.append(("mcp-method", method))
            if token is not None:
                headers.append(("mcp-session-id", token))
        headers.append(("content-length", str(length)))
        return headers

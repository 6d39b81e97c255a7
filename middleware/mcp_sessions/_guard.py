"""The wrapped server's own request checks, applied before any answer the middleware gives itself.

The middleware answers ``sessions/create``, ``sessions/delete`` and its own
JSON-RPC errors without calling the application. A request the ``mcp`` SDK's
Streamable HTTP transport would refuse must not get such an answer: a foreign
``Host`` (DNS rebinding), a refused ``Origin``, a missing ``Accept``, an
unsupported protocol version or a malformed envelope is refused here with the
status, headers and body bytes the SDK sends, in the order the SDK checks them.

Pure: no I/O, and no import of the SDK (it is not a dependency). References:
``mcp`` 2.3 ``server/transport_security.py``, ``server/streamable_http.py``
(2025-era POST), ``server/_streamable_http_modern.py`` and
``shared/inbound.py`` (2026-07-28 POST), ``MCPServer.streamable_http_app``
(the DNS-rebinding defaults).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from starlette.types import Send

from ._protocol import (
    HANDSHAKE_VERSIONS,
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MCP_METHOD_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    MODERN_VERSIONS,
    UNSUPPORTED_PROTOCOL_VERSION,
)

__all__ = ["LOCALHOST_HOSTS", "LOCALHOST_ORIGINS", "Guard", "Rejection"]

# What MCPServer.streamable_http_app turns on when its ``host`` is a loopback name (its default).
LOOPBACK_NAMES: Final = frozenset({"127.0.0.1", "localhost", "::1"})
LOCALHOST_HOSTS: Final = ("127.0.0.1:*", "localhost:*", "[::1]:*")
LOCALHOST_ORIGINS: Final = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")

_MCP_NAME_HEADER: Final = b"mcp-name"
_ROUTING_HEADERS: Final = frozenset({MCP_PROTOCOL_VERSION_HEADER, MCP_METHOD_HEADER, _MCP_NAME_HEADER})
_NAME_PARAMS: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
_CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
_BASE64_SENTINEL: Final = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")


@dataclass(frozen=True, slots=True)
class Rejection:
    """The answer the wrapped server would have sent instead of the middleware's.

    ``status``, ``headers`` and ``body`` are the SDK's bytes; ``code`` and
    ``message`` are the JSON-RPC error in the body, if it has one, and
    ``reason`` a low-cardinality name for logs and telemetry.
    """

    status: int
    """The HTTP status the server answers with."""
    headers: tuple[tuple[bytes, bytes], ...]
    """The response headers, as the server sends them."""
    body: bytes
    """The response body, byte for byte."""
    reason: str
    """A low-cardinality name for logs and telemetry (``invalid_host``, ``not_acceptable``…)."""
    code: int | None = None
    """The JSON-RPC error code in the body, if the body is a JSON-RPC error."""
    message: str | None = None
    """The JSON-RPC error message in the body, if any."""

    async def send(self, send: Send) -> None:
        """Send this answer as a complete HTTP response."""
        await send({"type": "http.response.start", "status": self.status, "headers": list(self.headers)})
        await send({"type": "http.response.body", "body": self.body, "more_body": False})


def _plain(status: int, text: str, reason: str) -> Rejection:
    """A Starlette ``Response(text)`` without a media type: the SDK's Host and Origin answers."""
    body = text.encode()
    return Rejection(status, ((b"content-length", str(len(body)).encode()),), body, reason)


def _empty(status: int, reason: str) -> Rejection:
    """A Starlette ``Response(status_code=...)``: the 2026-07-28 406 and 202."""
    return Rejection(status, ((b"content-length", b"0"),), b"", reason)


def _legacy_error(status: int, code: int, message: str, reason: str) -> Rejection:
    """The 2025-era transport's error: ``JSONRPCError(id=None)`` dumped by pydantic, content type first."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}, separators=(",", ":")
    ).encode()
    headers = ((b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()))
    return Rejection(status, headers, body, reason, code, message)


def _modern_error(request_id: Any, code: int, message: str, reason: str, data: Any = None) -> Rejection:
    """The 2026-07-28 entry's ``_write``: ``exclude_none``, then ``id: null`` put back last."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    payload: dict[str, Any] = {"jsonrpc": "2.0"}
    if request_id is not None:
        payload["id"] = request_id
    payload["error"] = error
    if request_id is None:
        payload["id"] = None
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = ((b"content-length", str(len(body)).encode()), (b"content-type", b"application/json"))
    return Rejection(400, headers, body, reason, code, message)


_INVALID_HOST: Final = _plain(421, "Invalid Host header", "invalid_host")
_INVALID_ORIGIN: Final = _plain(403, "Invalid Origin header", "invalid_origin")
_MODERN_NOT_ACCEPTABLE: Final = _empty(406, "not_acceptable")
_MODERN_INVALID_BODY: Final = _modern_error(
    None, INVALID_REQUEST, "Body must be a single JSON-RPC request or notification object", "invalid_envelope"
)
_LEGACY_JSON_NOT_ACCEPTABLE: Final = _legacy_error(
    406, INVALID_REQUEST, "Not Acceptable: Client must accept application/json", "not_acceptable"
)
_LEGACY_NOT_ACCEPTABLE: Final = _legacy_error(
    406,
    INVALID_REQUEST,
    "Not Acceptable: Client must accept both application/json and text/event-stream",
    "not_acceptable",
)
_LEGACY_UNSUPPORTED_MEDIA_TYPE: Final = _legacy_error(
    415, INVALID_REQUEST, "Unsupported Media Type: Content-Type must be application/json", "unsupported_media_type"
)
# The SDK's message goes on with pydantic's account of each union member's failure.
_LEGACY_NOT_A_MESSAGE: Final = _legacy_error(
    400,
    INVALID_PARAMS,
    'Validation error: the body is not one JSON-RPC message (an object with jsonrpc "2.0", a string '
    "method, params an object if present, and an id that is a string or an integer)",
    "invalid_envelope",
)
# A 2025-era body whose id is not a string or an integer reads as a notification: accepted, never answered.
_LEGACY_ACCEPTED: Final = Rejection(
    202, ((b"content-type", b"application/json"), (b"content-length", b"0")), b"", "not_a_request"
)


class Guard:
    """The checks the wrapped ``mcp`` SDK server applies to a POST, built once from its options.

    Pass what you pass to ``streamable_http_app``: ``transport_security``
    (the SDK's ``TransportSecuritySettings``, or any object with its three
    attributes), else ``host``, and ``json_response``. As in the SDK, a
    loopback ``host`` (the default, ``127.0.0.1``) turns DNS-rebinding
    protection on with the localhost allow-lists, and any other host turns it
    off. ``allowed_hosts`` and ``allowed_origins`` turn it on with those
    lists instead (``"example.com:*"`` allows any port). ``modern_versions``
    are the 2026-07-28-style versions the server serves.
    """

    __slots__ = ("_allowed_hosts", "_allowed_origins", "_json_response", "_modern_versions", "_protect")

    def __init__(
        self,
        *,
        transport_security: Any = None,
        host: str = "127.0.0.1",
        allowed_hosts: Collection[str] | None = None,
        allowed_origins: Collection[str] | None = None,
        json_response: bool = False,
        modern_versions: Sequence[str] = MODERN_VERSIONS,
    ) -> None:
        if isinstance(allowed_hosts, str) or isinstance(allowed_origins, str):
            raise TypeError("allowed_hosts and allowed_origins take collections of strings, not one string")
        if transport_security is not None:
            if allowed_hosts is not None or allowed_origins is not None:
                raise ValueError("pass transport_security or allowed_hosts/allowed_origins, not both")
            try:
                protect = bool(transport_security.enable_dns_rebinding_protection)
                hosts = list(transport_security.allowed_hosts)
                origins = list(transport_security.allowed_origins)
            except (AttributeError, TypeError):
                raise TypeError(
                    "transport_security must be the mcp SDK's TransportSecuritySettings (or an object with "
                    "enable_dns_rebinding_protection, allowed_hosts and allowed_origins)"
                ) from None
        elif allowed_hosts is not None or allowed_origins is not None:
            protect, hosts, origins = True, list(allowed_hosts or ()), list(allowed_origins or ())
        elif host in LOOPBACK_NAMES:
            protect, hosts, origins = True, list(LOCALHOST_HOSTS), list(LOCALHOST_ORIGINS)
        else:
            protect, hosts, origins = False, [], []
        if not all(isinstance(value, str) for value in (*hosts, *origins)):
            raise TypeError("allowed hosts and origins must be strings")
        if isinstance(modern_versions, str) or not all(isinstance(v, str) for v in modern_versions):
            raise TypeError("modern_versions takes a sequence of version strings")
        self._protect = protect
        self._allowed_hosts = _AllowList(hosts)
        self._allowed_origins = _AllowList(origins)
        self._json_response = json_response
        self._modern_versions = tuple(modern_versions)

    @property
    def dns_rebinding_protection(self) -> bool:
        """Whether ``Host`` and ``Origin`` are checked."""
        return self._protect

    def check(self, headers: Iterable[tuple[bytes, bytes]], message: Any) -> Rejection | None:
        """The server's answer if it would refuse this POST, else ``None``.

        ``headers`` are the ASGI scope's raw header pairs (lower-case names;
        repeated routing headers are refused on 2026-07-28), ``message`` the
        parsed body of a JSON POST the middleware would answer: a JSON-RPC
        call (an object with a string ``method``) or a batch. Anything else is
        refused as not a message; the SDK would take a JSON-RPC response on the
        2025 path (202), but the middleware never answers one. The era is the
        SDK's: an ``Mcp-Protocol-Version`` that is absent or a handshake
        version is the 2025 path, anything else the 2026-07-28 one.
        """
        first: dict[bytes, bytes] = {}
        repeated_routing: bytes | None = None
        for name, value in headers:
            if name not in first:
                first[name] = value
            elif repeated_routing is None and name in _ROUTING_HEADERS:
                repeated_routing = name
        if self._protect:
            host = first.get(b"host", b"").decode("latin-1")
            if not host or not self._allowed_hosts.allows(host):
                return _INVALID_HOST
            origin = first.get(b"origin", b"").decode("latin-1")
            if origin and not self._allowed_origins.allows(origin):
                return _INVALID_ORIGIN
        has_json, has_sse = _accepts(first.get(b"accept", b"").decode("latin-1"))
        raw_version = first.get(MCP_PROTOCOL_VERSION_HEADER)
        version = None if raw_version is None else raw_version.decode("latin-1")
        if version is None or version in HANDSHAKE_VERSIONS:
            return self._check_legacy(first, has_json, has_sse, message)
        if not has_json or (not self._json_response and not has_sse):
            return _MODERN_NOT_ACCEPTABLE
        return self._check_modern(first, version, repeated_routing, has_sse, message)

    def _check_legacy(self, first: dict[bytes, bytes], has_json: bool, has_sse: bool, message: Any) -> Rejection | None:
        if self._json_response:
            if not has_json:
                return _LEGACY_JSON_NOT_ACCEPTABLE
        elif not (has_json and has_sse):
            return _LEGACY_NOT_ACCEPTABLE
        content_type = first.get(b"content-type", b"").decode("latin-1")
        if not any(part.strip() == "application/json" for part in content_type.split(";")[0].split(",")):
            return _LEGACY_UNSUPPORTED_MEDIA_TYPE
        if not isinstance(message, dict) or not _is_notification(message):
            return _LEGACY_NOT_A_MESSAGE
        if "id" in message and not _is_request_id(message["id"]):
            return _LEGACY_ACCEPTED
        return None

    def _check_modern(
        self, first: dict[bytes, bytes], version: str, repeated_routing: bytes | None, has_sse: bool, message: Any
    ) -> Rejection | None:
        if not isinstance(message, dict) or not _is_notification(message):
            return _MODERN_INVALID_BODY
        if "id" not in message:
            return self._unsupported(version, None)
        request_id = message["id"]
        if not _is_request_id(request_id):
            return _MODERN_INVALID_BODY
        if message["method"] == "subscriptions/listen" and not has_sse:
            return _MODERN_NOT_ACCEPTABLE  # its answer is always a stream, even in JSON mode
        if repeated_routing is not None:
            text = f"{repeated_routing.decode('latin-1')} header appears more than once"
            return _modern_error(request_id, HEADER_MISMATCH, text, "header_mismatch")
        return self._classify(first, request_id, message)

    def _classify(self, first: dict[bytes, bytes], request_id: Any, message: dict[str, Any]) -> Rejection | None:
        """``mcp.shared.inbound.classify_inbound_request`` with the request's headers, first failure wins."""
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if not isinstance(meta, Mapping):
            text = (
                "params._meta must be an object carrying the required "
                f"{_PROTOCOL_VERSION_KEY!r} and {_CLIENT_CAPABILITIES_KEY!r} envelope keys"
            )
            return _modern_error(request_id, INVALID_PARAMS, text, "invalid_envelope")
        if missing := [key for key in (_PROTOCOL_VERSION_KEY, _CLIENT_CAPABILITIES_KEY) if key not in meta]:
            text = f"params._meta is missing the required envelope key(s): {', '.join(missing)}"
            return _modern_error(request_id, INVALID_PARAMS, text, "invalid_envelope")
        protocol_version = meta[_PROTOCOL_VERSION_KEY]
        header_version = first.get(MCP_PROTOCOL_VERSION_HEADER)
        if header_version is None or header_version.decode("latin-1") != protocol_version:
            text = "mcp-protocol-version header does not match the request envelope's protocol version"
            return _modern_error(request_id, HEADER_MISMATCH, text, "header_mismatch")
        method = message["method"]
        header_method = first.get(MCP_METHOD_HEADER)
        if header_method is None or header_method.decode("latin-1") != method:
            text = "mcp-method header does not match the request body's method"
            return _modern_error(request_id, HEADER_MISMATCH, text, "header_mismatch")
        name_key = _NAME_PARAMS.get(method)
        if name_key is not None and isinstance(params, dict):
            body_value = params.get(name_key)
            header_name = first.get(_MCP_NAME_HEADER)
            decoded = None if header_name is None else _decode_header_value(header_name.decode("latin-1"))
            if body_value is not None and decoded != body_value:
                text = f"mcp-name header does not match the request body's {name_key!r} parameter"
                return _modern_error(request_id, HEADER_MISMATCH, text, "header_mismatch")
        if not isinstance(protocol_version, str):  # unreachable with headers, kept for the ladder's order
            return _modern_error(
                request_id, INVALID_PARAMS, "the protocol-version envelope value must be a string", "invalid_envelope"
            )
        return self._unsupported(protocol_version, request_id)

    def _unsupported(self, requested: str, request_id: Any) -> Rejection | None:
        if requested in self._modern_versions:
            return None
        data = {"supported": list(self._modern_versions), "requested": requested}
        reason = "unsupported_protocol_version"
        return _modern_error(request_id, UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version", reason, data)


class _AllowList:
    """Exact values, and ``base:*`` patterns that allow ``base:`` followed by anything (the SDK's rule)."""

    __slots__ = ("_exact", "_prefixes")

    def __init__(self, values: Iterable[str]) -> None:
        values = list(values)
        self._exact = frozenset(values)
        self._prefixes = tuple(value[:-2] + ":" for value in values if value.endswith(":*"))

    def allows(self, value: str) -> bool:
        return value in self._exact or value.startswith(self._prefixes)


def _accepts(accept: str) -> tuple[bool, bool]:
    """(JSON, SSE) acceptable, as ``mcp.server.streamable_http.check_accept_headers`` reads ``Accept``."""
    types = {media_type.strip().split(";")[0].strip().lower() for media_type in accept.split(",")}
    wildcard = "*/*" in types
    return (
        wildcard or "application/json" in types or "application/*" in types,
        wildcard or "text/event-stream" in types or "text/*" in types,
    )


def _is_request_id(value: Any) -> bool:
    """A JSON-RPC id as the SDK's ``RequestId`` validates it: a string, or an integer that is not a boolean."""
    return type(value) is str or type(value) is int


def _is_notification(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` validates as the SDK's ``JSONRPCNotification`` (which ignores an ``id``)."""
    params = message.get("params")
    return (
        message.get("jsonrpc") == "2.0"
        and type(message.get("method")) is str
        and (params is None or isinstance(params, dict))
    )


def _decode_header_value(value: str) -> str | None:
    """``mcp.shared.inbound.decode_header_value``: the ``=?base64?...?=`` sentinel, strictly decoded."""
    match = _BASE64_SENTINEL.fullmatch(value)
    if match is None:
        return value
    payload = match.group("payload")
    try:
        decoded = base64.b64decode(payload, validate=True)
    except binascii.Error:
        return None
    if base64.b64encode(decoded).decode("ascii") != payload:
        return None
    try:
        return decoded.decode("utf-8")
    except UnicodeDecodeError:
        return None

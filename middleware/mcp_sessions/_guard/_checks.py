"""The era-specific checks of a POST, as the ``mcp`` SDK makes them, and their canned answers.

The 2025-era path (``server/streamable_http.py``): ``Accept``, ``Content-Type``,
the JSON parser and one JSON-RPC message. The 2026-07-28 path
(``server/_streamable_http_modern.py``, ``shared/inbound.py``): ``Accept``, the
JSON parser, one request object, routing headers that match the body, the
envelope keys in ``params._meta``, a supported version. The parsers are in
``_parsers.py``.
Pure: no I/O, and no import of the SDK. :class:`mcp_sessions.Guard` runs the
era's checks after its own ``Host`` and ``Origin`` ones.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Final, Literal, NotRequired, TypedDict, TypeGuard

from .._wire.protocol import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MCP_METHOD_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from ._parsers import legacy_parse_rejection, modern_parse_rejection
from ._rejection import Rejection, _empty, _legacy_error, _modern_error

__all__ = ["check_legacy", "check_modern"]

_MCP_NAME_HEADER: Final = b"mcp-name"
_ROUTING_HEADERS: Final = frozenset({MCP_PROTOCOL_VERSION_HEADER, MCP_METHOD_HEADER, _MCP_NAME_HEADER})
_NAME_PARAMS: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
_CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
_BASE64_SENTINEL: Final = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")


class _Message(TypedDict):
    """A JSON-RPC message as the SDK's ``JSONRPCNotification`` validates it; a request has an ``id`` too."""

    jsonrpc: Literal["2.0"]
    method: str
    params: NotRequired[dict[str, object] | None]
    id: NotRequired[object]


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


def check_legacy(
    first: dict[bytes, bytes],
    has_json: bool,
    has_sse: bool,
    message: object,
    body: bytes | None,
    *,
    json_response: bool,
) -> Rejection | None:
    """The 2025-era POST's checks after Host and Origin: ``Accept``, ``Content-Type``, the parser, the envelope."""
    if json_response:
        if not has_json:
            return _LEGACY_JSON_NOT_ACCEPTABLE
    elif not (has_json and has_sse):
        return _LEGACY_NOT_ACCEPTABLE
    content_type = first.get(b"content-type", b"").decode("latin-1")
    if not any(part.strip() == "application/json" for part in content_type.split(";")[0].split(",")):
        return _LEGACY_UNSUPPORTED_MEDIA_TYPE
    if body is not None and (rejection := legacy_parse_rejection(body)) is not None:
        return rejection
    if not isinstance(message, dict) or not _is_notification(message):
        return _LEGACY_NOT_A_MESSAGE
    if "id" in message and not _is_request_id(message["id"]):
        return _LEGACY_ACCEPTED
    return None


def check_modern(
    first: dict[bytes, bytes],
    version: str,
    repeated_routing: bytes | None,
    has_json: bool,
    has_sse: bool,
    message: object,
    body: bytes | None,
    *,
    json_response: bool,
    modern_versions: tuple[str, ...],
) -> Rejection | None:
    """The 2026-07-28 POST's checks after Host and Origin: ``Accept``, the parser, the envelope, routing
    headers, version."""
    if not has_json or (not json_response and not has_sse):
        return _MODERN_NOT_ACCEPTABLE
    if body is not None and (rejection := modern_parse_rejection(body)) is not None:
        return rejection
    if not isinstance(message, dict) or not _is_notification(message):
        return _MODERN_INVALID_BODY
    if "id" not in message:
        return _unsupported(version, None, modern_versions)
    request_id = message["id"]
    if not _is_request_id(request_id):
        return _MODERN_INVALID_BODY
    if message["method"] == "subscriptions/listen" and not has_sse:
        return _MODERN_NOT_ACCEPTABLE  # its answer is always a stream, even in JSON mode
    if repeated_routing is not None:
        text = f"{repeated_routing.decode('latin-1')} header appears more than once"
        return _modern_error(request_id, HEADER_MISMATCH, text, "header_mismatch")
    return _classify(first, request_id, message, modern_versions)


def _classify(
    first: dict[bytes, bytes], request_id: object, message: _Message, modern_versions: tuple[str, ...]
) -> Rejection | None:
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
    return _unsupported(protocol_version, request_id, modern_versions)


def _unsupported(requested: str, request_id: object, modern_versions: tuple[str, ...]) -> Rejection | None:
    if requested in modern_versions:
        return None
    data = {"supported": list(modern_versions), "requested": requested}
    reason = "unsupported_protocol_version"
    return _modern_error(request_id, UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version", reason, data)


def _accepts(accept: str) -> tuple[bool, bool]:
    """(JSON, SSE) acceptable, as ``mcp.server.streamable_http.check_accept_headers`` reads ``Accept``."""
    types = {media_type.strip().split(";")[0].strip().lower() for media_type in accept.split(",")}
    wildcard = "*/*" in types
    return (
        wildcard or "application/json" in types or "application/*" in types,
        wildcard or "text/event-stream" in types or "text/*" in types,
    )


def _is_request_id(value: object) -> bool:
    """A JSON-RPC id as the SDK's ``RequestId`` validates it: a string, or an integer that is not a boolean."""
    return type(value) is str or type(value) is int


def _is_notification(message: Mapping[str, object]) -> TypeGuard[_Message]:
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

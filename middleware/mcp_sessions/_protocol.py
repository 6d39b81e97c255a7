"""The wire profile "draft-2026-03": names, codes and eras.

Every literal of the data-layer sessions draft lives here, so that a later wire
profile changes this module and nothing else.
"""

from __future__ import annotations

from typing import Final

SESSION_META_KEY: Final = "io.modelcontextprotocol/session"
SESSIONS_EXTENSION_ID: Final = "io.modelcontextprotocol/sessions"

METHOD_CREATE: Final = "sessions/create"
METHOD_DELETE: Final = "sessions/delete"
SESSION_METHODS: Final = frozenset({METHOD_CREATE, METHOD_DELETE})

# Methods a client needs before it can hold a session; a policy that requires
# sessions "for everything" still lets these through.
SESSIONLESS_METHODS: Final = frozenset(
    {"initialize", "notifications/initialized", "server/discover", "ping", METHOD_CREATE}
)

# JSON-RPC error codes.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
HEADER_MISMATCH: Final = -32020
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022
SESSION_NOT_FOUND: Final = -32043
SESSION_REQUIRED: Final = -32044
# Retryable, in the implementation range: -32000 and -32001 are the SDK's.
SESSION_STORE_UNAVAILABLE: Final = -32010

HANDSHAKE_VERSIONS: Final = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
MODERN_VERSION: Final = "2026-07-28"
# The per-request-envelope versions the mcp SDK serves, in its order (its -32022 answer lists them).
MODERN_VERSIONS: Final = (MODERN_VERSION,)
KNOWN_VERSIONS: Final = HANDSHAKE_VERSIONS | frozenset(MODERN_VERSIONS)

# Every method a client sends in either era (the mcp SDK's client requests and
# notifications), plus the session methods: telemetry files any other name under "_OTHER".
KNOWN_METHODS: Final = frozenset(
    {
        "completion/complete",
        "initialize",
        "logging/setLevel",
        "ping",
        "prompts/get",
        "prompts/list",
        "resources/list",
        "resources/read",
        "resources/subscribe",
        "resources/templates/list",
        "resources/unsubscribe",
        "server/discover",
        "subscriptions/listen",
        "tools/call",
        "tools/list",
        "notifications/cancelled",
        "notifications/initialized",
        "notifications/progress",
        "notifications/roots/list_changed",
    }
    | SESSION_METHODS
)

MCP_SESSION_ID_HEADER: Final = b"mcp-session-id"
MCP_PROTOCOL_VERSION_HEADER: Final = b"mcp-protocol-version"
MCP_METHOD_HEADER: Final = b"mcp-method"

# The 2026-07-28 transport table: JSON-RPC code -> HTTP status. Anything else is 200.
_MODERN_HTTP_STATUS: Final = {
    METHOD_NOT_FOUND: 404,
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    SESSION_STORE_UNAVAILABLE: 503,
}


def is_modern(protocol_version: str | None) -> bool:
    """Whether a request takes the 2026-07-28 path, decided as the SDK decides it.

    The `Mcp-Protocol-Version` header alone chooses: absent or a handshake-era
    version is the legacy path, anything else the modern one.
    """
    return protocol_version is not None and protocol_version not in HANDSHAKE_VERSIONS


def http_status(code: int, *, modern: bool) -> int:
    """The HTTP status for an error response the middleware answers itself."""
    if code == SESSION_STORE_UNAVAILABLE:
        return 503
    if not modern:
        return 200
    return _MODERN_HTTP_STATUS.get(code, 200)


def capability(*, required: bool) -> dict[str, bool]:
    """The object advertised under `capabilities.sessions`."""
    return {"required": True} if required else {}

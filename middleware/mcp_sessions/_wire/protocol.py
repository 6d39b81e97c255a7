"""What every wire shares: JSON-RPC and MCP error codes, eras, headers, the HTTP status table, times.

Nothing here belongs to one session wire; each wire's names and codes live in
its module under :mod:`mcp_sessions.profiles`.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime
from typing import Final

# JSON-RPC error codes.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
# MCP 2026-07-28: a header that disagrees with the body.
HEADER_MISMATCH: Final = -32020
"""Error code: the ``Mcp-Session-Id`` or ``Mcp-Method`` header differs from the body (2026-07-28 only)."""
# Retryable, in the implementation range: -32000 and -32001 are the SDK's.
SESSION_STORE_UNAVAILABLE: Final = -32010
"""Error code: the store could not answer; temporary, answered with HTTP 503 and ``Retry-After``."""
RATE_LIMITED: Final = -32011
"""Error code: rate limited, a limit that time lifts (``create_limit``, a handle budget, a gateway's processes);
temporary, answered with HTTP 429 and a ``retryAfter``."""
UPSTREAM_UNAVAILABLE: Final = -32014
"""Error code: the server did not answer (a gateway's upstream, or the verdict a probe waited for); temporary,
with HTTP 502, 503 or 504 and ``Retry-After``."""

LEGACY_VERSIONS: Final = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
MODERN_VERSION: Final = "2026-07-28"
KNOWN_VERSIONS: Final = LEGACY_VERSIONS | {MODERN_VERSION}
# The handshake versions as an ASGI header carries them, and as text.

# Every method a client sends in either era (the mcp SDK's client requests and notifications):
# telemetry files any other name, and any session method of a wire not enabled, under "_OTHER".
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
    # The session methods of the enabled wires are added by the middleware (Telemetry(known_methods=...)).
)

MCP_SESSION_ID_HEADER: Final = b"mcp-session-id"
MCP_PROTOCOL_VERSION_HEADER: Final = b"mcp-protocol-version"
MCP_METHOD_HEADER: Final = b"mcp-method"

# JSON-RPC code -> HTTP status of an error the middleware answers itself, in every era (anything else is 200),
# and in the 2026-07-28 transport table.
_HTTP_STATUS: Final = {SESSION_STORE_UNAVAILABLE: 503, RATE_LIMITED: 429}
_MODERN_HTTP_STATUS: Final = {
    **_HTTP_STATUS,
    METHOD_NOT_FOUND: 404,
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
}


def http_status(code: int, *, modern: bool) -> int:
    """The HTTP status for an error response the middleware answers itself, on the 2025 wire or (``modern``) the
    2026-07-28 one."""
    return (_MODERN_HTTP_STATUS if modern else _HTTP_STATUS).get(code, 200)


@functools.lru_cache(maxsize=64)
def iso(timestamp: int) -> str:
    """A time as the wires write it, RFC 3339 UTC; cached, as most echoes of a process repeat a few expiry times."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


MAX_CONVERSATION_ID_LENGTH: Final = 256
# Printable ASCII without space, quotes, backslash, comma and semicolon: safe in an attribute,
# a log line and a baggage value; anything else is not a conversation id and is ignored.
_CONVERSATION_ID: Final = re.compile(rf"[!#-+\--:<-\[\]-~]{{1,{MAX_CONVERSATION_ID_LENGTH}}}")
CONVERSATION_MEMBER: Final = "gen_ai.conversation.id"
"""The baggage member that names a conversation (the OpenTelemetry GenAI conventions' attribute): a host's
conversation, as the sources read it and ``connect`` sends it."""


def conversation_id(value: object) -> str | None:
    """``value`` if it can be a conversation id (a bounded string of safe characters), else ``None``."""
    return value if type(value) is str and _CONVERSATION_ID.fullmatch(value) else None

"""The guard of the server the middleware runs inside: read from that server's own transport settings.

Placed at an MCP endpoint (see ``_inside.py``), the middleware finds the ``mcp``
SDK's transport app there (``StreamableHTTPASGIApp``, fastmcp's too), whose
session manager holds the settings the server checks requests with: its
``TransportSecuritySettings`` (``None``: no DNS-rebinding protection) and
``json_response``. fastmcp builds its session manager when its lifespan starts,
so the settings are read at the first request that needs them, and again
whenever the server replaces its session manager.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._guard import Guard, TransportSecurity
from ._parsers import SDK_FRAMES_AT_TRANSPORT
from ._rejection import Rejection, _plain

__all__ = ["ServerGuard", "guard_of_manager"]

_UNREAD = object()
# The SDK's RequestBodyLimitMiddleware, in front of its transport: checked before anything else.
_TOO_LARGE = _plain(413, "Request body too large", "too_large")


def guard_of_manager(manager: object) -> Guard:
    """The :class:`Guard` of an SDK session manager (no manager yet: a server that protects nothing)."""
    security: TransportSecurity | None = getattr(manager, "security_settings", None)
    json_response = getattr(manager, "json_response", False) is True
    if security is None:  # the SDK's transport then checks neither Host nor Origin
        guard = Guard(host="0.0.0.0", json_response=json_response)
    else:
        guard = Guard(transport_security=security, json_response=json_response)
    # Right in front of the transport app, and ServerGuard.check is one frame more on the guard's side.
    guard.sdk_frames = SDK_FRAMES_AT_TRANSPORT - 1
    return guard


class ServerGuard:
    """A :class:`Guard` that follows the settings of the transport app it sits in front of."""

    __slots__ = ("_guard", "_limit", "_manager", "_transport")

    def __init__(self, transport: object) -> None:
        self._transport = transport
        self._manager: object = _UNREAD
        self._guard = Guard()
        self._limit: int | None = None

    @property
    def guard(self) -> Guard:
        """The guard for the server's current settings."""
        manager = getattr(self._transport, "session_manager", None)
        if manager is not self._manager:
            self._guard = guard_of_manager(manager)
            limit = getattr(manager, "max_request_body_size", None)
            self._limit = limit if type(limit) is int else None
            self._manager = manager
        return self._guard

    def check(
        self, headers: Iterable[tuple[bytes, bytes]], message: object, *, body: bytes | None = None
    ) -> Rejection | None:
        """:meth:`Guard.check` with the server's current settings, after the server's own body limit."""
        guard = self.guard
        if body is not None and self._limit is not None and len(body) > self._limit:
            return _TOO_LARGE
        return guard.check(headers, message, body=body)

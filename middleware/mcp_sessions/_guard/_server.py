"""The guard of the server the middleware runs inside: read from that server's own transport settings.

Placed at an MCP endpoint (see ``_inside.py``), the middleware finds the ``mcp``
SDK's transport app there (``StreamableHTTPASGIApp``, fastmcp's too), whose
session manager holds the settings the server checks requests with: its
``TransportSecuritySettings`` (``None``: no DNS-rebinding protection) and
``json_response``. fastmcp builds its session manager when its lifespan starts,
so the settings are read at the first request that needs them, and again
whenever the server replaces its session manager. The protocol versions it
serves are its SDK's own list: the middleware runs in the server's process.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from starlette.types import Scope

from .._wire.protocol import LEGACY_VERSIONS
from ._guard import Guard, TransportSecurity
from ._rejection import Rejection, _plain

__all__ = ["ServerGuard", "guard_of_manager"]

_UNREAD = object()
# The SDK's RequestBodyLimitMiddleware, in front of its transport: checked before anything else.
_TOO_LARGE = _plain(413, "Request body too large", "too_large")
# Where each SDK lists the versions it serves: mcp 2, then mcp 1.x (the handshake versions alone).
_SDK_VERSIONS = (
    ("mcp.types.version", "MODERN_PROTOCOL_VERSIONS"),
    ("mcp.shared.version", "SUPPORTED_PROTOCOL_VERSIONS"),
)


def served_modern_versions() -> tuple[str, ...]:
    """The 2026-07-28-style versions the ``mcp`` SDK in this process serves, as its public lists say.

    Empty for mcp 1.x (its list holds handshake versions only), and empty when no SDK answers: a
    session is never handed out on a path the server may not have.
    """
    for module, name in _SDK_VERSIONS:
        try:
            versions = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        return tuple(version for version in versions if version not in LEGACY_VERSIONS)
    return ()


def guard_of_manager(manager: object) -> Guard:
    """The :class:`Guard` of an SDK session manager (no manager yet: a server that protects nothing)."""
    security: TransportSecurity | None = getattr(manager, "security_settings", None)
    json_response = getattr(manager, "json_response", False) is True
    versions = served_modern_versions()
    if security is None:  # the SDK's transport then checks neither Host nor Origin
        guard = Guard(host="0.0.0.0", json_response=json_response, modern_versions=versions)
    else:
        guard = Guard(transport_security=security, json_response=json_response, modern_versions=versions)
    return guard


class ServerGuard:
    """A :class:`Guard` that follows the settings of the transport app it sits in front of."""

    __slots__ = ("_guard", "_limit", "_manager", "_transport", "modern_versions")

    def __init__(self, transport: object) -> None:
        self._transport = transport
        self.modern_versions = served_modern_versions()
        """The 2026-07-28-style versions the server serves (none: it speaks the 2025 wire only)."""
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

    async def verdict(self, scope: Scope, message: object, *, body: bytes) -> Rejection | None:
        """:meth:`Guard.verdict`: :meth:`check` on the request's headers."""
        return self.check(scope["headers"], message, body=body)

    def check(
        self, headers: Iterable[tuple[bytes, bytes]], message: object, *, body: bytes | None = None
    ) -> Rejection | None:
        """:meth:`Guard.check` with the server's current settings, after the server's own body limit."""
        guard = self.guard
        if body is not None and self._limit is not None and len(body) > self._limit:
            return _TOO_LARGE
        return guard.check(headers, message, body=body)

"""The wrapped server's own request checks, applied before any answer the middleware gives itself.

The middleware answers ``sessions/create``, ``sessions/delete`` and its own
JSON-RPC errors without calling the application. A request the ``mcp`` SDK's
Streamable HTTP transport would refuse must not get such an answer: a foreign
``Host`` (DNS rebinding), a refused ``Origin``, a missing ``Accept``, an
unsupported protocol version, a body the SDK's JSON parser refuses or a
malformed envelope is refused here with the status, headers and body bytes the
SDK sends, in the order the SDK checks them.

Pure: no I/O, and no import of the SDK (it is not a dependency). References:
``mcp`` 2.3 ``server/transport_security.py``, ``server/streamable_http.py``
(2025-era POST), ``server/_streamable_http_modern.py`` and
``shared/inbound.py`` (2026-07-28 POST), ``MCPServer.streamable_http_app``
(the DNS-rebinding defaults).

Here are the ``Host`` and ``Origin`` checks and the order of it all; the
era-specific checks are in ``_checks.py`` (the JSON parsers in ``_parsers.py``),
and :class:`Rejection` (the answer's bytes) in ``_rejection.py``, re-exported here.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Iterable, Sequence
from typing import Final, Protocol

from starlette.types import Scope

from .._wire.protocol import MCP_PROTOCOL_VERSION_HEADER, MODERN_VERSIONS, Era
from ._checks import _ROUTING_HEADERS, _accepts, check_legacy, check_modern
from ._checks import _decode_header_value as _decode_header_value
from ._rejection import Rejection, _plain

__all__ = ["LOCALHOST_HOSTS", "LOCALHOST_ORIGINS", "Guard", "Rejection", "TransportSecurity"]

# What MCPServer.streamable_http_app turns on when its ``host`` is a loopback name (its default).
LOOPBACK_NAMES: Final = frozenset({"127.0.0.1", "localhost", "::1"})
LOCALHOST_HOSTS: Final = ("127.0.0.1:*", "localhost:*", "[::1]:*")
LOCALHOST_ORIGINS: Final = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")

_INVALID_HOST: Final = _plain(421, "Invalid Host header", "invalid_host")
_INVALID_ORIGIN: Final = _plain(403, "Invalid Origin header", "invalid_origin")


class TransportSecurity(Protocol):
    """What :class:`Guard` reads of the ``mcp`` SDK's ``TransportSecuritySettings`` (or any look-alike)."""

    @property
    def enable_dns_rebinding_protection(self) -> bool: ...
    @property
    def allowed_hosts(self) -> Iterable[str]: ...
    @property
    def allowed_origins(self) -> Iterable[str]: ...


class Guard:
    """The checks the wrapped ``mcp`` SDK server applies to a POST, built once from its options.

    Pass what you pass to ``streamable_http_app``: ``transport_security``
    (the SDK's ``TransportSecuritySettings``, or any object with its three
    attributes), else ``host``, and ``json_response``. As in the SDK, a
    loopback ``host`` (the default, ``127.0.0.1``) turns DNS-rebinding
    protection on with the localhost allow-lists, and any other host turns it
    off. ``allowed_hosts`` and ``allowed_origins`` turn it on with those
    lists instead (``"example.com:*"`` allows any port). ``modern_versions``
    are the 2026-07-28-style versions the server serves; none (an ``mcp`` 1.x
    server) leaves every request off the 2025 wire to the server.
    """

    __slots__ = ("_allowed_hosts", "_allowed_origins", "_json_response", "_modern_versions", "_protect")

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        parameters = inspect.signature(cls.check).parameters.values()
        if not any(p.name == "body" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            raise TypeError(
                f"{cls.__name__}.check must take body= (the raw request body, which the middleware always "
                "passes): def check(self, headers, message, *, body=None), passing it on to super().check"
            )

    def __init__(
        self,
        *,
        transport_security: TransportSecurity | None = None,
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

    @property
    def modern_versions(self) -> tuple[str, ...]:
        """The 2026-07-28-style versions the server serves (none: it speaks the 2025 wire only)."""
        return self._modern_versions

    async def verdict(self, scope: Scope, message: object, *, body: bytes) -> Rejection | None:
        """The server's answer if it would refuse this request, else ``None``: what the middleware asks.

        :meth:`check` on the request's headers; a gateway's guard asks its upstream server instead.
        """
        return self.check(scope["headers"], message, body=body)

    def check(
        self, headers: Iterable[tuple[bytes, bytes]], message: object, *, body: bytes | None = None
    ) -> Rejection | None:
        """The server's answer if it would refuse this POST, else ``None``.

        ``headers`` are the ASGI scope's raw header pairs (lower-case names;
        repeated routing headers are refused on 2026-07-28), ``message`` the
        parsed body of a JSON POST the middleware would answer: a JSON-RPC
        call (an object with a string ``method``) or a batch. Anything else is
        refused as not a message; the SDK would take a JSON-RPC response on the
        2025 path (202), but the middleware never answers one. The era is the
        SDK's: an ``Mcp-Protocol-Version`` that is absent or a handshake
        version is the 2025 path, anything else the 2026-07-28 one.

        ``body``, the raw bytes ``message`` was parsed from, adds the SDK's JSON
        parser (-32700, before the envelope is read): on the 2025 path
        pydantic-core's, which refuses a byte-order mark, UTF-16 and UTF-32, lone
        surrogates and nesting over 201; on 2026-07-28 ``json.loads``, whose
        nesting limit depends on the stack and the Python release, so a body
        nested deeper than :data:`MAX_NESTING` (512) is refused instead, a
        limit stricter than the SDK's (see ``_parsers.py``). A subclass that overrides ``check``
        must take ``body`` too: the middleware always passes it.
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
        if raw_version is None or Era.of(raw_version) is Era.LEGACY:
            return check_legacy(first, has_json, has_sse, message, body, json_response=self._json_response)
        return check_modern(
            first,
            raw_version.decode("latin-1"),
            repeated_routing,
            has_json,
            has_sse,
            message,
            body,
            json_response=self._json_response,
            modern_versions=self._modern_versions,
        )


class _AllowList:
    """Exact values, and ``base:*`` patterns that allow ``base:`` followed by anything (the SDK's rule)."""

    __slots__ = ("_exact", "_prefixes")

    def __init__(self, values: Iterable[str]) -> None:
        values = list(values)
        self._exact = frozenset(values)
        self._prefixes = tuple(value[:-2] + ":" for value in values if value.endswith(":*"))

    def allows(self, value: str) -> bool:
        return value in self._exact or value.startswith(self._prefixes)

"""The session as application code sees it, the one accessor that finds it, and the log filter that names it."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from starlette.requests import HTTPConnection

    from .._tokens import KeySet
    from ..stores import SessionStore

SCOPE_KEY: Final = "mcp_sessions.session"
"""The ASGI ``scope`` key that holds the request's verified :class:`Session` (absent without one)."""
STATE_ATTRIBUTE: Final = "mcp_session"
OUTSIDE: Final = "-"

current_session: ContextVar[Session | None] = ContextVar("mcp_sessions.session", default=None)
header_session: ContextVar[HeaderSession | None] = ContextVar("mcp_sessions.header_session", default=None)
"""The session an ordinary route's ``Mcp-Session-Id`` header names, until the route asks whose it is."""
# A host's conversation as telemetry names it, (id verbatim, source): set only for a host's request, which may have
# no Session (conversation data off) or one keyed by a digest; the logs then name what the spans name.
current_conversation: ContextVar[tuple[str, str] | None] = ContextVar("mcp_sessions.conversation", default=None)


def inherited() -> bool:
    """Whether this request's task started with a request's session, header session or conversation already set: an
    outer middleware's, or, under asyncio, another request's (a task may start in its context: python/cpython#140947,
    uvicorn without ``--reset-contextvars``). The middleware then sets each to this request's own."""
    already = (current_session.get(), header_session.get(), current_conversation.get())
    return any(value is not None for value in already)


_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})
_NO_BUS: Final = (
    "no subscription bus is known: pass the SessionSubscriptionBus given to MCPServer(subscriptions=bus) "
    "to the middleware too, MCPSessionMiddleware(app, subscriptions=bus)"
)


class SessionBus(Protocol):
    """What the sessions and their listen streams need of :class:`mcp_sessions.subscriptions.SessionSubscriptionBus`."""

    async def publish_to_session(self, session_id: str, event: Any) -> None: ...
    async def end_session(self, session_id: str) -> None: ...
    def watch(self, session_id: str, on_end: Callable[[], None]) -> Callable[[], None] | None: ...
    async def ready(self, session_id: str | None = None) -> None: ...
    def serves(self, session_id: str) -> bool: ...


class SessionIssuer(Protocol):
    """What a session reads of the :class:`~._service.SessionService` that resolved it (which imports this module)."""

    @property
    def keys(self) -> KeySet: ...
    @property
    def store(self) -> SessionStore: ...
    @property
    def bus(self) -> SessionBus | None: ...
    @property
    def idle_ttl(self) -> float | None: ...


class SessionData:
    """Server-side data of one session, in the configured store.

    Values are JSON-serializable. ``incr`` and ``update`` are atomic, so
    concurrent requests of one session can count safely.
    """

    def __init__(self, store: SessionStore, session_id: str, kept_until: float) -> None:
        self._store = store
        self._session_id = session_id
        self._kept_until = kept_until  # when the store forgets what is written (the session's records' expiry)

    async def get(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default`` if there is none."""
        return await self._store.get(self._session_id, key, default)

    async def set(self, key: str, value: Any) -> None:
        """Store a copy of ``value`` (JSON-serializable) under ``key``, until the session ends."""
        await self._store.set(self._session_id, key, value, expires_at=self._kept_until)

    async def delete(self, key: str) -> None:
        """Remove ``key``; nothing happens if it is not there."""
        await self._store.delete(self._session_id, key)

    async def incr(self, key: str, amount: int = 1) -> int:
        """Atomically add ``amount`` to an integer value (missing counts as 0) and return the sum."""
        return await self._store.incr(self._session_id, key, amount, expires_at=self._kept_until)

    async def update(self, key: str, fn: Callable[[Any], Any], default: Any = None) -> Any:
        """Atomically replace the value with ``fn(old)`` (``fn(default)`` if missing) and return the new value."""
        return await self._store.update(self._session_id, key, fn, expires_at=self._kept_until, default=default)

    async def items(self) -> dict[str, Any]:
        """Every key of this session's data with its value."""
        return await self._store.items(self._session_id)


class Session:
    """One data-layer session, resolved and verified for the current request.

    ``id`` is the stable session id (the token's ``sid`` claim): key your data,
    logs and metrics by it. ``token`` is the wire ``sessionId``, a bearer
    credential: never log it. ``state`` is the client-held state, read-only;
    assign a new mapping to change it, and the response's echo carries it.
    """

    def __init__(
        self,
        service: SessionIssuer,
        *,
        session_id: str,
        issued_at: int,
        token_expires_at: int,
        now: float,
        token: str = "",
        claims: Mapping[str, Any] = _EMPTY,
        state_token: str | None = None,
        state_json: str | None = None,
        source: str = "data-layer",
    ) -> None:
        self.token = token
        """The wire ``sessionId`` (a JWT): a bearer credential, never log it."""
        self.id = session_id
        """The stable session id (the token's ``sid`` claim): not a secret, key data, logs and metrics by it."""
        self.issued_at = issued_at
        """When the session was created (the token's ``iat``), in Unix seconds."""
        self.token_expires_at = token_expires_at
        """The token's absolute expiry (its ``exp``), in Unix seconds; the idle timeout may end it sooner."""
        self.claims = claims
        """The token's claims other than ``iss``, ``aud``, ``sid``, ``iat`` and ``exp``."""
        self.last_seen = now
        """When the middleware verified this request, in Unix seconds: the idle timeout counts from it."""
        idle_until = token_expires_at if service.idle_ttl is None else now + service.idle_ttl
        self.expires_at_timestamp = min(token_expires_at, idle_until)
        """:attr:`expires_at` in Unix seconds."""
        self.source = source
        """Where the session came from: ``data-layer`` (a token this server minted), ``transport`` (an
        adopted 2025-era transport session) or a host's conversation (``openai``, ``vscode``, ``goose``,
        ``opencode``, ``meta:KEY``, ``header:NAME``). Only a data-layer session has a token and state."""
        self._service = service
        self._data: SessionData | None = None
        self.state_token = state_token
        """The signed state that goes out in the echo (``None`` when there is none); set by :attr:`state`."""
        self._state_json = state_json
        self._state_view: Mapping[str, Any] | None = None

    def __repr__(self) -> str:
        return f"<Session id={self.id!r} expires_at={self.expires_at.isoformat()}>"

    @property
    def data(self) -> SessionData:
        """The session's server-side data, in the configured store."""
        if self._data is None:
            # Kept while the token is accepted (exp + leeway), as the session's other records are.
            kept_until = self.token_expires_at + self._service.keys.leeway
            self._data = SessionData(self._service.store, self.id, kept_until)
        return self._data

    @property
    def expires_at(self) -> datetime:
        """When the session ends if unused: the token's expiry, or sooner by the idle timeout."""
        return datetime.fromtimestamp(self.expires_at_timestamp, UTC)

    @property
    def state(self) -> Mapping[str, Any]:
        """The client-held state, as the client sent it (read-only)."""
        if self._state_view is None:
            self._state_view = _EMPTY if self._state_json is None else MappingProxyType(json.loads(self._state_json))
        return self._state_view

    @state.setter
    def state(self, value: Mapping[str, Any]) -> None:
        if not isinstance(value, Mapping):
            raise TypeError("session state must be a mapping (a JSON object)")
        if not self.token:
            raise TypeError(f"a {self.source} session has no client-held state: it needs a data-layer session")
        plain = dict(value)
        # Signed now, so an oversized or unserializable state fails in the code that set it.
        self.state_token = self._service.keys.sign_state(self.id, plain)
        self._state_json = None
        self._state_view = MappingProxyType(plain)

    async def notify_resource_updated(self, uri: str) -> None:
        """Tell this session's listen streams, on every replica, that the resource at ``uri`` changed.

        Only streams opened within this session (a ``subscriptions/listen`` request that named it) that
        subscribed to ``uri`` get it; a global stream or another session's never does. Fire and forget:
        a bus that cannot publish (Redis down) logs and drops the event. ``RuntimeError`` when the
        middleware was given no ``subscriptions=`` bus.
        """
        bus = self._service.bus
        if bus is None:
            raise RuntimeError(_NO_BUS)
        from mcp.shared.subscriptions import ResourceUpdated  # the bus needs the mcp SDK; the session does not

        await bus.publish_to_session(self.id, ResourceUpdated(uri=uri))


class HeaderSession:
    """A verified session named by an ordinary route's ``Mcp-Session-Id`` header, not yet the caller's.

    The middleware may run before the app's authentication (the outer middleware of a Starlette
    list, or around an ``MCPServer`` app whose auth is inside it), so whose session it is, is
    asked when the route reads it, from the scope the route sees.
    """

    def __init__(self, session: Session, scope: Mapping[str, Any], owns: Callable[[Session, Any], bool]) -> None:
        self.session, self._scope, self._owns = session, scope, owns

    def claim(self, scope: Mapping[str, Any] | None) -> Session | None:
        """The session, if it belongs to the caller ``scope`` (else the request's) names."""
        return self.session if self._owns(self.session, self._scope if scope is None else scope) else None


def get_session(connection: HTTPConnection | None = None) -> Session | None:
    """The session of the current request, or ``None`` if it has none.

    Without an argument it reads the context variable that the middleware sets
    for the request (works in ``MCPServer``, fastmcp and mcp 1.x ``FastMCP`` tools); given a
    Starlette ``Request`` it reads the request's scope. In an ordinary route it
    is the session the ``Mcp-Session-Id`` header names, if the caller the app's
    own authentication signed in (or no one, for an unbound session) owns it.
    """
    session: Session | None = current_session.get() if connection is None else connection.scope.get(SCOPE_KEY)
    if session is None and connection is None:
        session = _session_of_sdk_request()
    if session is None and (named := header_session.get()) is not None:
        return named.claim(None if connection is None else connection.scope)
    return session


def _session_of_sdk_request() -> Session | None:
    """The session in the scope of the request an ``mcp`` 1.x server is handling, read from its public
    ``request_ctx``: a stateful 1.x server runs its tools in the transport session's own task, which never
    sees the context variables of the request that carried the call."""
    sdk = sys.modules.get("mcp.server.lowlevel.server")  # loaded where an SDK server runs; never imported here
    # mcp 2 has none: its tools run in the request's context (the module's dict read, not a failing getattr).
    request_ctx = None if sdk is None else vars(sdk).get("request_ctx")
    if request_ctx is None:
        return None
    scope = getattr(getattr(request_ctx.get(None), "request", None), "scope", None)
    return scope.get(SCOPE_KEY) if isinstance(scope, dict) else None


class SessionLogFilter(logging.Filter):
    """Adds ``record.session_id`` and ``record.session_source`` to every record it sees.

    While the middleware handles a request that belongs to a conversation, they
    are what the request's spans carry in ``session.id`` and
    ``mcp_sessions.session.source``: the session's stable id (never its token)
    and ``data-layer``; an adopted transport session's digest and
    ``transport``; a host's conversation id and the host's source name
    (``openai``, ``vscode``, …), with or without conversation data. Anywhere
    else, both are ``default`` (``"-"``). It reads the context variables the
    middleware sets, so it names the request whose code logged: the tool's, the
    SDK's or the middleware's. It never drops a record.

    Attach it to the handlers (``"filters": ["session"]`` in a
    :func:`logging.config.dictConfig`) so that every logger's records get it,
    and format with ``%(session_id)s`` and ``%(session_source)s``.
    """

    def __init__(self, name: str = "", *, default: str = OUTSIDE) -> None:
        super().__init__(name)
        self.default = default

    def filter(self, record: logging.LogRecord) -> bool:
        """Set the two attributes on ``record``; always keep it."""
        named = current_conversation.get()
        if named is None:
            session = current_session.get()
            named = (self.default, self.default) if session is None else (session.id, session.source)
        record.session_id, record.session_source = named
        return True

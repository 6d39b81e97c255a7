"""SessionSubscriptionBus: the mcp SDK's ``SubscriptionBus`` across replicas, with listen streams scoped to a session.

The SDK's ``ListenHandler`` calls :meth:`~SessionSubscriptionBus.subscribe` in the
``subscriptions/listen`` request's own task, before the acknowledgement, so the
session the middleware verified for that request is the current one there: the
stream is then that session's. An event is published on a channel (by a backend:
in process, or Redis pub/sub), and each replica delivers what arrives to its own
streams:

- the global channel carries what the SDK's API publishes (``ctx.notify_*``): a
  ``ServerEvent`` names no session, so it reaches every stream, as on one replica;
- a session's channel carries what ``session.notify_resource_updated`` publishes,
  and the order to end the session's streams (it was deleted). A replica is
  subscribed to it only while a stream of that session is open there.

A message (:func:`encode`) is a few bytes of JSON naming the event's kind and, for a resource, its
URI; never a session token (a session's channel names it by its stable id). What cannot be read is
dropped, as a listen stream drops what it cannot deliver: events are level triggers.

Where the messages travel is a :class:`Backend` (``_backend``): :class:`MemoryBackend` (this process), or
the Redis ones (one Redis or a Sentinel-named master, and a Redis Cluster's sharded pub/sub) in ``_redis``,
which :func:`backend_from_url` imports when a URL names them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)

from .._session import current_session
from .._wire import ThrottledWarning, jsonrpc
from .._wire.protocol import INTERNAL_ERROR
from ..stores import REDIS_SCHEMES
from ._backend import Backend, MemoryBackend

if TYPE_CHECKING:
    from typing import Self

MAX_MESSAGE_BYTES: Final = 16 * 1024
"""The largest message published or read: a resource URI longer than about 16 KB is refused."""
END: Final = b'{"end":"session"}'
"""The order, on a session's channel, to end that session's listen streams (it was deleted)."""
_KINDS: Final[dict[str, ServerEvent]] = {
    "tools": ToolsListChanged(),
    "prompts": PromptsListChanged(),
    "resources": ResourcesListChanged(),
}
_NAMES: Final = {type(event): name for name, event in _KINDS.items()}
_REDIS_SCHEMES: Final = ", ".join(f"{scheme}://" for scheme in REDIS_SCHEMES)
_NOT_ACROSS_PROCESSES: Final = (
    "a sqlite:// store cannot carry listen events between processes: use memory:// for one process, or "
    f"{_REDIS_SCHEMES} (the Redis the store may share) for several replicas"
)


def encode(event: ServerEvent) -> bytes:
    """``event`` as a message; ``ValueError`` for a resource URI too long to send."""
    if isinstance(event, ResourceUpdated):
        if not isinstance(event.uri, str):
            raise TypeError("a ResourceUpdated event's uri is a string")
        data = json.dumps({"resource": event.uri}, separators=(",", ":")).encode()
        if len(data) > MAX_MESSAGE_BYTES:
            raise ValueError(f"the resource URI is too long to publish (the message is at most {MAX_MESSAGE_BYTES} B)")
        return data
    name = _NAMES.get(type(event))
    if name is None:
        raise TypeError(f"not a ServerEvent: {type(event).__name__}")
    return b'{"event":"' + name.encode() + b'"}'


def decode(data: bytes | str) -> ServerEvent | bytes | None:
    """The event a message carries, :data:`END`, or ``None`` for a message this version cannot read."""
    if len(data) > MAX_MESSAGE_BYTES:
        return None
    raw = data.encode() if isinstance(data, str) else data
    if raw == END:
        return END
    message = jsonrpc.loads(raw, answer=True, strict=True)
    if not isinstance(message, dict) or len(message) != 1:
        return None
    if isinstance(uri := message.get("resource"), str):
        return ResourceUpdated(uri=uri)
    name = message.get("event")
    return _KINDS.get(name) if isinstance(name, str) else None


logger = logging.getLogger("mcp_sessions")

Listener = Callable[[ServerEvent], None]
DEFAULT_MAX_STREAMS_PER_SESSION: Final = 8
DEFAULT_MAX_SESSIONS: Final = 10_000
_MAX_SESSION_ID: Final = 256
_NOT_GIVEN: Final = (
    "a listen stream in a session was refused: the server's SessionSubscriptionBus is not the middleware's, "
    "which could then neither publish to the session's streams nor end them with it; pass the same object to "
    "both, MCPServer(subscriptions=bus) and MCPSessionMiddleware(app, subscriptions=bus)"
)
_not_given = ThrottledWarning(logger)


class _Session:
    """What this replica has open for one session: its SDK listeners and the middleware's watchers."""

    def __init__(self, session_id: str) -> None:
        self.id = session_id
        self.listeners: dict[object, Listener] = {}
        self.watchers: dict[object, Callable[[], None]] = {}


class SessionSubscriptionBus:
    """The SDK's ``SubscriptionBus``, across replicas, with listen streams scoped to a session.

    Pass it to the server and to the middleware: ``MCPServer(subscriptions=bus)``
    and ``MCPSessionMiddleware(app, subscriptions=bus)``. Build it with
    :meth:`from_url`. ``max_streams_per_session`` bounds one session's open listen
    streams on a replica, ``max_sessions`` the sessions with a stream open on a
    replica (each is one channel subscription); a listen request past either is
    answered JSON-RPC ``-32603`` before its stream opens. Each stream's buffer is
    the SDK's (``ListenHandler``'s ``max_buffered_events``).
    """

    def __init__(
        self,
        backend: Backend | None = None,
        *,
        prefix: str = "mcp-sessions:",
        max_streams_per_session: int = DEFAULT_MAX_STREAMS_PER_SESSION,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        if not isinstance(prefix, str) or "{" in prefix or "}" in prefix:
            raise ValueError("prefix must be a string without braces (a session's channel tags its id)")
        for name, value in (("max_streams_per_session", max_streams_per_session), ("max_sessions", max_sessions)):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a whole number, 1 or more")
        self._backend: Backend = MemoryBackend() if backend is None else backend
        self._backend.bind(self._receive)
        self._everywhere = prefix + "events"
        self._session_prefix = prefix + "session:{"
        self.max_streams_per_session, self.max_sessions = max_streams_per_session, max_sessions
        self._global: dict[object, Listener] = {}
        self._sessions: dict[str, _Session] = {}  # by channel
        self._joined = False

    @classmethod
    def from_url(cls, url: str, **options: object) -> Self:
        """The bus a store URL names: ``memory://`` (this process), ``redis://``, ``rediss://``, ``unix://``
        (Redis pub/sub, across replicas), ``redis+sentinel://`` and ``rediss+sentinel://`` (the same, on
        the master the Sentinels name, followed after a failover), ``redis+cluster://`` and
        ``rediss+cluster://`` (sharded pub/sub: a session's events go only to the node that owns its
        slot). ``options``: this class's keywords, the Redis client's ``timeout``, ``connect_timeout``
        and ``max_connections``, and ``health_check_interval`` (10 s: a subscription connection that
        brought nothing for that long is sent a ``PING``, and dropped and opened again when nothing comes
        back within as long again). A bad URL raises ``ValueError``; the message never repeats a password."""
        limits = {
            name: options.pop(name) for name in ("prefix", "max_streams_per_session", "max_sessions") if name in options
        }
        return cls(backend_from_url(url, **options), **limits)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"SessionSubscriptionBus({type(self._backend).__name__}, sessions={len(self._sessions)})"

    async def publish(self, event: ServerEvent) -> None:
        """Deliver ``event`` to every listen stream on every replica (the SDK's ``ctx.notify_*``)."""
        await self._send(self._everywhere, encode(event))

    async def publish_to_session(self, session_id: str, event: ServerEvent) -> None:
        """Deliver ``event`` only to the listen streams opened within session ``session_id``, on any replica."""
        await self._send(self._channel(session_id), encode(event))

    async def end_session(self, session_id: str) -> None:
        """End the listen streams of session ``session_id`` on every replica (the middleware calls it on delete)."""
        await self._send(self._channel(session_id), END)

    async def _send(self, channel: str, message: bytes) -> None:
        # Fire and forget, as the SDK's delivery is: a failed publish is logged and dropped, never the tool's error.
        try:
            await self._backend.publish(channel, message)
        except Exception as exc:
            logger.warning("a listen event could not be published (%s): dropped", type(exc).__name__)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Register ``listener``: the current request's session's stream if it has one, else a global one.

        A session's stream is refused (-32603) when the middleware that verified the session was not given
        this bus: its events and its end would never reach the stream.
        """
        session = current_session.get()
        if session is not None and session._service.bus is not self:
            _not_given.warn(_NOT_GIVEN)
            raise MCPError(INTERNAL_ERROR, "Listen streams in a session are not served here: see the server's log")
        self._join_everywhere()
        token = object()
        if session is None:
            self._global[token] = listener
            return lambda: self._global.pop(token, None) and None
        entry = self._open(session.id)
        if entry is None:
            raise MCPError(
                INTERNAL_ERROR,
                f"Too many sessions are listening on this server (at most {self.max_sessions}): retry later",
            )
        if len(entry.listeners) >= self.max_streams_per_session:
            self._close(entry)
            raise MCPError(
                INTERNAL_ERROR,
                f"Too many listen streams in this session (at most {self.max_streams_per_session} per server): "
                "end one before opening another",
            )
        entry.listeners[token] = listener
        return lambda: self._drop(entry, entry.listeners, token)

    def watch(self, session_id: str, on_end: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``on_end()`` when session ``session_id`` is ended on any replica; the callable stops watching.

        ``None`` when this replica has as many sessions listening as it may (the listen is then refused)."""
        self._join_everywhere()
        entry = self._open(session_id)
        if entry is None:
            return None
        token = object()
        entry.watchers[token] = on_end
        return lambda: self._drop(entry, entry.watchers, token)

    def serves(self, session_id: str) -> bool:
        """Whether a listen stream of session ``session_id`` is subscribed here, on this replica."""
        entry = self._sessions.get(self._channel(session_id))
        return entry is not None and bool(entry.listeners)

    async def ready(self, session_id: str | None = None) -> None:
        """Wait until events for this replica's streams (of ``session_id``, if given) can arrive."""
        await self._backend.ready(self._everywhere)
        if session_id is not None:
            await self._backend.ready(self._channel(session_id))

    async def aclose(self) -> None:
        """Close the backend (its connection); the streams still open receive nothing more."""
        await self._backend.aclose()

    def _join_everywhere(self) -> None:
        if not self._joined:
            self._backend.join(self._everywhere)
            self._joined = True

    def _open(self, session_id: str) -> _Session | None:
        """The session's entry, its channel joined when it is new; ``None`` when ``max_sessions`` are open here."""
        channel = self._channel(session_id)
        entry = self._sessions.get(channel)
        if entry is None and len(self._sessions) < self.max_sessions:
            entry = self._sessions[channel] = _Session(session_id)
            self._backend.join(channel)
        return entry

    def _drop(
        self, entry: _Session, registry: dict[object, Listener] | dict[object, Callable[[], None]], token: object
    ) -> None:
        registry.pop(token, None)
        self._close(entry)

    def _close(self, entry: _Session) -> None:
        """Leave the session's channel once nothing of it is open here (idempotent)."""
        if entry.listeners or entry.watchers:
            return
        channel = self._channel(entry.id)
        if self._sessions.get(channel) is entry:
            del self._sessions[channel]
            self._backend.leave(channel)

    def _channel(self, session_id: str) -> str:
        if not isinstance(session_id, str) or not 0 < len(session_id) <= _MAX_SESSION_ID or "}" in session_id:
            raise ValueError("a session id is a non-empty string of at most 256 characters, without braces")
        return self._session_prefix + session_id + "}"

    def _receive(self, channel: str, message: bytes | str) -> None:
        """One message from the backend, delivered to this replica's streams it is for."""
        item = decode(message)
        if item is None:
            logger.debug("a listen bus message this version cannot read was dropped")
            return
        if channel == self._everywhere:
            if not isinstance(item, bytes):
                _deliver(self._global.values(), item)
                for listening in list(self._sessions.values()):
                    _deliver(listening.listeners.values(), item)
            return
        entry = self._sessions.get(channel)
        if entry is None:
            return
        if isinstance(item, bytes):  # END: the session was deleted
            for on_end in list(entry.watchers.values()):
                try:
                    on_end()
                except Exception:
                    logger.exception("ending a listen stream raised; continuing")
        else:
            _deliver(entry.listeners.values(), item)


def _deliver(listeners: Iterable[Listener], event: ServerEvent) -> None:
    for listener in list(listeners):
        try:
            listener(event)
        except Exception:  # one listener raising must not starve the others (as in the SDK's in-memory bus)
            logger.exception("a subscription listener raised; continuing")


def backend_from_url(url: str, **options: object) -> Backend:
    """The backend ``url`` names; ``ValueError`` for a URL of no known scheme (the URL is never repeated)."""
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"a bus URL looks like scheme://…: memory://, {_REDIS_SCHEMES}")
    scheme = url.split("://", 1)[0].lower()
    if scheme == "memory":
        parts = urlsplit(url)
        if parts.netloc or parts.path not in ("", "/") or parts.query or parts.fragment or options:
            raise ValueError("the memory:// bus takes no host, path, query or option: memory://")
        return MemoryBackend()
    if scheme == "sqlite":
        raise ValueError(_NOT_ACROSS_PROCESSES)
    if scheme not in REDIS_SCHEMES:
        shown = scheme if scheme.isascii() and scheme.replace("+", "").isalnum() and len(scheme) <= 20 else "?"
        raise ValueError(f"unknown bus URL scheme {shown!r}: use memory://, {_REDIS_SCHEMES}")
    from ._redis import redis_backend

    return redis_backend(url, **options)

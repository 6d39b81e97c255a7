"""A ``subscriptions/listen`` response of a session, ended when the session ends (``docs/deployment.md``).

The SDK's ``ListenHandler`` cannot end one stream (its ``close()`` ends them all), so the middleware sends the
listen request's own result as the last frame (the spec's graceful closure), ends the response, and tells the
transport the client has gone (``http.disconnect``), which cancels the handler and its subscription.

The stream ends when the bus orders it (the session deleted on any replica), at the token's absolute expiry,
or when a touch every ``idle_ttl / 2`` seconds (60 without ``idle_ttl``) finds the session ended. The touches
do not depend on the watch, which a replica at the bus's ``max_sessions`` refuses (the SDK then refuses the
listen, unless another session's stream ended in between). A stream without a session only waits, at its
start, until its events can arrive.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Final

import anyio
from starlette.types import Message, Receive, Send

from .._wire import ThrottledWarning

if TYPE_CHECKING:
    from .._session import Session, SessionBus, SessionService

LISTEN: Final = "subscriptions/listen"
SUBSCRIPTION_ID_META_KEY: Final = "io.modelcontextprotocol/subscriptionId"
RECHECK_WITHOUT_IDLE_TTL: Final = 60.0
_DISCONNECT: Final[Message] = {"type": "http.disconnect"}
_SSE_HEADERS: Final = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform")]
# What the SDK's first frame says once it has subscribed the stream to its bus.
_ACKNOWLEDGED: Final = b'"notifications/subscriptions/acknowledged"'
_OTHER_BUS: Final = (
    "a listen stream in a session was subscribed to a bus other than the middleware's SessionSubscriptionBus: "
    "it gets none of its session's events; build the server with the same bus, MCPServer(subscriptions=bus)"
)
_other_bus = ThrottledWarning(logging.getLogger("mcp_sessions"))


class ListenStream:
    """The ``receive`` and ``send`` of one listen request: see the module's docstring."""

    __slots__ = (
        "_body_read",
        "_bus",
        "_bus_checked",
        "_done",
        "_ended",
        "_lock",
        "_ready",
        "_receive",
        "_request_id",
        "_send",
        "_session",
        "_sessions",
        "_started",
        "_unwatch",
    )

    def __init__(
        self,
        bus: SessionBus,
        sessions: SessionService,
        session: Session | None,
        request_id: object,
        receive: Receive,
        send: Send,
    ) -> None:
        self._bus, self._sessions, self._session, self._request_id = bus, sessions, session, request_id
        self._receive, self._send = receive, send
        self._ended = anyio.Event()
        # Before the SDK's subscribe(), so that the session's channel is joined by the acknowledgement; None
        # at the bus's limit of sessions listening here (see the module's docstring).
        self._unwatch = None if session is None else bus.watch(session.id, self._ended.set)
        self._lock = anyio.Lock()
        self._ready = self._body_read = self._started = self._done = self._bus_checked = False

    def close(self) -> None:
        """The request is over: stop watching the session."""
        if (unwatch := self._unwatch) is not None:
            self._unwatch = None
            unwatch()

    async def send(self, message: Message) -> None:
        if not self._ready and message["type"] == "http.response.start":
            self._ready = True  # the acknowledgement follows: events published from now on must arrive
            await self._bus.ready(None if self._session is None else self._session.id)
        async with self._lock:
            if self._done:  # ended here: the app's last frames go nowhere
                return
            if message["type"] == "http.response.start":
                self._started = True
            elif message["type"] == "http.response.body":
                if not self._bus_checked:  # the first frame: the SDK acknowledges once it has subscribed
                    self._bus_checked = True
                    session = self._session
                    if (
                        session is not None
                        and _ACKNOWLEDGED in message.get("body", b"")
                        and not self._bus.serves(session.id)
                    ):
                        _other_bus.warn(_OTHER_BUS)
                self._done = not message.get("more_body", False)
            await self._send(message)

    async def receive(self) -> Message:
        if self._done:
            return _DISCONNECT
        if not self._body_read or self._session is None:
            self._body_read = True  # the body, replayed at once; then what the transport waits on
            return await self._receive()
        message: Message | None = None
        async with anyio.create_task_group() as group:

            async def client() -> None:
                nonlocal message
                message = await self._receive()
                group.cancel_scope.cancel()

            group.start_soon(client)
            await self._until_session_ends()
            group.cancel_scope.cancel()
        if message is not None:
            return message
        await self._end()
        return _DISCONNECT

    async def _until_session_ends(self) -> None:
        session = self._session
        assert session is not None
        idle_ttl = self._sessions.idle_ttl
        every = RECHECK_WITHOUT_IDLE_TTL if idle_ttl is None else idle_ttl / 2
        while True:
            now = time.time()
            with anyio.move_on_after(min(session.token_expires_at, now + every) - now):
                await self._ended.wait()
                return  # deleted, on this replica or another
            if time.time() >= session.token_expires_at or not await self._sessions.still_active(session):
                return

    async def _end(self) -> None:
        """The last frame, the listen request's result, then the end of the response."""
        async with self._lock:
            if self._done:
                return
            self._done = True
            if not self._started:
                await self._send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            await self._send({"type": "http.response.body", "body": final_frame(self._request_id), "more_body": False})


def final_frame(request_id: object) -> bytes:
    """The listen request's ``SubscriptionsListenResult`` as one SSE event: the graceful end of the stream."""
    result = {"_meta": {SUBSCRIPTION_ID_META_KEY: request_id}, "resultType": "complete"}
    data = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}, separators=(",", ":"))
    return f"event: message\r\ndata: {data}\r\n\r\n".encode()

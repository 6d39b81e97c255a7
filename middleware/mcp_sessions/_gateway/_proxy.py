"""The streaming reverse proxy: every request to the upstream replica that holds its conversation, bytes as they come.

One pooled httpx client for the app's lifetime. The request body goes as it arrives (a body the
session pipeline read whole goes in one piece, and may be sent again to another replica when the
first could not be connected to); the response goes back chunk by chunk, each ``send`` awaited
before the next read (the backpressure). The connect and the wait for the response's first byte
are bounded; an event stream is not, and gets an SSE comment when it has been idle, and a client
that disconnects from one closes the upstream's (``_relay``). An upstream that cannot answer gets
a JSON-RPC error with 502, 503 or 504 and ``Retry-After``, never a hang.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, NamedTuple

import anyio
from opentelemetry import propagate, trace
from starlette.types import Message, Receive, Scope, Send

from .._guard import Rejection
from .._session import SCOPE_KEY, Session, current_conversation
from .._wire.protocol import MCP_PROTOCOL_VERSION_HEADER, MCP_SESSION_ID_HEADER, Era
from ..sources import is_transport_session_id
from ._answers import lost_session, request_id_of, upstream_failed
from ._headers import HostCheck, client_headers, upstream_headers
from ._relay import relay, relay_events

if TYPE_CHECKING:
    import httpx

    from ._replicas import Replica, Replicas

__all__ = ["UpstreamAnswer", "UpstreamProxy"]

logger = logging.getLogger("mcp_sessions.gateway")

_NO_TRACE: Final[dict[str, str]] = {}
Body = bytes | AsyncIterator[bytes]


class UpstreamAnswer(NamedTuple):
    """The upstream's answer to a request the gateway asks itself: its status, headers for the client, its body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    chunks: AsyncIterator[bytes]


class UpstreamProxy:
    """The ASGI app the gateway's session pipeline forwards to: a streaming proxy to the upstream replicas."""

    __slots__ = (
        "_client",
        "_connect_errors",
        "_first_byte",
        "_host_check",
        "_httpx",
        "_keepalive",
        "_replicas",
        "_retry_after",
    )

    def __init__(
        self,
        replicas: Replicas,
        *,
        host_check: HostCheck,
        keepalive: float | None,
        connect_timeout: float,
        first_byte_timeout: float,
        retry_after: int,
    ) -> None:
        try:
            import httpx
        except ModuleNotFoundError as exc:
            if exc.name != "httpx":
                raise
            raise ImportError("the gateway needs httpx: pip install 'mcp-sessions[gateway]'") from exc
        self._httpx = httpx
        self._replicas = replicas
        self._host_check = host_check
        self._keepalive = keepalive
        self._first_byte = first_byte_timeout
        self._retry_after = str(retry_after).encode()
        # trust_env off: no proxy variable, no .netrc credential ever reaches an upstream request.
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256, keepalive_expiry=4.0),
            trust_env=False,
            follow_redirects=False,
        )
        self._connect_errors = (httpx.ConnectError, httpx.ConnectTimeout)

    async def aclose(self) -> None:
        """Close the pooled connections (the lifespan's shutdown does)."""
        await self._client.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        if scope["type"] != "http":  # MCP has no WebSocket transport: refused before it is accepted
            return await send({"type": "websocket.close", "code": 1008})
        first = await receive()
        if first["type"] != "http.request":
            return None  # the client is gone
        content: Body = first.get("body", b"")
        if first.get("more_body", False):
            content = _streamed(first, receive)
        async with self.opened(scope, scope["headers"], content) as opened:
            if isinstance(opened, Rejection):
                return await opened.send(send)
            response, replica = opened
            start = {"type": "http.response.start", "status": response.status_code}
            await send({**start, "headers": client_headers(response.headers.raw, replica.prefix)})
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                return await relay_events(response.aiter_raw(), receive, send, self._keepalive, self._httpx.HTTPError)
            await relay(response.aiter_raw(), send)

    @asynccontextmanager
    async def asking(
        self, scope: Scope, headers: Iterable[tuple[bytes, bytes]], body: bytes
    ) -> AsyncIterator[UpstreamAnswer | Rejection]:
        """The upstream's answer to a request the gateway sends itself (its question for the session pipeline)."""
        async with self.opened(scope, headers, body) as opened:
            if isinstance(opened, Rejection):
                yield opened
            else:
                response, replica = opened
                yield UpstreamAnswer(
                    response.status_code, client_headers(response.headers.raw, replica.prefix), response.aiter_raw()
                )

    @asynccontextmanager
    async def opened(
        self, scope: Scope, headers: Iterable[tuple[bytes, bytes]], content: Body
    ) -> AsyncIterator[tuple[httpx.Response, Replica] | Rejection]:
        """The upstream's response, its headers read, from the first replica that takes the request; or the
        gateway's answer when none can (the host refused, the transport session lost, the upstream down).

        A body read whole is sent again to the next replica when one cannot be connected to (nothing was
        sent); a streamed one is not.
        """
        headers = list(headers)
        if (refused := self._host_check.check(headers)) is not None:
            yield refused
            return
        conversation = _conversation(scope)
        candidates, transport_id = self._route(headers, conversation)
        if not candidates:
            yield lost_session()
            return
        client = scope.get("client")
        upstream = upstream_headers(
            headers,
            client=None if client is None else str(client[0]),
            scheme=scope.get("scheme", "http"),
            transport_id=transport_id,
            conversation=conversation,
            trace=_trace_headers(),
        )
        if isinstance(content, AsyncIterator) and (length := _header(headers, b"content-length")) is not None:
            upstream.append((b"content-length", length))
        target = scope.get("raw_path") or scope["path"].encode()
        if query := scope.get("query_string"):
            target += b"?" + query
        opened = await self._send(scope["method"], target, upstream, content, candidates, transport_id is not None)
        if isinstance(opened, Rejection):
            yield opened
            return
        response, replica = opened
        try:
            yield opened
        finally:
            replica.in_flight -= 1
            with anyio.CancelScope(shield=True):  # closing the upstream stream, even when a disconnect cancels
                await response.aclose()

    async def _send(
        self,
        method: str,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        content: Body,
        candidates: list[Replica],
        pinned: bool,
    ) -> tuple[httpx.Response, Replica] | Rejection:
        """Send to each candidate in turn until one answers; the gateway's own answer when none does."""
        httpx = self._httpx
        status, reason = 503, "No upstream replica could be reached"
        for replica in candidates:
            request = self._client.build_request(
                method, replica.origin + target.decode("latin-1"), headers=headers, content=content
            )
            replica.in_flight += 1
            try:
                async with asyncio.timeout(self._first_byte):
                    response = await self._client.send(request, stream=True)
            except self._connect_errors:
                replica.in_flight -= 1
                self._replicas.failed(replica)
                if isinstance(content, bytes):
                    continue  # nothing was sent: the next replica gets the request
                status, reason = 502, "The upstream replica could not be reached"
            except TimeoutError:
                replica.in_flight -= 1
                status, reason = 504, "The upstream did not answer in time"
            except httpx.HTTPError as exc:
                replica.in_flight -= 1
                logger.warning("mcp-sessions gateway: upstream %s failed: %s", replica.url, type(exc).__name__)
                status, reason = 502, "The upstream failed before answering"
            else:
                self._replicas.reached(replica)
                return response, replica
            break
        if pinned and status == 503:
            return lost_session()  # a 2025-era transport session lives in its replica's memory alone
        return upstream_failed(status, reason, self._retry_after, request_id_of(content))

    def _route(
        self, headers: list[tuple[bytes, bytes]], conversation: str | None
    ) -> tuple[list[Replica], bytes | None]:
        """The replicas to try, best first, and the upstream's own id of a 2025-era transport session.

        A transport session goes to the replica that issued it, and only there: no replica for an id the
        gateway did not give out.
        """
        session_id = _header(headers, MCP_SESSION_ID_HEADER)
        if session_id is not None and is_transport_session_id(session_id):  # not a session token (a JWT)
            found = self._replicas.issuer(session_id)
            if found is not None:
                return [found[0]], found[1]
            # One the gateway did not give out: lost on a 2025-era request; on 2026-07-28 the header only
            # mirrors the data-layer session, which the pipeline has judged.
            if Era.of(_header(headers, MCP_PROTOCOL_VERSION_HEADER)) is Era.HANDSHAKE:
                return [], None
        if conversation is None:
            return self._replicas.least_loaded(), None
        return self._replicas.for_conversation(conversation), None

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                return await send({"type": "lifespan.shutdown.complete"})


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    return next((value for key, value in headers if key == name), None)


def _conversation(scope: Scope) -> str | None:
    """The conversation's stable id, as telemetry names it: a host's conversation id, else the session's id."""
    conversation = current_conversation.get()
    if conversation is not None:
        return conversation[0]
    session: Session | None = scope.get(SCOPE_KEY)
    return None if session is None else session.id


def _trace_headers() -> dict[str, str]:
    """The trace context of the gateway's span for the upstream, when one records; else the client's goes as it came."""
    if not trace.get_current_span().get_span_context().is_valid:
        return _NO_TRACE
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    carrier.pop("baggage", None)  # the client's baggage goes on, with the conversation's id in it
    return carrier


async def _streamed(first: Message, receive: Receive) -> AsyncIterator[bytes]:
    """A body that is still arriving, piece by piece."""
    message = first
    while message["type"] == "http.request":
        if body := message.get("body", b""):
            yield body
        if not message.get("more_body", False):
            return
        message = await receive()

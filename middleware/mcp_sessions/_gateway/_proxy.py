"""The streaming reverse proxy: every request to the upstream replica that holds its conversation, bytes as they come.

One pooled httpx client for the app's lifetime. The request body goes as it arrives (a body the session
pipeline read whole goes in one piece, and may be sent again to another replica when the first could not be
connected to); the response goes back chunk by chunk, each ``send`` awaited before the next read (the
backpressure). The connect and the wait for the response's first byte are bounded; an event stream is not
(``_relay`` keeps it alive). Whatever the answer, a client that disconnects once its body is sent ends it: the
upstream request is cancelled and its connection closed (``_relay.while_connected``). An upstream that cannot
answer gets a JSON-RPC error with 502, 503 or 504 and ``Retry-After``, never a hang.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from functools import partial
from typing import TYPE_CHECKING, Final

import anyio
from opentelemetry import propagate, trace
from starlette.types import Message, Receive, Scope, Send

from .._asgi import header
from .._session import SCOPE_KEY, Session, current_conversation
from .._verdict import Rejection, unavailable
from .._wire import jsonrpc
from .._wire.protocol import MCP_PROTOCOL_VERSION_HEADER, MCP_SESSION_ID_HEADER, Era
from ._front import PEER, Peer, raw_path_of
from ._headers import HostCheck, client_headers, upstream_headers
from ._relay import relay, relay_events, while_connected

if TYPE_CHECKING:
    import httpx

    from ._replicas import Replica, Replicas

logger = logging.getLogger("mcp_sessions.gateway")

_MAX_ID_BODY: Final = 64 * 1024
_JSON: Final = (b"content-type", b"application/json")
_LOST_SESSION_BODY: Final = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found"}}'
# The ``mcp`` SDK's answer for a transport session it does not hold (404): the client opens a new one.
_LOST_SESSION: Final = Rejection(
    404,
    (_JSON, (b"content-length", str(len(_LOST_SESSION_BODY)).encode())),
    _LOST_SESSION_BODY,
    "transport_session_lost",
    -32600,
    "Session not found",
)
Body = bytes | AsyncIterator[bytes]


class UpstreamProxy:
    """The ASGI app the gateway's session pipeline forwards to: a streaming proxy to the upstream replicas."""

    __slots__ = (
        "_client",
        "_first_byte",
        "_host_check",
        "_httpx",
        "_keepalive",
        "_origins",
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
        # Each replica's scheme, host and port, parsed once: a request's URL is one of them and its own path.
        self._origins = {replica.origin: httpx.URL(replica.origin) for replica in replicas.all}
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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
            await self._client.aclose()  # the pooled connections
            return await send({"type": "lifespan.shutdown.complete"})
        if scope["type"] != "http":  # MCP has no WebSocket transport: refused before it is accepted
            return await send({"type": "websocket.close", "code": 1008})
        first = await receive()
        if first["type"] != "http.request":
            return None  # the client is gone
        if first.get("more_body", False):  # a body still arriving: the client is watched once the upstream has it
            return await self._forward(scope, _streamed(first, receive), send, receive)
        await while_connected(receive, self._forward(scope, first.get("body", b""), send))

    async def _forward(self, scope: Scope, content: Body, send: Send, receive: Receive | None = None) -> None:
        """The request to the upstream, and its answer relayed; with ``receive``, the relay alone ends with the
        client (else the caller's :func:`while_connected` watches the whole exchange)."""
        opened = await self._open(scope, content)
        if isinstance(opened, Rejection):  # the host refused, the transport session lost, the upstream down
            return await opened.send(send)
        response, replica = opened
        try:
            headers = client_headers(response.headers.raw, partial(self._replicas.issued, replica), replica.origin)
            await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
            if (header(headers, b"content-type") or b"").startswith(b"text/event-stream"):
                relaying = relay_events(response.aiter_raw(), send, self._keepalive, self._httpx.HTTPError)
            else:
                relaying = relay(response.aiter_raw(), send)
            await (relaying if receive is None else while_connected(receive, relaying))
        finally:
            replica.in_flight -= 1
            with anyio.CancelScope(shield=True):  # closing the upstream stream, even when a disconnect cancels
                await response.aclose()

    async def _open(self, scope: Scope, content: Body) -> tuple[httpx.Response, Replica] | Rejection:
        """The request sent to each replica it may go to in turn, until one answers (see the module)."""
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        if (refused := self._host_check.check(headers)) is not None:
            return refused
        conversation = _conversation(scope)
        candidates, transport_id = self._route(headers, conversation)
        if not candidates:
            return _LOST_SESSION
        peer = _peer(scope)
        upstream = upstream_headers(
            headers,
            client=peer.address,
            trusted=peer.trusted,
            scheme=scope.get("scheme", "http"),
            transport_id=transport_id,
            conversation=conversation,
            trace=_trace_headers(),
        )
        # A body still arriving goes framed as it came: its Content-Length (the front refused one beside a
        # Transfer-Encoding), else chunked. A body read whole goes with its own length.
        if isinstance(content, AsyncIterator) and (length := header(headers, b"content-length")) is not None:
            upstream.append((b"content-length", length))
        target = _target(scope)
        status, reason = 503, "No upstream replica could be reached"
        for replica in candidates:
            url = self._httpx.URL(self._origins[replica.origin], raw_path=target)
            request = self._client.build_request(scope["method"], url, headers=upstream, content=content)
            replica.in_flight += 1
            try:
                async with asyncio.timeout(self._first_byte):
                    response = await self._client.send(request, stream=True)
            except (self._httpx.ConnectError, self._httpx.ConnectTimeout):
                self._replicas.failed(replica)
                if not isinstance(content, bytes):  # a body read whole, never sent, goes to the next replica
                    status, reason = 502, "The upstream replica could not be reached"
            except TimeoutError:
                status, reason = 504, "The upstream did not answer in time"
            except self._httpx.HTTPError as exc:
                logger.warning("mcp-sessions gateway: upstream %s failed: %s", replica.url, type(exc).__name__)
                status, reason = 502, "The upstream failed before answering"
            except BaseException:  # cancelled: the client left while the answer's headers were awaited
                replica.in_flight -= 1
                raise
            else:
                self._replicas.reached(replica)
                return response, replica
            replica.in_flight -= 1
            if status != 503:  # still 503: the next replica gets the request
                break
        if transport_id is not None and status == 503:
            return _LOST_SESSION  # a 2025-era transport session lives in its replica's memory alone
        return unavailable(status, reason, self._retry_after, _request_id(content), "upstream_unavailable")

    def _route(
        self, headers: list[tuple[bytes, bytes]], conversation: str | None
    ) -> tuple[list[Replica], bytes | None]:
        """The replicas to try, best first, and the upstream's own id of a 2025-era transport session.

        A transport session goes to the replica that issued it, and only there: no replica for an id the
        gateway did not give out (signed), nor for one too long to be one. A request that opens a transport
        session (no id yet) and names a conversation goes to the conversation's replica, as its other requests.
        """
        session_id = header(headers, MCP_SESSION_ID_HEADER)
        if session_id is not None and session_id.count(b".") != 2:  # not a session token (a JWT)
            found = self._replicas.issuer(session_id)
            if found is not None:
                return [found[0]], found[1]
            # One the gateway did not give out: lost on a 2025-era request; on 2026-07-28 the header only
            # mirrors the data-layer session, which the pipeline has judged.
            if Era.of(header(headers, MCP_PROTOCOL_VERSION_HEADER)) is Era.LEGACY:
                return [], None
        if conversation is None:
            return self._replicas.least_loaded(), None
        return self._replicas.for_conversation(conversation), None


def _target(scope: Scope) -> bytes:
    """The request's path and query as the client sent them (the front let only an origin-form target in)."""
    query: bytes = scope.get("query_string", b"")
    path = raw_path_of(scope)
    return path + b"?" + query if query else path


def _peer(scope: Scope) -> Peer:
    """The connection's peer, as the front recorded it (a proxy called without the front: the client, untrusted)."""
    peer: Peer | None = scope.get(PEER)
    if peer is not None:
        return peer
    client = scope.get("client")
    return Peer(None if client is None else str(client[0]), False)


def _request_id(body: Body) -> str | int | None:
    """The id of a one-message JSON-RPC body read whole (and small), for the error that answers it."""
    if not isinstance(body, bytes) or not body or len(body) > _MAX_ID_BODY:
        return None
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return jsonrpc.echoable_id(message.get("id")) if isinstance(message, dict) else None


def _conversation(scope: Scope) -> str | None:
    """The conversation's stable id, as telemetry names it: a host's conversation id, else the session's id."""
    conversation = current_conversation.get()
    if conversation is not None:
        return conversation[0]
    session: Session | None = scope.get(SCOPE_KEY)
    return None if session is None else session.id


def _trace_headers() -> dict[str, str]:
    """The trace context of the gateway's span for the upstream, when one records; else the client's goes as it
    came (a probe, under an unsampled parent that records nothing, has none: ``_verdict`` leaves the client's out)."""
    carrier: dict[str, str] = {}
    if trace.get_current_span().is_recording():
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

"""The streaming reverse proxy: every request to the upstream replica that holds its conversation, bytes as they come.

One pooled httpx transport for the app's lifetime: a transport, not a client, so that nothing of one request goes
with another's (an httpx client keeps the cookies every answer sets, and sends them with every later request that
has none of its own: one user's upstream session in another's), and nothing is added to the client's headers
(httpx's own ``User-Agent``, ``Accept-Encoding``). The request body goes as it arrives (a body the session pipeline
read whole goes in one piece, and may be sent again to another replica when the first could not be connected to, or
refused it for now, 503 with ``Retry-After``, as a gateway that drains refuses a new conversation). A body read
whole is also sent once more, to the same replica on a connection of its own, when the kept-alive connection it went
on was closed (or reset) before a byte of its answer came. A server closes a kept-alive connection only while it is
idle, between two requests (uvicorn and Node at a stop, either at its keep-alive timeout): a request that reached it
as it closed one was never read. That is RFC 9110 §9.2.2's "means to detect that the original request was never
applied", which lets a POST be sent again; Go's ``net/http`` tells this case apart the same way (a server that
closed an idle connection). One that went on a connection of its own and came back with no answer is not sent again:
the upstream may have run it; unless the connection was reset before a byte of its answer, which a TCP does as it
closes one with data its server has not read (RFC 1122 §4.2.2.13): a stopping server closes so the connections it
accepted and had not read from, and those in its listener's queue. A request so reset was never read: it goes to the
next replica, as one that could not be connected to (:func:`_unread`). The response goes back chunk by chunk, each
``send`` awaited before the next read (the backpressure). The connect and the wait for the response's first byte
are bounded; an event stream is not. Whatever the answer, a client that disconnects once its body is sent ends it:
the upstream request is cancelled and its connection closed (:func:`while_connected`), so the upstream sees the
client go. An upstream that cannot answer gets a JSON-RPC error with 502, 503 or 504 and ``Retry-After``, never a
hang.

**Event streams** can stay open for hours. Proxies cut a connection that carried nothing for a while (often
60 s), so after ``keepalive`` seconds of silence the gateway sends an SSE comment, ``: keep-alive``, but only
between two events (a comment inside an event would split it). The upstream is read by a task of its own,
one chunk ahead, so that waiting can time out without cutting a read in half.

**Headers** (RFC 9110 §7.6.1): a proxy drops the hop-by-hop headers, and every header the ``Connection``
header names, and forwards every other header as it came (``MCP-Protocol-Version``, ``Mcp-Method``,
``Mcp-Name``, ``Last-Event-ID``, ``traceparent``…). ``Authorization`` is the client's as it came only where
``--upstream-token`` is ``passthrough`` (the default of a gateway that authenticates no one); else the client's
goes nowhere, and the upstream gets none, or the token the user's was exchanged for (``_exchange``). An
``Mcp-Session-Id`` reaches the upstream only as the id it issued itself (a transport session the gateway
tagged): a session token, or any id the gateway did not give out, never does. The upstream gets its own
``Host``; the gateway sets
``X-Forwarded-For`` (the peer's address), ``X-Forwarded-Proto`` and ``X-Forwarded-Host`` (the client's
``Host``), and the client's own ``X-Forwarded-*``, ``Forwarded`` and ``X-Real-IP`` go on only from a proxy
the operator trusts (the peer's address then ends its ``X-Forwarded-For``). The conversation's stable id goes
in W3C baggage as ``gen_ai.conversation.id``. A ``Location`` or ``Content-Location`` on the upstream's own
origin (a redirect the upstream built from the ``Host`` it got, ``/mcp`` to ``/mcp/`` say) comes back as a
path on the gateway's, as nginx's ``proxy_redirect default`` has it: the client follows it through the
gateway, never around it. The origin is compared parsed (scheme, host and port, a default port as the
scheme's), never as a prefix of bytes; a URL with credentials in it is not rewritten. Nor is one whose path
would read as another host (``//evil.example/x``, ``/\\evil.example/x``: a browser takes both, and any tab in
them, for a URL of that host): it goes as the upstream sent it, an absolute URL on the upstream's host, as
Envoy passes every ``Location`` and nginx one it does not rewrite. Every other URL is the upstream's own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import Final
from urllib.parse import SplitResult, quote, urlsplit, urlunsplit

import anyio
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from opentelemetry import context, propagate, trace
from opentelemetry.baggage import clear as no_baggage
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import Message, Receive, Scope, Send

from ..._pipeline import Rejection, error_answer, unavailable
from ..._session import SCOPE_KEY, Session, current_conversation
from ..._tokens import is_session_token
from ..._wire import jsonrpc
from ..._wire.protocol import INVALID_REQUEST, MCP_PROTOCOL_VERSION_HEADER, MCP_SESSION_ID_HEADER
from ..._wire.sse import between_events
from ...profiles import Era
from .._front import PEER, HostCheck, Peer, raw_path_of
from ..auth._exchange import ExchangeRefused, UpstreamToken
from ..auth._sign_ins import SignInRequired
from ._replicas import Replica, Replicas

logger = logging.getLogger("mcp_sessions.gateway")

KEEPALIVE: Final = b": keep-alive\n\n"
HOP_BY_HOP: Final = frozenset(
    b"connection keep-alive proxy-connection proxy-authenticate proxy-authorization te trailer transfer-encoding "
    b"upgrade".split()
)
# Written again for the upstream: its own Host, the body's length, 100-continue (httpx sends the body at once).
_REWRITTEN: Final = HOP_BY_HOP | {b"host", b"content-length", b"expect"}
# A client's own say in who it is and how it came: from a proxy the operator trusts alone.
_FORWARDING: Final = frozenset({b"forwarded", b"x-real-ip"})
_FORWARDING_PREFIX: Final = b"x-forwarded-"
_URL_HEADERS: Final = frozenset({b"location", b"content-location"})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_CONVERSATION_MEMBER: Final = "gen_ai.conversation.id"
# A baggage value's octets (W3C baggage): anything else, and "%", percent-encoded.
_BAGGAGE_SAFE: Final = "!#$&'()*+-./:<=>?@[]^_`{|}~"
_MAX_ID_BODY: Final = 64 * 1024
# httpcore's words for an upstream that closed the connection before its answer's status line.
_CLOSED_UNANSWERED: Final = "Server disconnected without sending a response."
# How deep under httpx's error a connection's reset may be: httpcore's, anyio's, then the socket's.
_CAUSES: Final = 4
# The ``mcp`` SDK's answer for a transport session it does not hold (404): the client opens a new one.
_LOST_SESSION: Final = error_answer(404, INVALID_REQUEST, "Session not found", "transport_session_lost")
Body = bytes | AsyncIterator[bytes]


class UpstreamProxy:
    """The ASGI app the gateway's session pipeline forwards to: a streaming proxy to the upstream replicas."""

    def __init__(
        self,
        replicas: Replicas,
        *,
        served: str,
        host_check: HostCheck,
        keepalive: float | None,
        connect_timeout: float,
        first_byte_timeout: float,
        retry_after: int,
        upstream_token: UpstreamToken,
    ) -> None:
        self._replicas = replicas
        self._served = served.encode()  # where the gateway serves the endpoint: the upstream's under its own path
        self._upstream_token = upstream_token
        self._host_check = host_check
        self._keepalive = keepalive
        self._first_byte = first_byte_timeout
        self._retry_after = str(retry_after).encode()
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256, keepalive_expiry=4.0)
        # A transport follows no redirect, reads no proxy variable or .netrc credential; trust_env off: nor
        # the TLS variables.
        self._transport = httpx.AsyncHTTPTransport(limits=limits, trust_env=False)
        # A request sent again after its kept-alive connection closed: on a connection of its own, never kept.
        self._fresh = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0), trust_env=False)
        self._extensions = {"timeout": {"connect": connect_timeout, "read": None, "write": None, "pool": None}}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        # MCP has no WebSocket transport: refused before it is accepted.
        if scope["type"] != "http":
            return await send({"type": "websocket.close", "code": 1008})
        first = await receive()
        # Not a request: the client is gone.
        if first["type"] != "http.request":
            return None
        # A body still arriving: the client is watched once the upstream has it.
        if first.get("more_body", False):
            return await self._forward(scope, _streamed(first, receive), send, receive)
        body = first.get("body", b"")
        await while_connected(receive, self._forward(scope, body, send))

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        while message["type"] != "lifespan.shutdown":
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            message = await receive()
        # The pooled connections.
        await self._transport.aclose()
        await self._fresh.aclose()
        await send({"type": "lifespan.shutdown.complete"})

    async def _forward(self, scope: Scope, content: Body, send: Send, receive: Receive | None = None) -> None:
        """The request to the upstream, and its answer relayed; with ``receive``, the relay alone ends with the
        client (else the caller's :func:`while_connected` watches the whole exchange)."""
        opened = await self._open(scope, content)
        # A user's own grant (--upstream-token oauth) the upstream refused, for a body read whole: once more, with her
        # token refreshed, or answered with her sign-in URL (the upstream's 401 would send her client to its server).
        if not isinstance(opened, Rejection) and _refused_grant(opened[0], self._upstream_token, content):
            await opened[0].aclose()
            opened[1].in_flight -= 1
            opened = await self._open(scope, content)
        # The host refused, the transport session lost, the upstream down.
        if isinstance(opened, Rejection):
            return await opened.send(send)
        response, replica = opened
        try:
            issued = partial(self._replicas.issued, replica)
            headers = client_headers(response.headers.raw, issued, replica.origin)
            status = response.status_code
            await send({"type": "http.response.start", "status": status, "headers": headers})
            content_type = response.headers.get("content-type", "")
            if content_type.startswith("text/event-stream"):
                relaying = relay_events(response.aiter_raw(), send, self._keepalive)
            else:
                relaying = relay(response.aiter_raw(), send)
            if receive is not None:
                relaying = while_connected(receive, relaying)
            await relaying
        finally:
            replica.in_flight -= 1
            # The upstream stream closed, even when a disconnect cancels.
            with anyio.CancelScope(shield=True):
                await response.aclose()

    async def _open(self, scope: Scope, content: Body) -> tuple[httpx.Response, Replica] | Rejection:
        """The request sent to each replica it may go to in turn, until one answers (see the module)."""
        refused = self._host_check.check(scope["headers"])
        if refused is not None:
            return refused
        request = Headers(scope=scope)
        conversation = _conversation(scope)
        candidates, transport_id = self._route(request, conversation)
        if not candidates:
            return _LOST_SESSION
        headers = upstream_headers(
            scope["headers"],
            # The front records it on every request it lets in.
            peer=scope[PEER],
            scheme=scope.get("scheme", "http"),
            transport_id=transport_id,
            conversation=conversation,
            trace=_trace_headers(),
        )
        if self._upstream_token.mode != "passthrough":
            try:
                headers = await self._authorized(scope, headers)
            except SignInRequired as asked:  # her grant at the upstream's server (``_oauth``)
                return asked.answer_to(content, scope)
            except ExchangeRefused as failed:
                return failed.answer(_request_id(content), self._retry_after)
        # A body still arriving goes framed as it came: its Content-Length (the front refused one beside a
        # Transfer-Encoding), else chunked. A body read whole goes with its own length.
        if isinstance(content, AsyncIterator) and "content-length" in request:
            length = request["content-length"].encode("latin-1")
            headers.append((b"content-length", length))
        # The front let only an origin form in; the endpoint, and what is under it, under the upstream's own path.
        target = raw_path_of(scope)
        if target == self._served or target.startswith(self._served + b"/"):
            target = self._replicas.path.encode() + target[len(self._served) :]
        query: bytes = scope.get("query_string", b"")
        if query:
            target += b"?" + query
        method = scope["method"]
        status = 503
        reason = "No upstream replica could be reached"
        for replica in candidates:
            url = httpx.URL(replica.origin, raw_path=target)
            upstream = httpx.Request(method, url, headers=headers, content=content, extensions=self._extensions)
            replica.in_flight += 1
            try:
                response = await self._send(upstream, replayable=isinstance(content, bytes))
            except TimeoutError:
                status = 504
                reason = "The upstream did not answer in time"
            except httpx.HTTPError as exc:
                if _unread(exc):
                    self._replicas.failed(replica)
                    # A body read whole, never read there, goes to the next replica; one that streamed does not.
                    if not isinstance(content, bytes):
                        status = 502
                        reason = "The upstream replica could not be reached"
                else:
                    failure = type(exc).__name__
                    logger.warning("mcp-sessions gateway: upstream %s failed: %s", replica.url, failure)
                    status = 502
                    reason = "The upstream failed before answering"
            except BaseException:
                # Cancelled: the client left while the answer's headers were awaited.
                replica.in_flight -= 1
                raise
            else:
                self._replicas.reached(replica)
                # a conversation's (a transport session's goes where it was opened): it stays where it is served
                if conversation is not None and transport_id is None and not _draining(response):
                    self._replicas.served(conversation, replica)
                # An issued token it no longer takes: exchanged anew.
                if response.status_code == 401:
                    self._upstream_token.refused(scope)
                if not _draining(response) or not isinstance(content, bytes) or replica is candidates[-1]:
                    return response, replica
                # A replica that drains (a gateway stopping) did nothing with it: the next one gets it.
                await response.aclose()
            replica.in_flight -= 1
            # Still 503: the next replica gets the request.
            if status != 503:
                break
        # A 2025-era transport session lives in its replica's memory alone.
        if transport_id is not None and status == 503:
            return _LOST_SESSION
        request_id = _request_id(content)
        return unavailable(status, reason, self._retry_after, request_id, "upstream_unavailable")

    async def _send(self, request: httpx.Request, *, replayable: bool) -> httpx.Response:
        """``request`` sent, its answer's headers awaited for at most the first byte's timeout; sent once more on a
        connection of its own when ``replayable`` (its body read whole) and the kept-alive connection it went on
        closed before a byte of its answer came (see the module)."""
        connected = _Connected()
        request.extensions["trace"] = connected
        async with asyncio.timeout(self._first_byte):
            # An instrumented httpx injects the context's baggage over the headers' (the conversation's).
            token = context.attach(no_baggage())
            try:
                return await self._transport.handle_async_request(request)
            except (httpx.RemoteProtocolError, httpx.ReadError) as closed:
                # a reset, or a close with nothing of an answer (not an answer it could not read)
                unanswered = isinstance(closed, httpx.ReadError) or str(closed) == _CLOSED_UNANSWERED
                if connected.opened or not replayable or not unanswered:
                    raise
                logger.info(
                    "mcp-sessions gateway: upstream %s closed a kept-alive connection before answering (%s); "
                    "sent again on a new one",
                    request.url.copy_with(query=None),
                    type(closed).__name__,
                )
                return await self._fresh.handle_async_request(request)
            finally:
                context.detach(token)

    async def _authorized(self, scope: Scope, headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """``headers`` without the client's own ``Authorization`` (see the module), with the upstream's if it gets
        one; raises :class:`ExchangeRefused`."""
        authorization = await self._upstream_token.authorization(scope)
        kept = []
        for name, value in headers:
            if name != b"authorization":
                kept.append((name, value))
        if authorization is not None:
            kept.append((b"authorization", authorization))
        return kept

    def _route(self, request: Headers, conversation: str | None) -> tuple[list[Replica], bytes | None]:
        """The replicas to try, best first, and the upstream's own id of a 2025-era transport session.

        A transport session goes to the replica that issued it; while that one cannot be reached or drains,
        to one other, the same for each of its requests (its rank for the id): a replica whose server keeps its
        state on disk opens it again there (``--conversation-state disk``), any other answers 404, as the
        issuer's end would have. No replica for an id the gateway did not give out (signed), nor for one too long
        to be one. A request that opens a transport session (no id yet) and names a conversation goes to the
        conversation's replica, as its other requests.
        """
        session_id = request.get(MCP_SESSION_ID_HEADER.decode())
        raw = None if session_id is None else session_id.encode("latin-1")
        if raw is not None and session_id is not None and not is_session_token(raw):
            found = self._replicas.issuer(raw)
            if found is not None:
                issuer, upstream_id = found
                others = [replica for replica in self._replicas.for_conversation(session_id) if replica is not issuer]
                return [issuer, *others[:1]], upstream_id
            # One the gateway did not give out: lost on a 2025-era request; on 2026-07-28 the header only
            # mirrors the data-layer session, which the pipeline has judged.
            version = request.get(MCP_PROTOCOL_VERSION_HEADER.decode())
            if Era.of(version) is Era.LEGACY:
                return [], None
        if conversation is None:
            return self._replicas.least_loaded(), None
        return self._replicas.for_conversation(conversation), None


class _Connected:
    """httpcore's ``trace`` extension for one request: whether it opened a connection of its own (else it went on a
    kept-alive one)."""

    def __init__(self) -> None:
        self.opened = False

    async def __call__(self, event: str, info: Mapping[str, object]) -> None:
        if event == "connection.connect_tcp.started":
            self.opened = True


def _unread(failed: httpx.HTTPError) -> bool:
    """Whether the replica never read the request that ``failed``: no connection was made, or the one it went on was
    reset before a byte of its answer, seen as its answer was awaited or as the request was written (a broken pipe):
    a TCP closed with data it has not read resets the connection "to show that data was lost" (RFC 1122 §4.2.2.13),
    and so does one that gets data once closed; a server that read a request and then failed has nothing pending, and
    closes it. A stopping server resets so the connections it accepted but had not read from, and those in its
    listener's queue (uvicorn's stop stops listening, then closes every connection with no request under way)."""
    if isinstance(failed, (httpx.ConnectError, httpx.ConnectTimeout)):
        return True
    if not isinstance(failed, (httpx.ReadError, httpx.WriteError)):
        return False
    cause = failed.__cause__
    # httpcore's error, anyio's, the socket's: a reset is never deeper
    for _ in range(_CAUSES):
        # another httpx error: the request's first sending's, not this one's (``_send``)
        if cause is None or isinstance(cause, httpx.HTTPError):
            return False
        # reset as it read the answer, or as it wrote the request (the write's broken pipe)
        if isinstance(cause, (ConnectionResetError, BrokenPipeError)):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _refused_grant(response: httpx.Response, upstream_token: UpstreamToken, content: Body) -> bool:
    """Whether the upstream answered 401 to a user's own grant's token (``_oauth``), for a body that may go again."""
    return response.status_code == 401 and upstream_token.mode == "oauth" and isinstance(content, bytes)


def _draining(response: httpx.Response) -> bool:
    """Whether a replica refused a request it did not serve, for now: 503 with ``Retry-After`` (a gateway that drains
    answers so a request that would open a conversation, which another replica may take)."""
    return response.status_code == 503 and "retry-after" in response.headers


def upstream_headers(
    raw: Iterable[tuple[bytes, bytes]],
    *,
    peer: Peer,
    scheme: str,
    transport_id: bytes | None,
    conversation: str | None,
    trace: Mapping[str, str],
) -> list[tuple[bytes, bytes]]:
    """The request's end-to-end headers for the upstream, with the changes the module's docstring lists.

    ``peer`` is the connection's peer; ``transport_id`` is the one ``Mcp-Session-Id`` the upstream gets (the
    id the replica issued); ``trace`` replaces the client's trace headers (the gateway's span, when one records).
    """
    request = Headers(raw=list(raw))
    dropped = _REWRITTEN | _connection_listed(request) | {MCP_SESSION_ID_HEADER}
    dropped |= {name.encode() for name in trace}
    # Written again below.
    dropped |= {b"baggage", b"x-forwarded-for"}
    headers = MutableHeaders(raw=_passed_on(request, dropped, peer.trusted))
    if transport_id is not None:
        headers.append(MCP_SESSION_ID_HEADER.decode(), transport_id.decode("latin-1"))
    for name, value in trace.items():
        headers.append(name, value)
    baggage = request.getlist("baggage")
    if conversation is not None or baggage:
        headers.append("baggage", _with_conversation(",".join(baggage), conversation))
    forwarded_for = request.getlist("x-forwarded-for") if peer.trusted else []
    if peer.address is not None:
        forwarded_for.append(peer.address)
    if forwarded_for:
        headers.append("x-forwarded-for", ", ".join(forwarded_for))
    headers.setdefault("x-forwarded-proto", scheme)
    if "host" in request:
        headers.setdefault("x-forwarded-host", request["host"])
    return headers.raw


def _passed_on(request: Headers, dropped: frozenset[bytes], trusted: bool) -> list[tuple[bytes, bytes]]:
    """The request's headers that go on as they came: none of ``dropped``, and the client's own forwarding
    headers only from a ``trusted`` proxy."""
    kept = []
    for name, value in request.raw:
        forwarding = name in _FORWARDING or name.startswith(_FORWARDING_PREFIX)
        if name not in dropped and (trusted or not forwarding):
            kept.append((name, value))
    return kept


def _with_conversation(baggage: str, conversation: str | None) -> str:
    """The client's baggage, its own ``gen_ai.conversation.id`` replaced by the conversation's stable id."""
    if conversation is None:
        return baggage
    member = f"{_CONVERSATION_MEMBER}={quote(conversation, safe=_BAGGAGE_SAFE)}"
    kept = []
    for item in baggage.split(","):
        key = item.partition("=")[0].strip()
        if item.strip() and key != _CONVERSATION_MEMBER:
            kept.append(item)
    return ",".join([*kept, member])


def client_headers(
    raw: Iterable[tuple[bytes, bytes]], issued: Callable[[bytes], bytes | None], origin: str
) -> list[tuple[bytes, bytes]]:
    """The upstream's end-to-end response headers for the client, names lower-cased as ASGI sends them.

    An ``Mcp-Session-Id`` (a transport session the replica issued) becomes ``issued(id)``, the id the
    gateway gives the client (its replica's tag, signed), or goes when that is ``None``; a ``Location``
    or ``Content-Location`` on ``origin``, the replica's, becomes its path (see the module).
    """
    response = Headers(raw=[(name.lower(), value) for name, value in raw])
    dropped = HOP_BY_HOP | _connection_listed(response)
    headers = []
    for name, value in response.raw:
        if name == MCP_SESSION_ID_HEADER:
            signed = issued(value)
            if signed is None:
                continue
            value = signed
        elif name in _URL_HEADERS:
            value = _on_gateway(value, urlsplit(origin))
        if name not in dropped:
            headers.append((name, value))
    return headers


def _connection_listed(headers: Headers) -> frozenset[bytes]:
    """The header names the ``Connection`` header lists: hop-by-hop too."""
    listed = set()
    for value in headers.getlist("connection"):
        for token in value.split(","):
            listed.add(token.strip().lower().encode("latin-1"))
    return frozenset(listed)


def _on_gateway(value: bytes, origin: SplitResult) -> bytes:
    """``value``, a URL, as its path when it is on ``origin`` and that path reads as a path; else as it is."""
    try:
        # Tabs and line breaks removed, as a browser removes them.
        url = urlsplit(value.decode("latin-1"))
        ours = (origin.scheme, origin.hostname, _port(origin))
        same = (url.scheme, url.hostname, _port(url)) == ours
    except ValueError:
        # A port that is no number.
        return value
    if not same or url.username is not None or url.password is not None:
        return value
    path = urlunsplit(("", "", url.path or "/", url.query, url.fragment))
    # "//host", "/\\host": another host to a browser.
    if path[1:2] in ("/", "\\"):
        return value
    return path.encode("latin-1")


def _port(url: SplitResult) -> int | None:
    """The URL's port, its scheme's default when it names none."""
    return url.port or _DEFAULT_PORTS.get(url.scheme)


async def while_connected(receive: Receive, work: Awaitable[None]) -> None:
    """Await ``work`` until it is done or the client disconnects, which cancels it; what it raises, raised.

    ``receive`` has given the request's body: all it has left to say is ``http.disconnect``.
    """
    failed: list[Exception] = []
    async with anyio.create_task_group() as group:
        group.start_soon(_watch, receive, group.cancel_scope)
        try:
            await work
        except Exception as exc:
            # Raised as it came, not in the task group's ExceptionGroup.
            failed.append(exc)
        # The watcher: the answer is over.
        group.cancel_scope.cancel()
    if failed:
        raise failed[0]


async def _watch(receive: Receive, scope: anyio.CancelScope) -> None:
    """Cancel the work when the client disconnects (after the request's body, ``receive`` says nothing else)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


async def relay(chunks: AsyncIterator[bytes], send: Send) -> None:
    """Send every chunk as the body, each as it comes, then end it."""
    async for chunk in chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def relay_events(chunks: AsyncIterator[bytes], send: Send, keepalive: float | None) -> None:
    """:func:`relay` for an event stream: kept alive when quiet (see the module).

    A read that fails is raised once what came before it is sent: the response has started, so the client
    sees the stream cut, never an error answer. So is a ``send`` that fails.
    """
    failed: list[Exception] = []
    ahead, arrived = anyio.create_memory_object_stream[bytes](0)
    async with anyio.create_task_group() as group, arrived:
        group.start_soon(_read, chunks, ahead, failed)
        try:
            await _send_events(arrived, send, keepalive)
        except Exception as exc:
            # Raised as it came, not in the task group's ExceptionGroup; the reader cancelled.
            failed.append(exc)
            group.cancel_scope.cancel()
    if failed:
        raise failed[0]
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _send_events(arrived: MemoryObjectReceiveStream[bytes], send: Send, keepalive: float | None) -> None:
    """Send each chunk the reader hands on, and a keep-alive after ``keepalive`` seconds of silence between events."""
    # The stream's last bytes: its start counts as between two events.
    tail = b"\n\n"
    while True:
        chunk: bytes | None = None
        with anyio.move_on_after(keepalive):
            try:
                chunk = await arrived.receive()
            except anyio.EndOfStream:
                return
        if chunk is not None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            tail = (tail + chunk)[-4:]
        elif between_events(tail):
            await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})


async def _read(chunks: AsyncIterator[bytes], ahead: MemoryObjectSendStream[bytes], failed: list[Exception]) -> None:
    async with ahead:
        try:
            async for chunk in chunks:
                await ahead.send(chunk)
        except httpx.HTTPError as exc:
            # Kept for the relay to raise: a task group would wrap it in an ExceptionGroup.
            failed.append(exc)


def _request_id(body: Body) -> str | int | None:
    """The id of a one-message JSON-RPC body read whole (and small), for the error that answers it."""
    if not isinstance(body, bytes) or not body or len(body) > _MAX_ID_BODY:
        return None
    message = jsonrpc.loads(body, answer=True)
    if not isinstance(message, dict):
        return None
    return jsonrpc.echoable_id(message.get("id"))


def _conversation(scope: Scope) -> str | None:
    """The conversation's stable id, as telemetry names it: a host's conversation id, else the session's id."""
    conversation = current_conversation.get()
    if conversation is not None:
        return conversation[0]
    session: Session | None = scope.get(SCOPE_KEY)
    return None if session is None else session.id


def _trace_headers() -> dict[str, str]:
    """The trace context of the gateway's span for the upstream, when one records; else the client's goes as it
    came (a probe, under an unsampled parent that records nothing, has none: ``mcp_sessions._pipeline._probe``
    leaves the client's out)."""
    carrier: dict[str, str] = {}
    if trace.get_current_span().is_recording():
        propagate.inject(carrier)
        # The client's baggage goes on, with the conversation's id in it.
        carrier.pop("baggage", None)
    return carrier


async def _streamed(first: Message, receive: Receive) -> AsyncIterator[bytes]:
    """A body that is still arriving, piece by piece."""
    message = first
    while message["type"] == "http.request":
        body = message.get("body", b"")
        if body:
            yield body
        if not message.get("more_body", False):
            return
        message = await receive()

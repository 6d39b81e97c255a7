"""The session transport, written once for both HTTP libraries.

:class:`SessionTransportBase` stamps the held session into each outgoing
JSON-RPC POST, reads the server's echo from JSON and SSE answers as they pass,
and retries by the policy described in ``docs/client.md``. ``SessionTransport``
(httpx2) and ``HttpxSessionTransport`` (httpx) name their library module in
``_library`` and inherit its ``AsyncBaseTransport``: the two libraries differ
in module name only.

A JSON answer is read whole (the caller reads it whole anyway). An SSE answer is
held only until its first event is complete: if that event is a retryable
error, nothing has reached the caller yet; otherwise the stream is relayed
chunk by chunk (:class:`Relay`), observed as it passes and never changed.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, ClassVar, Final, Generic, Protocol, TypeVar

import anyio

from .._wire import jsonrpc
from .._wire.protocol import METHOD_NOT_FOUND, MODERN_VERSION
from .._wire.sse import SSERewriter
from ._messages import (
    MAX_DECODED,
    AnswerTooLarge,
    Attempt,
    Endpoint,
    Failure,
    Headers,
    Inflater,
    OutgoingPost,
    RequestLike,
    ResponseLike,
    ResponseT,
    Verdict,
    body_messages,
    retry_after,
    stamp,
)
from ._session import ChangeHook, HeldSession, RetryPolicy, SessionKeeper, SessionLifecycle

logger = logging.getLogger("mcp_sessions.client")

_EOL: Final = re.compile(rb"\r\n|\r|\n")


RequestT = TypeVar("RequestT", bound=RequestLike)
RequestT_contra = TypeVar("RequestT_contra", bound=RequestLike, contravariant=True)
ResponseT_co = TypeVar("ResponseT_co", bound=ResponseLike, covariant=True)


class InnerTransport(Protocol[RequestT_contra, ResponseT_co]):
    """The transport a session transport wraps (an ``AsyncBaseTransport`` of either library)."""

    async def handle_async_request(self, request: RequestT_contra) -> ResponseT_co: ...
    async def aclose(self) -> None: ...


class SessionTransportBase(Generic[RequestT, ResponseT]):
    """Create, use, delete and inspect the session a transport holds; see :class:`SessionTransport`."""

    _library: ClassVar[ModuleType]

    def __init__(
        self,
        transport: InnerTransport[RequestT, ResponseT] | None = None,
        *,
        session: HeldSession | None = None,
        auto_create: bool = True,
        recreate: bool = False,
        delete_on_close: bool = False,
        retry: RetryPolicy | None = None,
        on_change: ChangeHook | None = None,
        close_timeout: float = 5.0,
        close_transport: bool = True,
    ) -> None:
        if session is not None and not isinstance(session, HeldSession):
            raise TypeError("session must be a HeldSession (HeldSession.from_dict(saved) resumes a saved one)")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError("retry must be a RetryPolicy")
        if close_timeout < 0:
            raise ValueError("close_timeout must be 0 seconds or more")
        self._keeper = SessionKeeper(HeldSession() if session is None else session, on_change)
        self._retry = RetryPolicy() if retry is None else retry
        self._lifecycle = SessionLifecycle(self._post, self._keeper, self._retry)
        self._inner: InnerTransport[RequestT, ResponseT] = (
            self._library.AsyncHTTPTransport() if transport is None else transport
        )
        self._auto_create = auto_create
        self._recreate = recreate
        self._delete_on_close = delete_on_close
        self._close_timeout = close_timeout
        self._close_transport = close_transport
        self._endpoint: Endpoint | None = None  # that of the last request that was not connection set-up
        self._create_lock = anyio.Lock()
        self._closed = False

    @property
    def session(self) -> HeldSession:
        """The held session: inspect it (``id``, ``expires_at``, ``state``) or persist it (``to_dict()``)."""
        return self._keeper.session

    @property
    def supports_sessions(self) -> bool | None:
        """What the server said: ``True`` (advertised), ``False`` (not advertised, or -32601), ``None`` (not yet)."""
        return self._keeper.supported

    # -- the caller's requests ------------------------------------------------------------

    async def handle_async_request(self, request: RequestT) -> ResponseT:
        """Send one request through the wrapped transport, with the session where it belongs."""
        if request.method == "DELETE" and self._delete_on_close and self.session.token is not None:
            await self._delete_before_close()  # a 2025 transport session ends: the server takes the delete in it
        content_type = request.headers.get("content-type")
        if request.method != "POST" or not (content_type or "").lower().startswith("application/json"):
            return await self._inner.handle_async_request(request)
        post = OutgoingPost.parse(request, await request.aread())
        if post is None:
            return await self._inner.handle_async_request(request)
        if not post.only_setup:
            self._endpoint = Endpoint.learn(post)
        try:
            return await self._exchange(post)
        finally:
            await self._keeper.report_changes()

    async def _exchange(self, post: OutgoingPost) -> ResponseT:
        """Send ``post`` until its answer is one to deliver: retried by the policy, a new session at most once."""
        renewed = False

        async def attempt() -> Verdict[ResponseT]:
            nonlocal renewed
            verdict, renew = await self._try(post, force_create=renewed)
            if renew is not None and not renewed:
                await verdict.discard()
                logger.info("retrying once with a new session after %s", renew)
                renewed = True
                verdict, _ = await self._try(post, force_create=True)
            return verdict

        return (await self._retry.run(attempt, "POST")).response

    async def _try(self, post: OutgoingPost, *, force_create: bool) -> tuple[Verdict[ResponseT], str | None]:
        """One try at ``post``: its verdict, and why to try once more with a new session, if the policy says to."""
        token = await self._token_for(post, force_create=force_create)
        if isinstance(token, Failure):
            return Verdict(self._refusal(post, token), []), None
        attempt = stamp(post, token, self.session.state)
        response = await self._post(post.url, attempt.headers, attempt.body, post.extensions, "POST")
        verdict = await read_answer(self._library, response, post, attempt, self._keeper)
        if verdict.busy:
            return verdict, None
        errors = [m for m in verdict.deciding if isinstance(m, dict) and isinstance(m.get("error"), dict)]
        gone = self._keeper.gone_codes
        if self._recreate and any(jsonrpc.error_code(e) in gone and e.get("id") in attempt.stamped_ids for e in errors):
            return verdict, "not found"
        codes = {jsonrpc.error_code(e) for e in errors}
        if (
            not self._keeper.required_codes.isdisjoint(codes)
            and self._auto_create
            and attempt.token is None
            and not post.handles_own_session
        ):
            return verdict, "required"
        return verdict, None

    async def _token_for(self, post: OutgoingPost, *, force_create: bool) -> str | Failure | None:
        """The token to stamp, creating a session first if this request calls for one; a refused create's failure."""
        self._keeper.drop_if_expired()
        if self.session.token is not None:
            return self.session.token
        if not (force_create or (self._auto_create and self._keeper.supported is not False and post.triggers_create)):
            return None
        async with self._create_lock:
            if self.session.token is None or self.session.expired():  # another request may have created it
                failure = await self._lifecycle.create(Endpoint.learn(post))
                if failure is not None and failure.code != METHOD_NOT_FOUND:  # -32601: no sessions, send without
                    return failure
        return self.session.token

    def _refusal(self, post: OutgoingPost, failure: Failure) -> ResponseT:
        """Answer the caller's POST with the error that creating its session met, under its own request ids."""
        answers = [jsonrpc.error(rid, failure.code, failure.message, failure.data) for rid in post.request_ids]
        body = jsonrpc.dumps(answers if post.batch else answers[0])
        headers = [("content-type", "application/json")]
        if failure.retry_after is not None:
            headers.append(("retry-after", failure.retry_after))
        refusal: ResponseT = self._library.Response(failure.status, headers=headers, content=body)
        return refusal

    async def _post(
        self, url: object, headers: Headers, body: bytes, extensions: Mapping[str, object], method: str
    ) -> ResponseT:
        """Send a POST (or ``method``) with exactly these headers and body through the wrapped transport."""
        request = self._library.Request(method, url, headers=headers, content=body, extensions=dict(extensions))
        return await self._inner.handle_async_request(request)

    # -- the explicit API -------------------------------------------------------------------

    async def create(
        self,
        url: str | None = None,
        *,
        protocol_version: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HeldSession:
        """Create a session now, replacing any held one (which is forgotten, not deleted).

        ``url`` is the MCP endpoint; without it, the endpoint of the last request
        this transport sent. ``protocol_version`` picks the era of the request
        (default ``2026-07-28``) and ``headers`` are added to it (for example
        ``Authorization``: this request does not pass through the client's auth). On the 2025 wire
        with no ``Mcp-Session-Id`` among them, a transport session of its own is opened first
        (``initialize``) and ended after.
        Raises :class:`SessionError` if the server refuses (``-32601``: the
        server has no sessions).
        """
        endpoint = self._endpoint_for(url, protocol_version, headers)
        async with self._create_lock:
            failure = await self._lifecycle.create(endpoint)
        if failure is not None:
            raise failure.error()
        if self._endpoint is None:
            self._endpoint = endpoint
        await self._keeper.report_changes()
        return self.session

    async def delete(
        self,
        url: str | None = None,
        *,
        protocol_version: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> bool:
        """Delete the held session on the server and forget it.

        ``True`` if the server deleted it, ``False`` if there was none or the
        server no longer knew it (``-32043``). Other refusals raise
        :class:`SessionError`. ``url``, ``protocol_version`` and ``headers`` as
        for :meth:`create`.
        """
        if self.session.token is None:
            return False
        endpoint = self._endpoint_for(url, protocol_version, headers)
        try:
            return await self._lifecycle.delete(endpoint)
        finally:
            await self._keeper.report_changes()

    async def aclose(self) -> None:
        """Delete the session if ``delete_on_close`` (bounded by ``close_timeout``), then close the wrapped transport.

        Failing to delete is logged, never raised. The wrapped transport is
        closed too, unless the transport was built with ``close_transport=False``.
        """
        if self._closed:
            return
        self._closed = True
        try:
            if self._delete_on_close and self.session.token is not None:
                await self._delete_before_close()
        finally:
            if self._close_transport:
                await self._inner.aclose()

    async def _delete_before_close(self) -> None:
        sid = self.session.id
        if self._endpoint is None:
            logger.warning("session %s not deleted on close: no request has named its server", sid)
            return
        with anyio.move_on_after(self._close_timeout) as scope:
            try:
                await self._lifecycle.delete(self._endpoint)
            except Exception as exc:
                logger.warning("could not delete session %s on close: %s", sid, exc)
            finally:
                await self._keeper.report_changes()
        if scope.cancelled_caught:
            logger.warning("could not delete session %s on close: no answer in %s s", sid, self._close_timeout)

    def _endpoint_for(
        self, url: str | None, protocol_version: str | None, headers: Mapping[str, str] | None
    ) -> Endpoint:
        """Where an explicit create or delete goes: ``url`` if given, else the last request's endpoint."""
        if self._closed:
            raise RuntimeError(
                "this transport is closed: build a new one (SessionTransport(session=...) keeps the session)"
            )
        if url is not None:
            return Endpoint.explicit(url, protocol_version or MODERN_VERSION, headers)
        if self._endpoint is None:
            raise ValueError("no MCP endpoint is known yet: pass url= (the server's MCP endpoint)")
        return self._endpoint


async def read_answer(
    library: ModuleType, response: ResponseT, post: OutgoingPost, attempt: Attempt, keeper: SessionKeeper
) -> Verdict[ResponseT]:
    """Read ``response`` to one attempt at ``post`` as far as deciding needs; the keeper learns from each message.

    A JSON answer (or a 503) is read whole, up to :data:`MAX_DECODED` bytes: a longer one goes to the caller
    as it comes, unobserved.
    """
    content_type = str(response.headers.get("content-type") or "").lower()
    sse = content_type.startswith("text/event-stream") and response.status_code < 300
    is_json = content_type.startswith("application/json")
    if not (sse or is_json or response.status_code == 503):
        return Verdict(response, [])
    observe = functools.partial(keeper.observe, post, attempt)
    inflate = Inflater(response.headers.get("content-encoding"))
    relay = _relay_type(library)(response.stream, inflate, post.request_ids, observe, keeper.report_changes, sse=sse)
    if sse:
        await relay.hold_first_event()
        return Verdict.of(_rebuilt(library, response, relay), [] if relay.first is None else [relay.first])
    raw = await relay.read_whole(MAX_DECODED)
    if raw is None:
        logger.warning("an answer over %d bytes: its session echo is not read", MAX_DECODED)
        return Verdict.of(_rebuilt(library, response, relay), [])
    try:
        messages = body_messages(response, raw) if is_json else []
    except AnswerTooLarge as exc:
        logger.warning("%s: its session echo is not read", exc.message)
        messages = []
    for message in messages:
        observe(message)
    wait = retry_after(response.headers.get("retry-after"))
    return Verdict.of(_rebuilt(library, response, library.ByteStream(raw)), messages, wait)


def _rebuilt(library: ModuleType, response: ResponseT, stream: object) -> ResponseT:
    """``response`` (status, headers, extensions) with its body coming from ``stream``."""
    rebuilt: ResponseT = library.Response(
        response.status_code, headers=response.headers, stream=stream, extensions=response.extensions
    )
    return rebuilt


class Relay:
    """The body of an answer: what was held of it, then the rest as it arrives, an SSE answer observed on the way.

    Observing hands each event's message to ``on_message`` and stops once every
    request in ``request_ids`` has its answer: the rest of the stream is not the
    client's to read. ``first``, when the very first event had data, is the first
    message held with it (a priming event's empty data is none): the one a retry may
    replace, as nothing held has reached the caller. ``after_chunk`` runs after each
    observed chunk: it reports session changes before the caller sees the next bytes.
    """

    def __init__(
        self,
        stream: Any,  # the server's, an AsyncByteStream of the library
        inflate: Inflater,
        request_ids: Iterable[object],
        on_message: Callable[[object], None],
        after_chunk: Callable[[], Awaitable[None]],
        *,
        sse: bool = True,
    ) -> None:
        self._stream = stream
        self._chunks: AsyncIterator[bytes] = stream.__aiter__()
        self._held: list[bytes] = []
        self._inflate = inflate
        self._rewriter = SSERewriter(self._on_event, max_event=MAX_DECODED)
        self._pending = {jsonrpc.hashable_id(request_id) for request_id in request_ids}
        self._on_message = on_message
        self._after_chunk = after_chunk
        self._observing = sse
        self._first_complete = False
        self.first: object = None

    async def hold_first_event(self) -> None:
        """Read and hold chunks until the first event is complete or the stream ends."""
        await self._hold(lambda size: self._first_complete)

    async def read_whole(self, limit: int) -> bytes | None:
        """The whole body, its stream closed; ``None`` past ``limit`` bytes (what was held then goes first)."""
        if await self._hold(lambda size: size > limit):
            return None
        await self.aclose()
        return b"".join(self._held)

    async def _hold(self, enough: Callable[[int], bool]) -> bool:
        """Read and hold chunks until ``enough(bytes held)``; ``False`` if the stream ended first."""
        size = 0
        try:
            while not enough(size):
                try:
                    chunk = await self._chunks.__anext__()
                except StopAsyncIteration:
                    return False
                self._held.append(chunk)
                size += len(chunk)
                self._observe(chunk)
            return True
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.aclose()
            raise

    def __aiter__(self) -> Relay:
        return self

    async def __anext__(self) -> bytes:
        if self._held:
            return self._held.pop(0)
        chunk = await self._chunks.__anext__()
        self._observe(chunk)
        await self._after_chunk()
        return chunk

    async def aclose(self) -> None:
        """Close the server's stream (the caller stopped reading, read to the end, or a retry replaces it)."""
        try:
            aclose = getattr(self._chunks, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            await self._stream.aclose()

    def _observe(self, chunk: bytes) -> None:
        """Parse one chunk as it passes; a failure to parse stops observing, never the stream."""
        if not self._observing:
            return
        try:
            output = self._rewriter.feed(self._inflate(chunk))
            if self._rewriter.overflowed:
                raise AnswerTooLarge(f"an SSE event over {MAX_DECODED} bytes")
            if output and not self._first_complete:
                self._first_complete = True
                if not _first_event_has_data(output):
                    self.first = None  # the message of a later event in the same chunk
        except AnswerTooLarge as exc:
            logger.warning("%s: its session echo is not read", exc.message)
            self._observing = False
        except Exception:  # an observer bug must never break the caller's stream
            logger.exception("could not read the session echo from an SSE answer")
            self._observing = False

    def _on_event(self, data: str) -> None:
        message = jsonrpc.loads(data.encode())
        if message is None:
            return
        self._on_message(message)
        if not self._first_complete and self.first is None:
            self.first = message
        if jsonrpc.is_response(message):
            self._pending.discard(jsonrpc.hashable_id(message["id"]))
            self._observing = bool(self._pending)


def _first_event_has_data(output: bytes) -> bool:
    """Whether the first event in ``output`` (complete events, as the rewriter emits them) has a data field."""
    for line in _EOL.split(output):
        if not line:
            return False  # the blank line that ends the first event
        if line.partition(b":")[0] == b"data":
            return True
    return False


@functools.cache
def _relay_type(library: ModuleType) -> type[Relay]:
    # The library checks isinstance(stream, AsyncByteStream) before reading or closing a body.
    return type("Relay", (Relay, library.AsyncByteStream), {"__module__": __name__})

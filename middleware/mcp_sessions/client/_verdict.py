"""Reading just enough of one attempt's answer to decide: deliver it to the caller, or retry.

A JSON answer is read whole (the caller reads it whole anyway). An SSE answer is
held only until its first event is complete: if that event is a retryable
error, nothing has reached the caller yet; otherwise the stream is relayed
chunk by chunk, observed as it passes and never changed.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final, Generic

import anyio

from .._wire import jsonrpc
from .._wire.sse import SSERewriter
from ._incoming import Inflater, ResponseT, body_messages, read_all, retry_after
from ._keeper import SessionKeeper
from ._outgoing import Attempt, OutgoingPost

logger = logging.getLogger("mcp_sessions.client")

_EOL: Final = re.compile(rb"\r\n|\r|\n")


@dataclass(slots=True)
class Verdict(Generic[ResponseT]):
    """One attempt's answer, ready to deliver, and the messages that decide whether to retry it instead."""

    response: ResponseT
    deciding: list[object]  # a JSON answer's messages, or an SSE answer's first event if it had data
    retry_after: float | None = None

    async def discard(self) -> None:
        """Close the answer unread: a retry's answer takes its place."""
        await self.response.stream.aclose()


async def read_answer(
    library: ModuleType, response: ResponseT, post: OutgoingPost, attempt: Attempt, keeper: SessionKeeper
) -> Verdict[ResponseT]:
    """Read ``response`` to one attempt at ``post`` as far as deciding needs; the keeper learns from each message."""
    content_type = str(response.headers.get("content-type") or "").lower()
    observe = functools.partial(keeper.observe, post, attempt)
    if content_type.startswith("text/event-stream") and response.status_code < 300:
        inflate = Inflater(response.headers.get("content-encoding"))
        relay = _relay_type(library)(response.stream, inflate, post.request_ids, observe, keeper.report_changes)
        await relay.hold_first_event()
        return Verdict(_rebuilt(library, response, relay), [] if relay.first is None else [relay.first])
    is_json = content_type.startswith("application/json")
    if not is_json and response.status_code != 503:
        return Verdict(response, [])
    raw = await read_all(response)
    messages = body_messages(response, raw) if is_json else []
    for message in messages:
        observe(message)
    wait = retry_after(response.headers.get("retry-after"))
    return Verdict(_rebuilt(library, response, library.ByteStream(raw)), messages, wait)


def _rebuilt(library: ModuleType, response: ResponseT, stream: object) -> ResponseT:
    """``response`` (status, headers, extensions) with its body coming from ``stream``."""
    rebuilt: ResponseT = library.Response(
        response.status_code, headers=response.headers, stream=stream, extensions=response.extensions
    )
    return rebuilt


class Relay:
    """The body of an SSE answer: the held first event, then the rest as it arrives, observed on the way.

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
    ) -> None:
        self._stream = stream
        self._chunks: AsyncIterator[bytes] = stream.__aiter__()
        self._held: list[bytes] = []
        self._inflate = inflate
        self._rewriter = SSERewriter(self._on_event, once=False)
        self._pending = {jsonrpc.hashable_id(request_id) for request_id in request_ids}
        self._on_message = on_message
        self._after_chunk = after_chunk
        self._observing = True
        self._first_complete = False
        self.first: object = None

    async def hold_first_event(self) -> None:
        """Read and hold chunks until the first event is complete or the stream ends."""
        try:
            while not self._first_complete:
                try:
                    chunk = await self._chunks.__anext__()
                except StopAsyncIteration:
                    return
                self._held.append(chunk)
                self._observe(chunk)
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
            if output and not self._first_complete:
                self._first_complete = True
                if not _first_event_has_data(output):
                    self.first = None  # the message of a later event in the same chunk
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

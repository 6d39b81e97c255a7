"""SSE answers: observed as they pass, relayed to the caller chunk by chunk, never changed."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from .._wire import jsonrpc
from .._wire.sse import SSERewriter
from ._answers import Inflater, first_event_has_data

__all__ = ["Relay", "StreamObserver"]

logger = logging.getLogger("mcp_sessions.client")


class StreamObserver:
    """Parses an SSE answer as it passes, handing each message to ``on_message``.

    It stops reading once every request in ``request_ids`` has its answer: the
    rest of the stream is not the client's to read. ``first`` is the message of
    the very first event, if that event had data (the one a retry may replace).
    """

    def __init__(self, request_ids: Iterable[object], inflate: Inflater, on_message: Callable[[object], None]) -> None:
        self._inflate = inflate
        self._on_message = on_message
        self._rewriter = SSERewriter(self._on_event, once=False)
        self._pending = set(map(_hashable, request_ids))
        self.events = 0  # complete events seen so far (0 or 1: only the first one matters)
        self.first: object = None
        self._first_data: object = None
        self._done = False

    def feed(self, chunk: bytes) -> None:
        """Observe one chunk as it passes; a failure to parse stops observing, never the stream."""
        if self._done:
            return
        try:
            output = self._rewriter.feed(self._inflate(chunk))
            if output and not self.events:
                self.events = 1
                if first_event_has_data(output):
                    self.first = self._first_data
        except Exception:  # an observer bug must never break the caller's stream
            logger.exception("could not read the session echo from an SSE answer")
            self._done = True

    def _on_event(self, data: str) -> None:
        message = jsonrpc.loads(data.encode())
        if not self.events and self._first_data is None:
            self._first_data = message
        if message is None:
            return None
        self._on_message(message)
        if jsonrpc.is_response(message):
            self._pending.discard(_hashable(message["id"]))
            if not self._pending:
                self._done = True
        return None


class Relay:
    """The body of an SSE answer: the held first event, then the rest as it arrives, observed on the way.

    ``after_chunk`` runs after each observed chunk (it reports session changes
    before the caller sees the next bytes); ``close`` closes the server's stream.
    """

    def __init__(
        self,
        held: list[bytes],
        chunks: AsyncIterator[bytes],
        observer: StreamObserver,
        close: Callable[[], Awaitable[None]],
        after_chunk: Callable[[], Awaitable[None]],
    ) -> None:
        self._held = held
        self._chunks = chunks
        self._observer = observer
        self._close = close
        self._after_chunk = after_chunk

    def __aiter__(self) -> Relay:
        return self

    async def __anext__(self) -> bytes:
        if self._held:
            return self._held.pop(0)
        chunk = await self._chunks.__anext__()
        self._observer.feed(chunk)
        await self._after_chunk()
        return chunk

    async def aclose(self) -> None:
        """Close the server's stream (the caller stopped reading, or read to the end)."""
        await self._close()


def _hashable(value: object) -> str | int | float | None:
    return value if isinstance(value, str | int | float | type(None)) else repr(value)

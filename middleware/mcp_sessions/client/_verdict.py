"""Reading just enough of one attempt's answer to decide: deliver it to the caller, or retry.

A JSON answer is read whole (the caller reads it whole anyway). An SSE answer is
held only until its first event is complete: if that event is a retryable
error, nothing has reached the caller yet; otherwise the stream is relayed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, Literal

import anyio

from .._wire import jsonrpc
from .._wire.protocol import SESSION_STORE_UNAVAILABLE
from ._adapter import HttpAdapter, RequestT, ResponseT
from ._answers import Inflater, json_messages, read_all, retry_after
from ._keeper import SessionKeeper
from ._outgoing import Attempt, OutgoingPost
from ._stream import Relay, StreamObserver

__all__ = ["AnswerReader", "RetryReason", "Verdict"]

RetryReason = Literal["unavailable", "not_found", "required"]


@dataclass(slots=True)
class Verdict(Generic[ResponseT]):
    """One attempt's answer: deliver it, or retry (for ``reason``) after discarding it."""

    reason: RetryReason | None
    deliver: Callable[[], ResponseT]
    discard: Callable[[], Awaitable[None]]
    retry_after: float | None = None


class AnswerReader(Generic[RequestT, ResponseT]):
    """Reads answers for the retry loop, and lets the keeper learn from every message on the way."""

    def __init__(
        self, adapter: HttpAdapter[RequestT, ResponseT], keeper: SessionKeeper, *, recreate: bool, auto_create: bool
    ) -> None:
        self._adapter = adapter
        self._keeper = keeper
        self._recreate = recreate
        self._auto_create = auto_create

    async def read(self, post: OutgoingPost, attempt: Attempt, response: ResponseT) -> Verdict[ResponseT]:
        """The verdict on ``response`` to one attempt at ``post``: deliver it, or retry and why."""
        status = response.status_code
        content_type = str(response.headers.get("content-type") or "").lower()
        encoding = response.headers.get("content-encoding")

        async def close() -> None:
            await response.stream.aclose()

        if content_type.startswith("text/event-stream") and status < 300:
            return await self._read_stream(post, attempt, response, Inflater(encoding), close)
        if not content_type.startswith("application/json") and status != 503:
            return Verdict(None, lambda: response, close)
        raw = await read_all(response)
        messages = json_messages(Inflater(encoding)(raw)) if content_type.startswith("application/json") else []
        for message in messages:
            self._keeper.observe(post, attempt, message)
        reason = self._retry_reason(post, attempt, status, messages)
        wait = retry_after(response.headers.get("retry-after"))
        return Verdict(reason, lambda: self._adapter.with_body(response, raw), _nothing, wait)

    async def _read_stream(
        self,
        post: OutgoingPost,
        attempt: Attempt,
        response: ResponseT,
        inflate: Inflater,
        close: Callable[[], Awaitable[None]],
    ) -> Verdict[ResponseT]:
        """Hold only the first event: if it is a retryable error, nothing has reached the caller yet."""
        observer = StreamObserver(post.request_ids, inflate, lambda m: self._keeper.observe(post, attempt, m))
        chunks: AsyncIterator[bytes] = response.stream.__aiter__()
        held: list[bytes] = []

        async def close_all() -> None:
            try:
                aclose = getattr(chunks, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                await close()

        try:
            while not observer.events:
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                held.append(chunk)
                observer.feed(chunk)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await close_all()
            raise
        first = observer.first
        reason = self._retry_reason(post, attempt, response.status_code, [first]) if first is not None else None
        relay = Relay(held, chunks, observer, close_all, self._keeper.report_changes)
        return Verdict(reason, lambda: self._adapter.with_stream(response, relay), close_all)

    def _retry_reason(
        self, post: OutgoingPost, attempt: Attempt, status: int, messages: list[object]
    ) -> RetryReason | None:
        errors = [m for m in messages if isinstance(m, dict) and isinstance(m.get("error"), dict)]
        codes = {jsonrpc.error_code(e) for e in errors}
        if status == 503 or SESSION_STORE_UNAVAILABLE in codes:
            return "unavailable"
        if self._recreate and any(
            jsonrpc.error_code(e) in self._keeper.gone_codes and e.get("id") in attempt.stamped_ids for e in errors
        ):
            return "not_found"
        if (
            not self._keeper.required_codes.isdisjoint(codes)
            and self._auto_create
            and attempt.token is None
            and not post.has_session_method
            and not post.names_own_session
        ):
            return "required"
        return None


async def _nothing() -> None:
    return None

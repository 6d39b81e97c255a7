"""The response rewriter: chosen at ``http.response.start``, JSON buffered, SSE event by event.

``application/json`` bodies are one message: buffered, rewritten, sent with a
new ``Content-Length``. ``text/event-stream`` is rewritten as it flows, never
held back. Anything else, and anything encoded, passes through untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from starlette.types import Message

from ..profiles import Echo
from ..wire import iso, jsonrpc
from ..wire.jsonrpc import fast_loads, hashable_id
from ..wire.sse import SSERewriter
from ._echo import CHANGED, EchoOnly, Target, annotate, leading_splice_point, splice_point

if TYPE_CHECKING:
    from asgiref.typing import ASGISendCallable, ASGISendEvent, HTTPResponseBodyEvent, HTTPResponseStartEvent

    from ..session import Session


__all__ = ["ResponseRewriter"]

logger = logging.getLogger("mcp_sessions")

_JSON: Final = b"application/json"
_SSE: Final = b"text/event-stream"
# How a notification event starts, as the SDK and any compact serializer write it: a message with a
# "method" member is a request or a notification, never a response to rewrite.
_NOTIFICATION_DATA: Final = b'data: {"jsonrpc":"2.0","method":'
_NOTIFICATION_EVENTS: Final = (
    b"event: message\r\n" + _NOTIFICATION_DATA,  # the SDK's, first
    b"event: message\n" + _NOTIFICATION_DATA,
    _NOTIFICATION_DATA,
)


class _SseBody:
    """A ``text/event-stream`` body, rewritten event by event as it flows."""

    __slots__ = ("_rewrite_message", "_sse", "feed")

    def __init__(self, rewrite_message: Callable[[bytes, dict[str, object]], bytes | None], *, once: bool) -> None:
        self._rewrite_message = rewrite_message
        # Only an event with an "id" member (or an escape that could spell one) can answer a request,
        # and never one whose message has a "method" (as servers write notifications: jsonrpc, then method).
        self._sse = SSERewriter(
            self._rewrite_event,
            once=once,
            needles=(b'"id"', b"\\"),
            openings=_NOTIFICATION_EVENTS,
        )
        self.feed = self._sse.feed
        """The bytes to send now for a body: the body itself when nothing in it changed."""

    def rewrite(self, message: HTTPResponseBodyEvent, chunk: bytes) -> HTTPResponseBodyEvent:
        """The message to send for ``message``, whose body :meth:`feed` turned into ``chunk``."""
        more = message.get("more_body", False)
        if not more:
            chunk += self._sse.flush()
        if chunk is message.get("body", b""):
            return message  # passed on as it came: the app's own message
        return {"type": "http.response.body", "body": chunk, "more_body": more}

    def _rewrite_event(self, data: str) -> str | None:
        if '"id"' not in data and "\\" not in data:
            return None  # no "id" member, even escaped: a notification or a comment, never a response
        try:
            raw = data.encode()
            parsed = jsonrpc.loads(raw)
            if isinstance(parsed, dict) and (rewritten := self._rewrite_message(raw, parsed)) is not None:
                return rewritten.decode()
        except Exception:
            logger.exception("could not add session metadata to an event")
        return None


class ResponseRewriter:
    """Rewrites and observes the responses to one HTTP request; ``send`` is its ASGI send.

    Decides at ``http.response.start``: an ``application/json`` body is held (its start too) until it is
    complete, then rewritten and sent with a new ``Content-Length``; an event stream is rewritten event by
    event as it flows; anything else, and anything encoded, passes untouched.
    """

    # Slots, none a class default: a class default read through an instance is a generic attribute
    # lookup on each read, where a slot is one load. All are set in __init__ but _kept, set (and
    # read) only once a JSON start is held.
    __slots__ = ("_buffer", "_echo_only", "_kept", "_send", "_sse", "_start", "status", "targets")

    def __init__(self, send: ASGISendCallable, targets: dict[Any, Target], echo_only: EchoOnly | None = None) -> None:
        self._send = send
        self.targets = targets
        """What each response gains, by request id: a :class:`Target` each, none for ``echo_only``'s request."""
        self._echo_only = echo_only
        """The usual response: to one request, in a data-layer session, gaining the echo and nothing else
        (observed by its operation when traced)."""
        self._start: HTTPResponseStartEvent | None = None
        """A JSON response's start, held for its body."""
        self._buffer: bytearray | None = None
        """A JSON body that comes in parts."""
        self._sse: _SseBody | None = None
        self.status = 0
        """The response's status, once it has started."""

    async def send(self, message: Message) -> None:
        """The ``send`` the app gets: response events are read as the typed ASGI events they are."""
        event: ASGISendEvent = message  # type: ignore[assignment]  # an annotation, not a call
        if event["type"] == "http.response.body":
            if (sse := self._sse) is not None:
                # The usual event of a long stream costs one call: passed on as the app sent it.
                body = event.get("body", b"")
                chunk = sse.feed(body)
                if chunk is body and event.get("more_body", False):
                    return await self._send(event)
                return await self._send(sse.rewrite(event, chunk))
            if (start := self._start) is not None:
                if (whole := self._whole_body(event)) is not None:  # the body is complete: both go out
                    self._start = None  # anything after the last body passes untouched
                    kept, send = self._kept, self._send  # a callable in a slot: one load, then the call
                    kept.append((b"content-length", str(len(whole)).encode()))
                    await send({**start, "headers": kept})
                    await send({"type": "http.response.body", "body": whole, "more_body": False})
                return None
        elif event["type"] == "http.response.start":
            event = self._begin(event)
            if self._start is not None:
                return None  # a JSON response: its start is held until its body is complete
        await self._send(event)  # trailers, pushes, disconnects, an unrewritten body: untouched

    def _begin(self, start: HTTPResponseStartEvent) -> HTTPResponseStartEvent:
        """Decide from the start's headers, in one pass; the start to send now (held for a JSON body)."""
        self.status = start["status"]
        kept: list[tuple[bytes, bytes]] = []
        self._kept = kept  # the held start's headers, but Content-Length
        content_type = b""
        for name, value in start.get("headers", ()):  # one pass: the type, an encoding, the headers kept
            lowered = name.lower()
            if lowered == b"content-length":
                continue
            if lowered == b"content-type":
                content_type = bytes(value).lower()
            elif lowered == b"content-encoding":
                return start  # an encoded body: passed on untouched
            kept.append((name, value))
        if content_type.startswith(_JSON):
            self._start = start
        elif content_type.startswith(_SSE):
            self._sse = _SseBody(self.rewrite_message, once=len(self.targets) <= 1)
            return {**start, "headers": kept}
        return start

    def _whole_body(self, event: HTTPResponseBodyEvent) -> bytes | None:
        """The JSON body rewritten once complete; ``None`` while parts of it are still coming."""
        chunk = event.get("body", b"")
        if event.get("more_body", False):
            if self._buffer is None:
                self._buffer = bytearray()
            self._buffer += chunk
            return None
        if self._buffer:
            self._buffer += chunk
            chunk = bytes(self._buffer)
        try:
            only = self._echo_only
            if only is not None:
                key, session, echo, _, _, operation = only  # one unpacking: a field read is a descriptor call
                if operation is None and (at := leading_splice_point(chunk, key, echo.meta_key)) is not None:
                    return _spliced(chunk, at, session, echo)  # the usual answer: its bytes say where the echo goes
            try:  # the app's own JSON: the fast parser, else loads() (a BOM, UTF-16, a lone surrogate, not JSON)
                parsed = fast_loads(chunk)
            except (ValueError, RecursionError):
                parsed = jsonrpc.loads(chunk)
            rewritten = self.rewrite_message(chunk, parsed) if type(parsed) is dict else self.rewrite(chunk, parsed)
        except Exception:  # never let a rewriting bug break a response
            logger.exception("could not add session metadata to a response")
            rewritten = None
        return chunk if rewritten is None else rewritten

    def rewrite(self, raw: bytes, parsed: Any) -> bytes | None:
        """The new bytes of a response body (one message or a batch), or None when unchanged."""
        if isinstance(parsed, dict):
            return self.rewrite_message(raw, parsed)
        if type(parsed) is list:
            changed = False
            for element in parsed:
                if isinstance(element, dict) and (target := self.target_of(element)) is not None:
                    changed = annotate(target, element) is not None or changed
            return jsonrpc.dumps(parsed) if changed else None
        return None

    def rewrite_message(self, raw: bytes, message: dict[str, object]) -> bytes | None:
        """The new bytes of one response message, or None when it stays as it is.

        When only the echo is added and the bytes end the way a compact
        serializer ends them, the echo is spliced into the original bytes
        instead of serializing the whole message again.
        """
        only = self._echo_only
        if only is not None:  # the usual response: spliced when it answers the request and the bytes allow it
            key, session, echo, _, _, operation = only  # one unpacking: a field read is a descriptor call
            request_id = message.get("id")
            # An int id, the usual, is its own key; notifications and server requests have a method.
            if (
                "method" not in message
                and (request_id == key if type(request_id) is int else hashable_id(request_id) == key)
                and (at := splice_point(raw, message, echo.meta_key)) is not None
            ):
                if operation is not None:
                    operation.observe_result(message["result"])  # type: ignore[arg-type]  # an object
                return _spliced(raw, at, session, echo)
        target = self.target_of(message)
        if target is None:
            return None  # notifications, server requests, other ids: nothing to look at
        form = target.profile.echo
        splice = (
            splice_point(raw, message, form.meta_key) if target.session is not None and isinstance(form, Echo) else None
        )
        change = annotate(target, message)
        if change is None:
            return None
        if change is CHANGED or splice is None:
            return jsonrpc.dumps(message)
        assert isinstance(change, bytes)
        position, opener, closer = splice
        return b"".join((raw[:position], opener, change, closer, raw[position:]))

    def target_of(self, message: dict[str, object]) -> Target | None:
        """What the response ``message`` gains: ``None`` when it answers no request this rewriter watches."""
        if "method" in message:
            return None
        key = hashable_id(message.get("id"))
        target = self.targets.get(key)
        if target is None and (only := self._echo_only) is not None and only.key == key:
            target = self.targets[key] = only.target()  # bytes a splice could not take: the general change
        return target


def _spliced(raw: bytes, at: tuple[int, bytes, bytes], session: Session, echo: Echo) -> bytes:
    """``raw`` with ``session``'s echo where the splice point ``at`` says: its position, opener and closer."""
    echoed = echo.to_json(session.token, session.state_token, iso(int(session.expires_at_timestamp)))
    position, opener, closer = at
    return b"".join((raw[:position], opener, echoed, closer, raw[position:]))

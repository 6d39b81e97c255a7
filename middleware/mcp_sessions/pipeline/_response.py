"""The response rewriter: chosen at ``http.response.start``, JSON buffered, SSE event by event.

``application/json`` bodies are one message: buffered, rewritten, sent with a
new ``Content-Length``. ``text/event-stream`` is rewritten as it flows, never
held back. Anything else, and anything encoded, passes through untouched.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from starlette.types import Message

from ..profiles import Echo
from ..wire import iso, jsonrpc
from ..wire.jsonrpc import hashable_id
from ..wire.sse import SSERewriter
from ._echo import CHANGED, Target, annotate, splice_point

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


class _Messages:
    """Rewrites the JSON-RPC messages of one response, by the targets of their request ids."""

    __slots__ = ("_echo_only", "targets")

    def __init__(self, targets: dict[Any, Target]) -> None:
        self.targets = targets
        # The usual response: to one request, in a data-layer session, gaining the echo and nothing else.
        self._echo_only: tuple[Any, Session, Echo] | None = None
        if len(targets) == 1:
            ((key, target),) = targets.items()
            echo = target.profile.echo
            if target.echo_only and target.session is not None and isinstance(echo, Echo):
                self._echo_only = (key, target.session, echo)

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

    def rewrite_message(self, raw: bytes, message: dict[str, Any]) -> bytes | None:
        """The new bytes of one response message, or None when it stays as it is.

        When only the echo is added and the bytes end the way a compact
        serializer ends them, the echo is spliced into the original bytes
        instead of serializing the whole message again.
        """
        echo_only = self._echo_only
        if echo_only is not None and (spliced := _answer_spliced(raw, message, *echo_only)) is not None:
            return spliced
        target = self.target_of(message)
        if target is None:
            return None  # notifications, server requests, other ids: nothing to look at
        echo = target.profile.echo
        splice = (
            splice_point(raw, message, echo.meta_key) if target.session is not None and isinstance(echo, Echo) else None
        )
        change = annotate(target, message)
        if change is None:
            return None
        if change is CHANGED or splice is None:
            return jsonrpc.dumps(message)
        assert isinstance(change, bytes)
        position, opener, closer = splice
        return b"".join((raw[:position], opener, change, closer, raw[position:]))

    def target_of(self, message: dict[str, Any]) -> Target | None:
        if "method" in message:
            return None
        return self.targets.get(hashable_id(message.get("id")))


def _answer_spliced(raw: bytes, message: dict[str, Any], key: Any, session: Session, echo: Echo) -> bytes | None:
    """``raw`` with ``session``'s echo spliced in, when ``message`` answers request ``key`` and the bytes
    allow it (see :func:`splice_point`); ``None`` otherwise."""
    if "method" in message or hashable_id(message.get("id")) != key:
        return None  # notifications, server requests, other ids
    at = splice_point(raw, message, echo.meta_key)
    if at is None:
        return None
    echoed = echo.to_json(session.token, session.state_token, iso(int(session.expires_at_timestamp)))
    return b"".join((raw[: at[0]], at[1], echoed, at[2], raw[at[0] :]))


def _content_type(start: HTTPResponseStartEvent) -> bytes | None:
    """The response's content type, lower-cased (``b""`` without one); ``None`` for an encoded body."""
    content_type = b""
    for name, value in start.get("headers", ()):
        name = name.lower()
        if name == b"content-type":
            content_type = bytes(value).lower()
        elif name == b"content-encoding":
            return None
    return content_type


async def _send_whole(send: ASGISendCallable, start: HTTPResponseStartEvent, body: bytes) -> None:
    """Send a buffered response: its start with the new ``Content-Length``, then the body."""
    headers = [(n, v) for n, v in start.get("headers", ()) if n.lower() != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    new_start: HTTPResponseStartEvent = {**start, "headers": headers}
    await send(new_start)
    end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": body, "more_body": False}
    await send(end)


class _JsonBody:
    """A buffered ``application/json`` body, rewritten once complete."""

    __slots__ = ("_buffer", "_send", "_start", "_targets")

    def __init__(self, send: ASGISendCallable, start: HTTPResponseStartEvent, targets: dict[Any, Target]) -> None:
        self._send = send
        self._start = start
        self._targets = targets
        self._buffer: bytearray | None = None

    async def body(self, message: HTTPResponseBodyEvent) -> None:
        chunk = message.get("body", b"")
        if message.get("more_body", False):
            if self._buffer is None:
                self._buffer = bytearray()
            self._buffer += chunk
            return
        if self._buffer:
            self._buffer += chunk
            chunk = bytes(self._buffer)
        try:
            body = self._rewritten(chunk)
        except Exception:  # never let a rewriting bug break a response
            logger.exception("could not add session metadata to a response")
            body = chunk
        await _send_whole(self._send, self._start, body)

    def _rewritten(self, raw: bytes) -> bytes:
        rewritten = _Messages(self._targets).rewrite(raw, jsonrpc.loads(raw))
        return raw if rewritten is None else rewritten


class _SseBody:
    """A ``text/event-stream`` body, rewritten event by event as it flows."""

    __slots__ = ("_messages", "_sse", "feed")

    def __init__(self, messages: _Messages) -> None:
        self._messages = messages
        # Only an event with an "id" member (or an escape that could spell one) can answer a request,
        # and never one whose message has a "method" (as servers write notifications: jsonrpc, then method).
        self._sse = SSERewriter(
            self._rewrite_event,
            once=len(messages.targets) == 1,
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
            if isinstance(parsed, dict) and (rewritten := self._messages.rewrite_message(raw, parsed)) is not None:
                return rewritten.decode()
        except Exception:
            logger.exception("could not add session metadata to an event")
        return None


class ResponseRewriter:
    """Rewrites and observes the responses to one HTTP request; ``send`` is its ASGI send."""

    __slots__ = ("_json", "_send", "_sse", "_targets", "status")

    def __init__(self, send: ASGISendCallable, targets: dict[Any, Target]) -> None:
        self._send = send
        self._targets = targets
        self._json: _JsonBody | None = None
        self._sse: _SseBody | None = None
        self.status = 0

    @property
    def stream(self) -> _SseBody | None:
        """The event stream being rewritten, once the response's start said it is one."""
        return self._sse

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
            if (json_body := self._json) is not None:
                return await json_body.body(event)
        elif event["type"] == "http.response.start":
            return await self._start(event)
        await self._send(event)  # trailers, pushes, disconnects, an unrewritten body: untouched

    async def _start(self, message: HTTPResponseStartEvent) -> None:
        self.status = message["status"]
        content_type = _content_type(message)
        if content_type is None:
            pass  # an encoded body: passed on untouched
        elif content_type.startswith(_JSON):
            self._json = _JsonBody(self._send, message, self._targets)
            return
        elif content_type.startswith(_SSE):
            self._sse = _SseBody(_Messages(self._targets))
            message = {
                **message,
                "headers": [(n, v) for n, v in message.get("headers", ()) if n.lower() != b"content-length"],
            }
        await self._send(message)

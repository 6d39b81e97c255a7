"""The response rewriter: chosen at ``http.response.start``, JSON buffered, SSE event by event.

``application/json`` bodies are one message: buffered, rewritten, sent with a
new ``Content-Length``. ``text/event-stream`` is rewritten as it flows, never
held back. Anything else, and anything encoded, passes through untouched.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from starlette.types import Message

from . import _jsonrpc as jsonrpc
from ._echo import CHANGED, Target, annotate, hashable_id, splice_point
from ._jsonrpc import fast_loads
from ._service import iso
from ._sse import SSERewriter
from .profiles import Echo

if TYPE_CHECKING:
    from asgiref.typing import ASGISendCallable, ASGISendEvent, HTTPResponseBodyEvent, HTTPResponseStartEvent

__all__ = ["ResponseRewriter"]

logger = logging.getLogger("mcp_sessions")

_JSON: Final = b"application/json"
_SSE: Final = b"text/event-stream"


class _Messages:
    """Rewrites the JSON-RPC messages of one response, by the targets of their request ids."""

    __slots__ = ("_echo_only", "targets")

    def __init__(self, targets: dict[Any, Target]) -> None:
        self.targets = targets
        # The usual response: to one request, in a data-layer session, gaining the echo and nothing else.
        self._echo_only: tuple[Any, Target, Echo] | None = None
        if len(targets) == 1:
            ((key, target),) = targets.items()
            echo = target.profile.echo
            if target.echo_only and isinstance(echo, Echo):
                self._echo_only = (key, target, echo)

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
        if echo_only is not None:
            key, only, only_echo = echo_only
            if "method" in message or hashable_id(message.get("id")) != key:
                return None  # notifications, server requests, other ids: nothing to look at
            if (at := splice_point(raw, message, only_echo.meta_key)) is not None:
                session = only.session
                assert session is not None
                expires = iso(int(session.expires_at_timestamp))
                echoed = only_echo.to_json(session.token, session.state_token, expires)
                return b"".join((raw[: at[0]], at[1], echoed, at[2], raw[at[0] :]))
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


class _JsonBody:
    """A buffered ``application/json`` body, rewritten once complete."""

    __slots__ = ("_buffer", "_messages", "_send", "_start")

    def __init__(self, send: ASGISendCallable, start: HTTPResponseStartEvent, messages: _Messages) -> None:
        self._send = send
        self._start = start
        self._messages = messages
        self._buffer = bytearray()

    async def body(self, message: HTTPResponseBodyEvent) -> None:
        chunk = message.get("body", b"")
        if message.get("more_body", False):
            self._buffer += chunk
            return
        if self._buffer:
            self._buffer += chunk
            chunk = bytes(self._buffer)
        body = chunk
        try:
            try:
                # A compact UTF-8 object, as servers send: the fast parser reads it as the standard one does.
                parsed = fast_loads(chunk) if chunk[:1] == b"{" else jsonrpc.loads(chunk)
            except ValueError:
                parsed = jsonrpc.loads(chunk)
            rewritten = self._messages.rewrite(chunk, parsed)
            if rewritten is not None:
                body = rewritten
        except Exception:  # never let a rewriting bug break a response
            logger.exception("could not add session metadata to a response")
        headers = [(n, v) for n, v in self._start.get("headers", ()) if n.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        start: HTTPResponseStartEvent = {**self._start, "headers": headers}
        await self._send(start)
        end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": body, "more_body": False}
        await self._send(end)


class _SseBody:
    """A ``text/event-stream`` body, rewritten event by event as it flows."""

    __slots__ = ("_messages", "_send", "_sse")

    def __init__(self, send: ASGISendCallable, messages: _Messages) -> None:
        self._send = send
        self._messages = messages
        # Only an event with an "id" member (or an escape that could spell one) can answer a request.
        self._sse = SSERewriter(self._rewrite_event, once=len(messages.targets) == 1, needles=(b'"id"', b"\\"))

    async def body(self, message: HTTPResponseBodyEvent) -> None:
        more = message.get("more_body", False)
        body = message.get("body", b"")
        chunk = self._sse.feed(body)
        if not more:
            chunk += self._sse.flush()
        if chunk is body:
            return await self._send(message)  # passed on as it came: the app's own message
        event: HTTPResponseBodyEvent = {"type": "http.response.body", "body": chunk, "more_body": more}
        await self._send(event)

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

    __slots__ = ("_body", "_messages", "_send", "status")

    def __init__(self, send: ASGISendCallable, targets: dict[Any, Target]) -> None:
        self._send = send
        self._messages = _Messages(targets)
        self._body: _JsonBody | _SseBody | None = None
        self.status = 0

    async def send(self, message: Message) -> None:
        """The ``send`` the app gets: response events are read as the typed ASGI events they are."""
        event: ASGISendEvent = message  # type: ignore[assignment]  # an annotation, not a call
        if event["type"] == "http.response.start":
            await self._start(event)
        elif event["type"] == "http.response.body" and self._body is not None:
            await self._body.body(event)
        else:
            await self._send(event)  # trailers, pushes, disconnects: untouched

    async def _start(self, message: HTTPResponseStartEvent) -> None:
        self.status = message["status"]
        content_type = b""
        encoded = False
        for name, value in message.get("headers", ()):
            name = name.lower()
            if name == b"content-type":
                content_type = bytes(value).lower()
            elif name == b"content-encoding":
                encoded = True
        if not encoded and content_type.startswith(_JSON):
            self._body = _JsonBody(self._send, message, self._messages)
            return
        if not encoded and content_type.startswith(_SSE):
            self._body = _SseBody(self._send, self._messages)
            message = {
                **message,
                "headers": [(n, v) for n, v in message.get("headers", ()) if n.lower() != b"content-length"],
            }
        await self._send(message)

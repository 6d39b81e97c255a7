"""The response rewriter: chosen at ``http.response.start``, JSON buffered, SSE event by event."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from starlette.types import Message

from .._wire import jsonrpc
from .._wire.jsonrpc import hashable_id
from .._wire.sse import SSERewriter
from ._echo import Target, annotate, rewritten

if TYPE_CHECKING:
    from asgiref.typing import ASGISendCallable, ASGISendEvent, HTTPResponseBodyEvent, HTTPResponseStartEvent


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


class ResponseRewriter:
    """Rewrites and observes the responses to one HTTP request; ``send`` is its ASGI send.

    Decides at ``http.response.start``: an ``application/json`` body is held (its start too) until it is
    complete, then rewritten and sent with a new ``Content-Length``; an event stream is rewritten event by
    event as it flows; anything else, and anything encoded, passes untouched.
    """

    __slots__ = ("_headers", "_parts", "_send", "_sse", "_start", "status", "targets")

    def __init__(self, send: ASGISendCallable, targets: dict[Any, Target]) -> None:
        self._send = send
        self.targets = targets
        """What each response gains, by request id."""
        self._start: HTTPResponseStartEvent | None = None  # a JSON response's, held for its body
        self._headers: list[tuple[bytes, bytes]] = []  # the start's, but Content-Length
        self._parts: list[bytes] = []
        self._sse: SSERewriter | None = None
        self.status = 0
        """The response's status, once it has started."""

    async def send(self, message: Message) -> None:
        """The ``send`` the app gets: response events are read as the typed ASGI events they are."""
        event: ASGISendEvent = message  # type: ignore[assignment]  # an annotation, not a call
        if event["type"] == "http.response.body":
            if (sse := self._sse) is not None:
                body, more = event.get("body", b""), event.get("more_body", False)
                chunk = sse.feed(body)
                if not more:
                    chunk += sse.flush()
                if chunk is not body:  # else the app's own message goes on
                    event = {"type": "http.response.body", "body": chunk, "more_body": more}
                return await self._send(event)
            if (start := self._start) is not None:
                if (whole := self._whole_body(event)) is not None:  # the body is complete: both go out
                    self._start = None  # anything after the last body passes untouched
                    self._headers.append((b"content-length", str(len(whole)).encode()))
                    await self._send({**start, "headers": self._headers})
                    await self._send({"type": "http.response.body", "body": whole, "more_body": False})
                return None
        elif event["type"] == "http.response.start":
            event = self._begin(event)
            if self._start is not None:
                return None  # a JSON response: its start is held until its body is complete
        await self._send(event)  # trailers, pushes, disconnects, an unrewritten body: untouched

    def _begin(self, start: HTTPResponseStartEvent) -> HTTPResponseStartEvent:
        """Decide from the start's headers, in one pass; the start to send now (held for a JSON body)."""
        self.status = start["status"]
        kept = self._headers
        content_type = b""
        for name, value in start.get("headers", ()):
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
            # Only an event with an "id" member (or an escape that could spell one) can answer a request,
            # and never one whose message has a "method" (as servers write notifications: jsonrpc, then method).
            self._sse = SSERewriter(
                self._rewrite_event,
                once=len(self.targets) <= 1,
                needles=(b'"id"', b"\\"),
                openings=_NOTIFICATION_EVENTS,
            )
            return {**start, "headers": kept}
        return start

    def _rewrite_event(self, data: str) -> str | None:
        try:
            raw = data.encode()
            parsed = jsonrpc.loads(raw)
            if isinstance(parsed, dict) and (new := self._rewrite_message(raw, parsed)) is not None:
                return new.decode()
        except Exception:
            logger.exception("could not add session metadata to an event")
        return None

    def _whole_body(self, event: HTTPResponseBodyEvent) -> bytes | None:
        """The JSON body rewritten once complete; ``None`` while parts of it are still coming."""
        body = event.get("body", b"")
        more = event.get("more_body", False)
        if more or self._parts:
            self._parts.append(body)
            if more:
                return None
            body = b"".join(self._parts)
        try:
            new = self._rewrite_body(body, jsonrpc.loads(body))
        except Exception:  # never let a rewriting bug break a response
            logger.exception("could not add session metadata to a response")
            new = None
        return body if new is None else new

    def _rewrite_body(self, raw: bytes, parsed: Any) -> bytes | None:
        """The new bytes of a response body (one message or a batch), or ``None`` when unchanged."""
        if isinstance(parsed, dict):
            return self._rewrite_message(raw, parsed)
        if isinstance(parsed, list):
            changed = False
            for element in parsed:
                if isinstance(element, dict) and (target := self._target_of(element)) is not None:
                    changed = annotate(target, element) or changed
            return jsonrpc.dumps(parsed) if changed else None
        return None

    def _rewrite_message(self, raw: bytes, message: dict[str, object]) -> bytes | None:
        target = self._target_of(message)
        return None if target is None else rewritten(target, raw, message)

    def _target_of(self, message: dict[str, object]) -> Target | None:
        """What ``message`` gains: ``None`` for notifications, server requests and other requests' answers."""
        return None if "method" in message else self.targets.get(hashable_id(message.get("id")))

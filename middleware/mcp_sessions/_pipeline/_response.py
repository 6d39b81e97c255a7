"""The response rewriter: chosen at ``http.response.start``, JSON buffered, SSE event by event.

What it holds is bounded (``max_response_size``): a JSON body is counted as it arrives, and so is an event
still arriving. Past the bound the client gets a JSON-RPC error (``-32603``) for the request the response
answers, in place of the answer (HTTP 502) or of the event (an event stream ends with it), and the app's
next ``send`` raises :class:`ResponseTooLarge`, an ``OSError`` as a closed connection's, so that the app
stops: the gateway's proxy then closes the upstream connection.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from starlette.types import Message

from .._wire import jsonrpc
from .._wire.jsonrpc import hashable_id
from .._wire.protocol import INTERNAL_ERROR
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


DEFAULT_MAX_RESPONSE_SIZE: Final = 8 * 1024 * 1024
"""The most the middleware holds of one answer by default (``max_response_size``): twice ``max_body_size``.

More text than any model's context window takes (a million tokens is about 4 MiB), and room for a 5 MB image
(the common limit of model APIs) base64-encoded in a tool result or a resource.
"""


class ResponseTooLarge(OSError):
    """The app's answer passed ``max_response_size``: the client has had an error instead, and takes no more."""


class ResponseRewriter:
    """Rewrites and observes the responses to one HTTP request; ``send`` is its ASGI send.

    Decides at ``http.response.start``: an ``application/json`` body is held (its start too) until it is
    complete, then rewritten and sent with a new ``Content-Length``; an event stream is rewritten event by
    event as it flows; anything else, and anything encoded, passes untouched. Past ``limit`` bytes held,
    the answer is refused (see the module); ``request_id`` is the id its error carries (``None``: a batch).
    """

    __slots__ = (
        "_headers",
        "_held",
        "_limit",
        "_parts",
        "_request_id",
        "_send",
        "_sse",
        "_start",
        "refused",
        "status",
        "targets",
    )

    def __init__(
        self,
        send: ASGISendCallable,
        targets: dict[Any, Target],
        *,
        limit: int = DEFAULT_MAX_RESPONSE_SIZE,
        request_id: object = None,
    ) -> None:
        self._send = send
        self.targets = targets
        """What each response gains, by request id."""
        self._limit = limit
        self._request_id = jsonrpc.echoable_id(request_id)
        self._held = 0
        self._start: HTTPResponseStartEvent | None = None  # a JSON response's, held for its body
        self._headers: list[tuple[bytes, bytes]] = []  # the start's, but Content-Length
        self._parts: list[bytes] = []
        self._sse: SSERewriter | None = None
        self.status = 0
        """The response's status, once it has started (502 once refused as too large)."""
        self.refused = False
        """Whether the answer was refused as too large (what the app raises after is its reaction to that)."""

    async def send(self, message: Message) -> None:
        """The ``send`` the app gets: response events are read as the typed ASGI events they are."""
        event: ASGISendEvent = message  # type: ignore[assignment]  # an annotation, not a call
        if self.refused:
            raise ResponseTooLarge(f"the response passed max_response_size ({self._limit} bytes)")
        if event["type"] == "http.response.body":
            if (sse := self._sse) is not None:
                body, more = event.get("body", b""), event.get("more_body", False)
                chunk = sse.feed(body)
                if sse.overflowed:
                    return await self._refuse(chunk + b"event: message\ndata: " + self._error() + b"\n\n")
                if not more:
                    chunk += sse.flush()
                if chunk is not body:  # else the app's own message goes on
                    event = {"type": "http.response.body", "body": chunk, "more_body": more}
                return await self._send(event)
            if (start := self._start) is not None:
                self._held += len(event.get("body", b""))  # counted as it arrives, before it is held
                if self._held > self._limit:
                    return await self._refuse(None)
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
                max_event=self._limit,
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

    def _error(self) -> bytes:
        """The JSON-RPC error that stands for an answer too large to hold."""
        error = {"code": INTERNAL_ERROR, "message": f"Response too large (limit {self._limit} bytes)"}
        return jsonrpc.dumps({"jsonrpc": "2.0", "id": self._request_id, "error": error})

    async def _refuse(self, last: bytes | None) -> None:
        """End the response with the error (``last``: an event stream's last bytes; else a 502 of its own), then
        stop the app."""
        self.refused, self._parts = True, []
        logger.warning("a response passed max_response_size (%d bytes): refused", self._limit)
        if last is None:
            self.status = 502
            body = self._error()
            headers = [(b"content-type", _JSON), (b"content-length", str(len(body)).encode())]
            await self._send({"type": "http.response.start", "status": 502, "headers": headers, "trailers": False})
        else:
            body = last
        await self._send({"type": "http.response.body", "body": body, "more_body": False})
        raise ResponseTooLarge(f"the response passed max_response_size ({self._limit} bytes)")

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

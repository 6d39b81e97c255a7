"""The response rewriter: chosen at ``http.response.start``, JSON buffered, SSE event by event; and what a
response to a request in a session gains (the echo, the capability), and where (:func:`annotate`, pure).

What it holds is bounded (``max_response_size``): a JSON body is counted as it arrives, and so is an event
still arriving. Past the bound the client gets a JSON-RPC error (``-32603``) for the request the response
answers, in place of the answer (HTTP 502) or of the event (an event stream ends with it), and the app's
next ``send`` raises :class:`ResponseTooLarge`, an ``OSError`` as a closed connection's, so that the app
stops: the gateway's proxy then closes the upstream connection.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from starlette.types import Message, Send

from .._wire import iso, jsonrpc
from .._wire.jsonrpc import hashable_id
from .._wire.protocol import INTERNAL_ERROR
from .._wire.sse import SSERewriter
from ..profiles import ADVERTISING_METHODS, Era

if TYPE_CHECKING:
    from .._otel import Operation
    from .._session import Session
    from ..profiles import WireProfile

logger = logging.getLogger("mcp_sessions")


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
    event as it flows; anything else, and anything encoded, passes untouched (the request asked for no
    coding: :func:`uncoded`). Past ``limit`` bytes held, the answer is refused (see the module);
    ``request_id`` is the id its error carries (``None``: a batch).
    """

    def __init__(
        self,
        send: Send,
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
        self._start: Message | None = None  # a JSON response's, held for its body
        self._body = bytearray()
        self._sse: SSERewriter | None = None
        self.status = 0
        """The response's status, once it has started (502 once refused as too large)."""
        self.refused = False
        """Whether the answer was refused as too large (what the app raises after is its reaction to that)."""

    def send(self, message: Message) -> Awaitable[None]:
        """The ``send`` the app gets: what it returns, the app awaits (the downstream ``send`` of what ``message``
        becomes), so that no coroutine of the rewriter stands between the app and the client, as none of the
        pipeline's stands between the app and the event loop (:class:`~._forward.Exchange`)."""
        if self.refused:
            raise ResponseTooLarge(f"the response passed max_response_size ({self._limit} bytes)")
        kind = message["type"]
        if kind == "http.response.body":
            if (sse := self._sse) is not None:
                chunk = sse.feed(body := message.get("body", b""))
                if sse.overflowed:
                    return self._refuse(chunk + b"event: message\ndata: " + self._error() + b"\n\n")
                more = message.get("more_body", False)
                if not more:
                    chunk += sse.flush()
                if chunk is not body:  # else the app's message goes as it came
                    message = {"type": "http.response.body", "body": chunk, "more_body": more}
            elif (start := self._start) is not None:
                self._body += message.get("body", b"")  # counted as it arrives
                if len(self._body) > self._limit:
                    return self._refuse(None)
                if message.get("more_body", False):
                    return _held()
                self._start = None  # anything after the last body passes untouched
                body = bytes(self._body)
                return self._send_whole(start, self._rewritten(body) or body)
        elif kind == "http.response.start":
            self.status = message["status"]
            headers = {bytes(name).lower(): value for name, value in message.get("headers", ())}
            content_type = bytes(headers.get(b"content-type", b"")).lower()
            if b"content-encoding" in headers:
                pass  # an encoded body: passed on untouched
            elif content_type.startswith(b"application/json"):
                self._start = message
                return _held()  # until its body is complete
            elif content_type.startswith(b"text/event-stream"):
                self._sse = SSERewriter(self._rewrite_event, max_event=self._limit, skips=_no_answer)
                message = {**message, "headers": _without_length(message["headers"])}
        return self._send(message)  # trailers, pushes, disconnects, an unrewritten body: untouched

    async def _send_whole(self, start: Message, body: bytes) -> None:
        """A JSON answer held whole: its start, with the length of ``body``, then ``body``."""
        length = (b"content-length", str(len(body)).encode())
        await self._send({**start, "headers": [*_without_length(start.get("headers", ())), length]})
        await self._send({"type": "http.response.body", "body": body, "more_body": False})

    def _rewrite_event(self, data: str) -> str | None:
        new = self._rewritten(data)
        return None if new is None else new.decode()

    def _rewritten(self, body: bytes | str) -> bytes | None:
        """A response body (one message or a batch) with what each answer gains; ``None`` when unchanged."""
        try:
            parsed = jsonrpc.loads(body, answer=True)
            changed = False
            for message in parsed if isinstance(parsed, list) else [parsed]:
                if isinstance(message, dict) and (target := self._target_of(message)) is not None:
                    changed = annotate(target, message) or changed
            return jsonrpc.dumps(parsed) if changed else None
        except Exception:  # never let a rewriting bug break a response
            logger.exception("could not add session metadata to a response")
            return None

    def _target_of(self, message: dict[str, object]) -> Target | None:
        """What ``message`` gains: ``None`` for notifications, server requests and other requests' answers."""
        return None if "method" in message else self.targets.get(hashable_id(message.get("id")))

    def _error(self) -> bytes:
        """The JSON-RPC error that stands for an answer too large to hold."""
        error = {"code": INTERNAL_ERROR, "message": f"Response too large (limit {self._limit} bytes)"}
        return jsonrpc.dumps({"jsonrpc": "2.0", "id": self._request_id, "error": error})

    async def _refuse(self, last: bytes | None) -> None:
        """End the response with the error (``last``: an event stream's last bytes; else a 502 of its own), then
        stop the app."""
        self.refused = True
        self._body = bytearray()
        logger.warning("a response passed max_response_size (%d bytes): refused", self._limit)
        if last is None:
            self.status = 502
            body = self._error()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await self._send({"type": "http.response.start", "status": 502, "headers": headers, "trailers": False})
        else:
            body = last
        await self._send({"type": "http.response.body", "body": body, "more_body": False})
        raise ResponseTooLarge(f"the response passed max_response_size ({self._limit} bytes)")


# The name "id" as JSON writes it: each letter as itself or as its only escape (their hex digits have no case);
# without a backslash, only as itself.
_ID_NAME: Final = re.compile(rb'"(?:i|\\u0069)(?:d|\\u0064)"')
_PLAIN_ID_NAME: Final = re.compile(rb'"id"')
_BACKSLASH: Final = ord("\\")


def _no_answer(data: bytes) -> bool:
    """Whether ``data`` (an event's, or whole events') holds no answer: no ``id`` member, however it is written
    (a notification; a server's request has one, and is read). One pass over the bytes, and one for a backslash."""
    return (_ID_NAME if _BACKSLASH in data else _PLAIN_ID_NAME).search(data) is None


async def _held() -> None:
    """What the app awaits for a message the rewriter holds: nothing is sent yet."""


def uncoded(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """A request's ``headers`` with ``Accept-Encoding: identity`` in place of the client's: an answer the
    middleware reads must come uncoded (a coded one passes it unread)."""
    return [*(item for item in headers if item[0] != b"accept-encoding"), (b"accept-encoding", b"identity")]


def _without_length(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` but ``Content-Length``, in whatever case the app wrote its name."""
    return [(name, value) for name, value in headers if bytes(name).lower() != b"content-length"]


if TYPE_CHECKING:
    from .._otel import Operation
    from .._session import Session
    from ..profiles import WireProfile


@dataclass
class Target:
    """What to do with the response to one request id."""

    profile: WireProfile
    session: Session | None
    """The data-layer session whose echo the result carries."""
    advertised: tuple[WireProfile, ...]
    """The wires whose capability the result advertises."""
    capability: Mapping[str, Mapping[str, object]]
    """Each wire's capability value, by wire name."""
    era: Era
    operation: Operation | None


def advertising_tables(profiles: Sequence[WireProfile]) -> dict[Era, dict[str, tuple[WireProfile, ...]]]:
    """Era -> method -> the wires whose capability that method's result advertises."""
    return {
        era: {
            method: advertised
            for method in ADVERTISING_METHODS
            if (advertised := tuple(p for p in profiles if p.advertises(method, era)))
        }
        for era in Era
    }


def annotate(target: Target, message: dict[str, object]) -> bool:
    """Observe a response to ``target``'s request, add the echo and the capability to it; whether it changed."""
    result = message.get("result")
    operation = target.operation
    if not isinstance(result, dict):
        error = message.get("error")
        if operation is not None and isinstance(error, dict) and type(error.get("code")) is int:
            operation.fail(error["code"], str(error.get("message", "")))
        return False
    if operation is not None:
        operation.observe_result(result)  # a tool error, or tool and prompt names the server has
    changed = False
    session = target.session
    if session is not None:
        expires = iso(int(session.expires_at_timestamp))
        target.profile.echo.attach(result, session.token, session.state_token, expires)
        changed = True
    for profile in target.advertised:
        changed = advertise(result, profile, target.era, value=target.capability[profile.name]) or changed
    return changed


def advertise(result: dict[str, object], profile: WireProfile, era: Era, *, value: Mapping[str, object]) -> bool:
    """Merge the capability into a ``server/discover`` or ``initialize`` result; whether it changed."""
    capabilities = result.get("capabilities")
    if not isinstance(capabilities, dict):
        return False
    for path in profile.capability.places(era):
        node = capabilities
        for name in path[:-1]:
            child = node.get(name)
            if not isinstance(child, dict):
                child = node[name] = {}
            node = child
        node.setdefault(path[-1], dict(value))
    return True

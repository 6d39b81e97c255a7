"""The pack's HTTP: a careful client of a stranger, each answer bounded in bytes and time, never trusted.

Black-box, and a distribution of its own that imports nothing of the middleware's: the events of an
answer are found by :class:`~._events.EventReader` (the WHATWG grammar, lines ended by CRLF, LF or CR).
A redirect is what the server answered: the pack follows none, so neither
its ``--header`` credentials nor its requests' bodies (their session ids) go anywhere but to the
URL it was given. It asks for no content coding (``Accept-Encoding: identity``) and reads none: a
coded answer is refused unread, since gzip inflates a thousandfold a layer and httpx decodes a whole
network read at once, so a bound on the decoded bytes would come after the memory was spent. One
deadline covers each request from connect to the last byte read, headers included: a server that
drips its headers a byte at a time never trips a timeout between reads, and ends there. An answer
is read up to ``MAX_BODY`` bytes: JSON whole; an event stream event by event, and only until the
answer to the request has come (a server that keeps its stream open after it, or sends comments
forever, costs one event, not the stream). What is not a JSON-RPC object is left out.

httpx's client is asynchronous here, on an event loop of the link's own (an anyio blocking portal),
because a deadline over a whole request is a cancel scope; the checks call :meth:`Link.post` as a
plain function.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Final

from ._answers import EXCERPT_CHARS
from ._events import EventReader

if TYPE_CHECKING:
    import httpx
    from anyio.from_thread import BlockingPortal

TIMEOUT: Final = 10.0
"""Seconds to wait for a connection, or between two reads of an answer."""
DEADLINE: Final = 60.0
"""Seconds one request may take in all, from connect to its answer's last byte (``--request-timeout``)."""
MAX_BODY: Final = 1 << 20
"""The most bytes read of one answer: a session wire's answers are a few kilobytes."""
HEAD_BYTES: Final = 4 * EXCERPT_CHARS
"""The first bytes of an answer kept to show in an error message."""

Message = dict[str, object]


class ProbeError(Exception):
    """The server could not be asked at all (refused, timed out, redirected, an answer over the bounds)."""


def _objects(text: str | bytes) -> list[Message]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return []
    return [item for item in (value if isinstance(value, list) else [value]) if isinstance(item, dict)]


def is_answer(message: Message, request_id: object) -> bool:
    """Whether ``message`` is the response to the request ``request_id`` (its id, and no method)."""
    return "method" not in message and "id" in message and message["id"] == request_id


class Reading:
    """The body of one answer as it arrives; :meth:`feed` says when the request's answer is complete."""

    def __init__(self, sse: bool, request_id: object) -> None:
        self.sse, self.request_id = sse, request_id
        self.size = 0
        self.head = bytearray()
        """The first bytes of the body (``HEAD_BYTES`` at most)."""
        self.messages: list[Message] = []
        self._json = bytearray()
        self._events = EventReader() if sse else None
        self._answered = False

    def feed(self, chunk: bytes) -> bool:
        """Add ``chunk``; whether the answer to the request has arrived (the rest need not be read)."""
        self.size += len(chunk)
        self.head += chunk[: HEAD_BYTES - len(self.head)]
        if self._events is None:
            self._json += chunk
            return False
        for data in self._events.feed(chunk):
            self._event(data)
        return self._answered

    def finish(self) -> list[Message]:
        """Every message read, in order, once the body has ended (or the answer came)."""
        if self._events is not None and not self._answered:
            for data in self._events.feed(b"\n\n"):  # an event the stream left unfinished is read too
                self._event(data)
        elif self._json:
            self.messages = _objects(bytes(self._json))
        return self.messages

    def _event(self, data: str) -> None:
        found = _objects(data)
        self.messages += found
        self._answered = self._answered or any(is_answer(message, self.request_id) for message in found)


@dataclass(frozen=True)
class Answer:
    """The answer to one POST: status, headers (lower-case names, first value), messages, the body's start."""

    status: int
    headers: Mapping[str, str]
    messages: tuple[Message, ...]
    sse: bool
    head: bytes


class Link:
    """The pack's connection to one server: POSTs, each bounded by ``deadline`` seconds and ``MAX_BODY`` bytes."""

    def __init__(self, deadline: float = DEADLINE) -> None:
        self.deadline = deadline
        self._stack = ExitStack()
        self._portal: BlockingPortal | None = None
        self._http: httpx.AsyncClient | None = None

    def __enter__(self) -> Link:
        import httpx
        from anyio.from_thread import start_blocking_portal

        self._portal = self._stack.enter_context(start_blocking_portal())
        self._http = httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False, headers={"Accept-Encoding": "identity"})
        self._stack.callback(self._portal.call, self._http.aclose)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stack.close()

    def post(self, url: str, content: bytes, headers: Mapping[str, str], request_id: object) -> Answer:
        """POST ``content`` to ``url`` and read its answer; :class:`ProbeError` when there is none within the bounds."""
        if self._portal is None:
            raise RuntimeError("a Link posts only inside its 'with' block")
        return self._portal.call(self._post, url, content, headers, request_id)

    async def _post(self, url: str, content: bytes, headers: Mapping[str, str], request_id: object) -> Answer:
        import anyio
        import httpx

        assert self._http is not None
        try:
            with anyio.fail_after(self.deadline):
                async with self._http.stream("POST", url, content=content, headers=headers) as reply:
                    return await _read(reply, request_id)
        except TimeoutError:
            raise ProbeError(f"no whole answer within {self.deadline:g} s") from None
        except httpx.HTTPError as exc:
            raise ProbeError(f"{type(exc).__name__}: {exc}") from None


async def _read(reply: httpx.Response, request_id: object) -> Answer:
    """The answer ``reply`` streams, unless it is a redirect, coded, or over ``MAX_BODY`` bytes."""
    status, location = reply.status_code, reply.headers.get("location")
    if 300 <= status < 400 and location is not None:
        raise ProbeError(f"HTTP {status}, a redirect to {location}: the pack follows none (is that the server's URL?)")
    coding = reply.headers.get("content-encoding", "").strip().lower()
    if coding not in ("", "identity"):
        raise ProbeError(f"HTTP {status}, an answer coded '{coding}': the pack asks for none and reads none")
    media = reply.headers.get("content-type", "").split(";")[0].strip().lower()
    reading = Reading(media == "text/event-stream", request_id)
    async for chunk in reply.aiter_raw():
        if reading.size + len(chunk) > MAX_BODY:
            raise ProbeError(f"HTTP {status}, an answer over {MAX_BODY} bytes with no answer to the request")
        if reading.feed(chunk):
            break
    headers = {name.lower(): value for name, value in reversed(reply.headers.multi_items())}
    return Answer(status, headers, tuple(reading.finish()), reading.sse, bytes(reading.head))

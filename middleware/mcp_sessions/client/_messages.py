"""What the client sends and what it reads back: the caller's POST with the held session stamped in, the
client's own requests, and the server's answers (decoded bodies, JSON-RPC messages, failures, ``Retry-After``).

No I/O beyond reading a response's stream, and no HTTP library: :class:`OutgoingPost` is the request as the
caller sent it (kept whole, because a retry sends it again); :func:`stamp` builds the body and headers of one
attempt and records which session each request named, so that an answer can be matched to the session it
concerns. :class:`Endpoint` is where and how the client sends its own ``sessions/create`` and
``sessions/delete``. Bodies are decoded for observing only, within :data:`MAX_DECODED` bytes a chunk: the
caller always gets the bytes as they came.
"""

from __future__ import annotations

import email.utils
import logging
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Generic, Protocol, TypeVar, cast

from .._wire import jsonrpc
from .._wire.protocol import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, SESSION_STORE_UNAVAILABLE
from .._wire.sse import SSERewriter
from ..profiles import DRAFT, Era, SessionCarrier

logger = logging.getLogger("mcp_sessions.client")

_DECODABLE: Final = frozenset({"gzip", "x-gzip", "deflate", "identity"})
MAX_DECODED: Final = 1 << 24
"""The most bytes the client decodes of one chunk of an answer (16 MiB): a small coded body can expand
without limit, and the client decodes only to observe."""
MAX_OWN_ANSWER: Final = 1 << 20
"""The most bytes the client reads of an answer to a request of its own (1 MiB): a ``sessions/create``
result is a few hundred."""


class SessionError(Exception):
    """A session operation the server refused, or a server without sessions.

    ``code`` is the JSON-RPC error code (``-32601`` when the server does not know
    ``sessions/create``), ``message`` the server's message and ``data`` its
    ``data``. The string form never contains ``data``: for ``-32043`` it repeats
    the session id, a bearer secret.
    """

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data


class HeadersLike(Protocol):
    """What the client reads of a request's or a response's headers."""

    def get(self, key: str, /) -> str | None: ...
    def multi_items(self) -> list[tuple[str, str]]: ...


class ResponseLike(Protocol):
    """What the client reads of a response (``httpx.Response`` and ``httpx2.Response`` alike)."""

    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> HeadersLike: ...
    # Both libraries type a response's stream as sync or async; a transport's responses (the only ones
    # read here) always carry an async one. A protocol for the async stream would not match the union.
    @property
    def stream(self) -> Any: ...
    @property
    def extensions(self) -> Mapping[str, object]: ...


def decodable_encodings(value: str) -> str:
    """``Accept-Encoding`` cut to what :class:`Inflater` reads (gzip, deflate): never br or zstd."""
    kept = [item.strip() for item in value.split(",") if item.split(";")[0].strip().lower() in _DECODABLE]
    return ", ".join(kept) or "identity"


class Inflater:
    """Decodes a ``Content-Encoding`` chunk by chunk, at most :data:`MAX_DECODED` bytes of one chunk.

    An encoding it cannot read yields nothing; a chunk that decodes to more raises :class:`AnswerTooLarge`.
    """

    def __init__(self, encoding: str | None) -> None:
        name = (encoding or "identity").strip().lower()
        self._raw_deflate_next = name == "deflate"  # some servers send deflate without the zlib wrapper
        self._readable = name in _DECODABLE
        self._decoder: zlib._Decompress | None = None
        if name in ("gzip", "x-gzip", "deflate"):
            self._decoder = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib, by the header
        elif not self._readable:
            logger.debug("cannot read a %r response: the session echo is not observed", name)

    def __call__(self, chunk: bytes) -> bytes:
        if not self._readable:
            return b""
        if self._decoder is None:
            return chunk
        try:
            decoded: bytes = self._decoder.decompress(chunk, MAX_DECODED)
        except zlib.error:
            if self._raw_deflate_next:
                self._raw_deflate_next = False
                self._decoder = zlib.decompressobj(-zlib.MAX_WBITS)
                return self(chunk)
            self._readable = False
            return b""
        if self._decoder.unconsumed_tail:
            raise AnswerTooLarge(f"a chunk of the server's answer decodes to over {MAX_DECODED} bytes")
        return decoded


class AnswerTooLarge(SessionError):
    """An answer, or one chunk of it decoded, over the bytes the client reads of it."""

    def __init__(self, message: str) -> None:
        super().__init__(INTERNAL_ERROR, message)


async def read_all(response: ResponseLike, limit: int) -> bytes:
    """The whole body of ``response``, its stream closed; :class:`AnswerTooLarge` past ``limit`` bytes."""
    body = bytearray()
    try:
        async for chunk in response.stream:
            body += chunk
            if len(body) > limit:
                raise AnswerTooLarge(f"the server's answer is over {limit} bytes")
    finally:
        await response.stream.aclose()
    return bytes(body)


def body_messages(response: ResponseLike, raw: bytes) -> list[object]:
    """The JSON messages of a whole body, by its type: a JSON message or batch, or the events of an SSE stream."""
    content_type = str(response.headers.get("content-type") or "").lower()
    body = Inflater(response.headers.get("content-encoding"))(raw)
    if content_type.startswith("application/json"):
        parsed = jsonrpc.loads(body)
        if isinstance(parsed, list):
            return parsed
        return [parsed] if isinstance(parsed, dict) else []
    found: list[object] = []
    if content_type.startswith("text/event-stream"):

        def collect(data: str) -> None:
            parsed = jsonrpc.loads(data.encode())
            if parsed is not None:
                found.append(parsed)

        SSERewriter(collect).feed(body)
    return found


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    text = value.strip() if isinstance(value, str) else ""
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


@dataclass
class Failure:
    """A refused ``sessions/create`` or ``sessions/delete``, as the server answered it."""

    code: int
    message: str
    data: object = None
    status: int = 200
    retry_after: str | None = None

    def error(self) -> SessionError:
        """The exception the explicit API raises for this failure."""
        return SessionError(self.code, self.message, self.data)


def failure_of(reply: dict[str, object] | None, response: ResponseLike) -> Failure:
    """The failure an answer means: its JSON-RPC error, or one the HTTP status implies."""
    status, wait = response.status_code, response.headers.get("retry-after")
    error = reply.get("error") if reply is not None else None
    code = jsonrpc.error_code(reply)
    if isinstance(error, dict) and code is not None:
        message = error.get("message")
        return Failure(code, message if isinstance(message, str) else "", error.get("data"), status, wait)
    if status == 404:
        return Failure(METHOD_NOT_FOUND, "Method not found (HTTP 404)", None, status, wait)
    if status == 503:
        return Failure(SESSION_STORE_UNAVAILABLE, "Service unavailable (HTTP 503)", None, status, wait)
    code = INVALID_REQUEST if 400 <= status < 500 else INTERNAL_ERROR
    return Failure(code, f"no JSON-RPC answer (HTTP {status})", None, status if status >= 400 else 500, wait)


Headers = list[tuple[str, str]]

ResponseT = TypeVar("ResponseT", bound=ResponseLike)


@dataclass
class Verdict(Generic[ResponseT]):
    """One try's answer, ready to deliver, and what decides whether to retry it instead."""

    response: ResponseT
    deciding: list[object]  # a JSON answer's messages, or an SSE answer's first event if it had data
    wait: float | None = None  # Retry-After, in seconds
    busy: bool = False  # the server could not serve it now: -32010 or HTTP 503

    @classmethod
    def of(cls, response: ResponseT, deciding: list[object], wait: float | None = None) -> Verdict[ResponseT]:
        """The verdict on ``response``, busy when it is a 503 or a deciding message is -32010."""
        codes = {jsonrpc.error_code(message) for message in deciding}
        return cls(response, deciding, wait, response.status_code == 503 or SESSION_STORE_UNAVAILABLE in codes)

    async def discard(self) -> None:
        """Close the answer unread: a retry's answer takes its place."""
        await self.response.stream.aclose()


# Connection set-up: never stamped, never the reason to create a session. A
# stale saved session must not be able to fail the handshake itself.
CARRIER: Final = DRAFT.carrier
"""Where a request carries its session on the draft, the wire the client speaks."""
SETUP_METHODS: Final = frozenset({"initialize", "notifications/initialized", "server/discover"})
# Stamped when a session is held, but never the reason to create one (with the wire's own methods).
_NO_CREATE_METHODS: Final = SETUP_METHODS | {"ping"}
# Headers that frame one body, and those that describe one message: a request the client builds sets its own.
_FRAMING: Final = frozenset({"content-length", "transfer-encoding"})
_PER_MESSAGE: Final = _FRAMING | {"mcp-method", "mcp-name"}
_SESSION_HEADER: Final = frozenset({"mcp-session-id"})
_ENVELOPE_PREFIX: Final = "io.modelcontextprotocol/"
_OWN_REQUEST_TIMEOUT: Final = 30.0


class RequestLike(Protocol):
    """What the client reads of a request (``httpx.Request`` and ``httpx2.Request`` alike)."""

    @property
    def method(self) -> str: ...
    @property
    def url(self) -> object: ...  # the library's URL: passed back to it, never read here
    @property
    def headers(self) -> HeadersLike: ...
    @property
    def extensions(self) -> Mapping[str, object]: ...
    async def aread(self) -> bytes: ...


@dataclass
class OutgoingPost:
    """A JSON-RPC POST as the caller sent it: its requests and notifications, and its era."""

    url: object  # the HTTP library's URL, passed back to it
    headers: Headers
    extensions: dict[str, object]
    body: bytes
    parsed: object
    messages: list[dict[str, object]]
    era: Era

    @classmethod
    def parse(cls, request: RequestLike, body: bytes) -> OutgoingPost | None:
        """The POST, or ``None`` when its body is not JSON-RPC (an OAuth registration, a response to the server).

        The era comes from this request's own ``Mcp-Protocol-Version``, as the SDK server decides it.
        """
        parsed = jsonrpc.loads(body)
        messages = jsonrpc.requests_and_notifications(parsed)
        if messages is None:
            return None
        headers, extensions = request.headers.multi_items(), dict(request.extensions)
        era = Era.of(request.headers.get("mcp-protocol-version"))
        return cls(request.url, headers, extensions, body, parsed, messages, era)

    @property
    def request_ids(self) -> list[object]:
        """The ids of the requests (not notifications) in this POST."""
        return [m["id"] for m in self.messages if "id" in m]

    def method_of(self, request_id: object) -> str | None:
        """The method of the request with this id, if this POST sent one."""
        method = next((m["method"] for m in self.messages if "id" in m and m["id"] == request_id), None)
        return method if isinstance(method, str) else None  # always a str: parse kept only such messages

    @property
    def only_setup(self) -> bool:
        """Whether every message is connection set-up (such a POST does not teach the endpoint)."""
        return all(m["method"] in SETUP_METHODS for m in self.messages)

    @property
    def triggers_create(self) -> bool:
        """Whether this POST is a reason to create a session: a request that is part of a conversation."""
        return any(
            "id" in m
            and m["method"] not in _NO_CREATE_METHODS
            and m["method"] not in DRAFT.methods
            and not _has_session_key(m, CARRIER)
            for m in self.messages
        )

    @property
    def handles_own_session(self) -> bool:
        """Whether the caller handles sessions itself: a session method of the wire, or session metadata (even
        ``null``) on a message."""
        return any(m["method"] in DRAFT.methods or _has_session_key(m, CARRIER) for m in self.messages)

    @property
    def batch(self) -> bool:
        """Whether the body is a JSON-RPC batch (an array)."""
        return isinstance(self.parsed, list)


@dataclass
class Attempt:
    """One try at sending a POST: the bytes, and which session each of its requests named."""

    body: bytes
    headers: Headers
    token: str | None = None  # the held session's token, if it was stamped on any message
    stamped_ids: list[object] = field(default_factory=list)
    sessions_named: list[tuple[object, str]] = field(default_factory=list)

    def named(self, request_id: object, token: str | None) -> bool:
        """Whether the request ``request_id`` named the session ``token`` (stamped, or the caller's own)."""
        return token is not None and (request_id, token) in self.sessions_named


def stamp(post: OutgoingPost, token: str | None, state: str | None = None) -> Attempt:
    """The attempt that sends ``post`` with the held session (``token``, ``state``) where it belongs."""
    attempt = Attempt(post.body, [])
    header_token: str | None = None
    carrier = CARRIER
    elements = post.parsed if isinstance(post.parsed, list) else [post.parsed]  # post.batch, spelled out for mypy
    sent: list[object] = []
    for item in elements:
        if not jsonrpc.is_request_or_notification(item):
            sent.append(item)
            continue
        message = cast("dict[str, object]", item)  # is_request_or_notification checked that it is an object
        own = _own_session_id(message, carrier)
        if own is not None:
            header_token = header_token or own
            if "id" in message:
                attempt.sessions_named.append((message["id"], own))
        if token is None or not _stampable(message, post):
            sent.append(message)
            continue
        sent.append(_with_session(message, carrier, token, state))
        attempt.token = token
        header_token = header_token or token
        if "id" in message:
            attempt.stamped_ids.append(message["id"])
            attempt.sessions_named.append((message["id"], token))
    if attempt.token is not None:  # else nothing was stamped: the caller's bytes, exactly
        attempt.body = jsonrpc.dumps(sent if post.batch else sent[0])
    # 2026-07-28: the header mirrors the session; 2025-era: it is the server's own, left untouched.
    replaced = _SESSION_HEADER if post.era is Era.MODERN and header_token is not None else frozenset()
    attempt.headers = _framed(_forwarded(post.headers, _FRAMING | replaced), post.era, header_token, len(attempt.body))
    return attempt


def _stampable(message: dict[str, object], post: OutgoingPost) -> bool:
    params = message.get("params")
    return (
        message["method"] not in SETUP_METHODS
        and message["method"] != DRAFT.create_method
        and not _has_session_key(message, CARRIER)
        and (params is None or isinstance(params, dict))
    )


def _with_session(
    message: dict[str, object], carrier: SessionCarrier, token: str, state: str | None
) -> dict[str, object]:
    value = {carrier.id_member: token}
    if carrier.state_member is not None and state is not None:
        value[carrier.state_member] = state
    params = message.get("params")
    params = dict(params) if isinstance(params, dict) else {}  # None or an object (_stampable checked)
    params["_meta"] = {**(jsonrpc.meta(params) or {}), carrier.meta_key: value}
    return {**message, "params": params}


def _has_session_key(message: dict[str, object], carrier: SessionCarrier) -> bool:
    """Whether the caller put session metadata (even ``null``) on the message itself."""
    meta = jsonrpc.meta(message.get("params"))
    return meta is not None and carrier.meta_key in meta


def _own_session_id(message: dict[str, object], carrier: SessionCarrier) -> str | None:
    """The session id the caller put on the message itself, if it is a string."""
    meta = jsonrpc.meta(message.get("params"))
    session = meta.get(carrier.meta_key) if meta is not None else None
    value = session.get(carrier.id_member) if isinstance(session, dict) else None
    return value if isinstance(value, str) else None


def _forwarded(headers: Headers, drop: frozenset[str]) -> Headers:
    """``headers`` without the names in ``drop``, ``Accept-Encoding`` cut to what the client can read back."""
    return [
        (key, decodable_encodings(value) if key.lower() == "accept-encoding" else value)
        for key, value in headers
        if key.lower() not in drop
    ]


def _framed(headers: Headers, era: Era, session_id: str | None, length: int) -> Headers:
    """``headers`` with ``Mcp-Session-Id`` (2026-07-28 only, when there is a session) and ``Content-Length``."""
    if era is Era.MODERN and session_id is not None:
        headers.append(("mcp-session-id", session_id))
    headers.append(("content-length", str(length)))
    return headers


@dataclass
class Endpoint:
    """An MCP endpoint with the era, headers, ``_meta`` envelope and timeout of the client's own requests."""

    url: object  # a str, or the HTTP library's URL of the caller's request
    headers: Headers  # never Mcp-Session-Id on 2026-07-28: each request sets its own
    era: Era
    envelope: dict[str, object]
    extensions: dict[str, object]

    @classmethod
    def learn(cls, post: OutgoingPost) -> Endpoint:
        """The endpoint of a caller's POST: its URL, headers (auth included), envelope and timeout."""
        drop = _PER_MESSAGE | _SESSION_HEADER if post.era is Era.MODERN else _PER_MESSAGE
        meta = next(
            filter(None, (jsonrpc.meta(message.get("params")) for message in post.messages)), {}
        )  # the first non-empty params._meta
        envelope = {k: v for k, v in meta.items() if k.startswith(_ENVELOPE_PREFIX) and k != CARRIER.meta_key}
        extensions = {k: v for k, v in post.extensions.items() if k == "timeout"}
        return cls(post.url, _forwarded(post.headers, drop), post.era, envelope, extensions)

    @classmethod
    def explicit(cls, url: str, protocol_version: str, headers: Mapping[str, str] | None) -> Endpoint:
        """An endpoint the caller named, with the headers a client of ``protocol_version`` sends."""
        era = Era.of(protocol_version)
        base = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": protocol_version,
        }
        base.update({k.lower(): v for k, v in (headers or {}).items()})
        envelope: dict[str, object] = {}
        if era is Era.MODERN:
            base.pop("mcp-session-id", None)
            envelope = {
                _ENVELOPE_PREFIX + "protocolVersion": protocol_version,
                _ENVELOPE_PREFIX + "clientCapabilities": {},
            }
        seconds = dict.fromkeys(("connect", "read", "write", "pool"), _OWN_REQUEST_TIMEOUT)
        return cls(url, list(base.items()), era, envelope, {"timeout": seconds})

    def request(
        self, request_id: str, method: str, params: dict[str, object], token: str | None
    ) -> tuple[bytes, Headers]:
        """The body and headers of one of the client's own requests.

        On 2026-07-28 the endpoint's envelope joins what the wire put in ``_meta``,
        and ``Mcp-Method`` and ``Mcp-Session-Id`` (when there is a session) are set.
        """
        headers = list(self.headers)
        if self.era is Era.MODERN:
            rest = {k: v for k, v in params.items() if k != "_meta"}
            params = {"_meta": {**self.envelope, **(jsonrpc.meta(params) or {})}, **rest}
            headers.append(("mcp-method", method))
        body = jsonrpc.dumps(jsonrpc.request(request_id, method, params or None))
        return body, _framed(headers, self.era, token, len(body))

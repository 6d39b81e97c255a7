"""The half of the session transports that does not depend on the HTTP library.

:class:`Shim` stamps the held session into each outgoing JSON-RPC POST, reads the
server's echo from JSON and SSE answers as they pass, and retries by the policy
described in ``docs/client.md``. A :class:`Wire` adapts it to one HTTP library
(``httpx2``, which the ``mcp`` SDK client uses, or ``httpx``); both libraries
share the transport API (``handle_async_request``), so the adapters are small.
"""

from __future__ import annotations

import email.utils
import inspect
import itertools
import logging
import re
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Generic, Literal, Protocol, TypeVar

import anyio

from .. import _jsonrpc as jsonrpc
from .._protocol import (
    INVALID_REQUEST,
    METHOD_CREATE,
    METHOD_DELETE,
    METHOD_NOT_FOUND,
    MODERN_VERSION,
    SESSION_META_KEY,
    SESSION_METHODS,
    SESSION_NOT_FOUND,
    SESSION_REQUIRED,
    SESSION_STORE_UNAVAILABLE,
    SESSIONS_EXTENSION_ID,
    is_modern,
)
from .._sse import SSERewriter
from ._session import RetryPolicy, SessionError, SessionHandle

__all__ = ["ChangeHook", "Relay", "Shim", "Wire"]

logger = logging.getLogger("mcp_sessions.client")

ChangeHook = Callable[[SessionHandle], "Awaitable[None] | None"]

# Connection set-up: never stamped, never the reason to create a session. A
# stale saved session must not be able to fail the handshake itself.
SETUP_METHODS: Final = frozenset({"initialize", "notifications/initialized", "server/discover"})
# Stamped when a session is held, but never the reason to create one.
_NO_CREATE_METHODS: Final = SETUP_METHODS | SESSION_METHODS | {"ping"}
# Headers that describe one message; a synthesized request sets its own.
_PER_MESSAGE_HEADERS: Final = frozenset({"content-length", "transfer-encoding", "mcp-method", "mcp-name"})
_DECODABLE: Final = frozenset({"gzip", "x-gzip", "deflate", "identity"})
_ENVELOPE_PREFIX: Final = "io.modelcontextprotocol/"
_INTERNAL_ERROR: Final = -32603
_DEFAULT_TIMEOUT: Final = 30.0

_EOL: Final = re.compile(rb"\r\n|\r|\n")


# -- what the core needs of an HTTP library ---------------------------------------


class _Headers(Protocol):
    def get(self, key: str, /) -> str | None: ...
    def multi_items(self) -> list[tuple[str, str]]: ...


class _Request(Protocol):
    @property
    def method(self) -> str: ...
    @property
    def url(self) -> Any: ...
    @property
    def headers(self) -> _Headers: ...
    @property
    def extensions(self) -> Any: ...
    async def aread(self) -> bytes: ...


class _Response(Protocol):
    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> _Headers: ...
    @property
    def stream(self) -> Any: ...


ReqT = TypeVar("ReqT", bound=_Request)
RespT = TypeVar("RespT", bound=_Response)
Headers = list[tuple[str, str]]


class Wire(Generic[ReqT, RespT]):
    """One HTTP library's side of the shim: send, and build requests and responses."""

    async def send(self, request: ReqT) -> RespT:
        raise NotImplementedError

    def request(self, url: Any, headers: Headers, body: bytes, extensions: Mapping[str, Any]) -> ReqT:
        raise NotImplementedError

    def with_body(self, response: RespT, body: bytes) -> RespT:
        """``response`` (status, headers, extensions) with a body read already."""
        raise NotImplementedError

    def with_stream(self, response: RespT, relay: Relay) -> RespT:
        """``response`` with its body coming from ``relay``."""
        raise NotImplementedError

    def synthetic(self, status: int, headers: Headers, body: bytes) -> RespT:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError


# -- one outgoing POST ----------------------------------------------------------------


@dataclass(slots=True)
class _Outgoing:
    """A JSON-RPC POST as the caller sent it (kept whole: a retry sends it again)."""

    url: Any
    headers: Headers
    extensions: dict[str, Any]
    body: bytes
    parsed: Any
    messages: list[dict[str, Any]]
    modern: bool

    @property
    def request_ids(self) -> list[Any]:
        return [m["id"] for m in self.messages if "id" in m]

    def method_of(self, request_id: Any) -> str | None:
        return next((m["method"] for m in self.messages if "id" in m and m["id"] == request_id), None)

    @property
    def triggers_create(self) -> bool:
        """Whether this POST is a reason to create a session: a request that is part of a conversation."""
        return any(
            "id" in m and m["method"] not in _NO_CREATE_METHODS and not _has_session_key(m) for m in self.messages
        )

    @property
    def has_session_method(self) -> bool:
        return any(m["method"] in SESSION_METHODS for m in self.messages)


@dataclass(slots=True)
class _Sent:
    """What one attempt sent: the token it stamped, and which session each request named."""

    token: str | None = None
    stamped_ids: list[Any] = field(default_factory=list)
    session_of: list[tuple[Any, str]] = field(default_factory=list)

    def names(self, request_id: Any, token: str | None) -> bool:
        """Whether the request ``request_id`` named the session ``token`` (stamped or the caller's own)."""
        return token is not None and (request_id, token) in self.session_of


@dataclass(slots=True)
class _Endpoint:
    """Where and how to send ``sessions/create`` and ``sessions/delete``: learned from a request."""

    url: Any
    headers: Headers
    modern: bool
    envelope: dict[str, Any]
    extensions: dict[str, Any]

    @classmethod
    def learn(cls, out: _Outgoing) -> _Endpoint:
        headers = [
            (k, _decodable_encodings(v) if k.lower() == "accept-encoding" else v)
            for k, v in out.headers
            if k.lower() not in _PER_MESSAGE_HEADERS and not (out.modern and k.lower() == "mcp-session-id")
        ]
        envelope: dict[str, Any] = {}
        for message in out.messages:
            meta = _meta_of(message)
            if meta:
                envelope = {k: v for k, v in meta.items() if k.startswith(_ENVELOPE_PREFIX) and k != SESSION_META_KEY}
                break
        extensions = {k: v for k, v in out.extensions.items() if k == "timeout"}
        return cls(out.url, headers, out.modern, envelope, extensions)

    @classmethod
    def explicit(cls, url: Any, protocol_version: str, headers: Mapping[str, str] | None, timeout: float) -> _Endpoint:
        modern = is_modern(protocol_version)
        base = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": protocol_version,
        }
        base.update({k.lower(): v for k, v in (headers or {}).items()})
        envelope: dict[str, Any] = {}
        if modern:
            envelope = {
                _ENVELOPE_PREFIX + "protocolVersion": protocol_version,
                _ENVELOPE_PREFIX + "clientCapabilities": {},
            }
        seconds = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
        return cls(url, list(base.items()), modern, envelope, {"timeout": seconds})

    def headers_for(self, method: str, token: str | None, length: int) -> Headers:
        headers = [(k, v) for k, v in self.headers if not (self.modern and k.lower() == "mcp-session-id")]
        if self.modern:
            headers.append(("mcp-method", method))
            if token is not None:
                headers.append(("mcp-session-id", token))
        headers.append(("content-length", str(length)))
        return headers


@dataclass(slots=True)
class _Failure:
    """A refused ``sessions/create`` or ``sessions/delete``, as the server answered it."""

    code: int
    message: str
    data: Any = None
    status: int = 200
    retry_after: str | None = None

    def error(self) -> SessionError:
        return SessionError(self.code, self.message, self.data)


class _Answer(Exception):
    """Creating the session failed: answer the caller's request with this failure."""

    def __init__(self, failure: _Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


RetryKind = Literal["unavailable", "not_found", "required"]


@dataclass(slots=True)
class _Verdict(Generic[RespT]):
    """One attempt's answer: deliver it, or retry (``kind``) after discarding it."""

    kind: RetryKind | None
    deliver: Callable[[], RespT]
    discard: Callable[[], Awaitable[None]]
    retry_after: float | None = None


# -- the shim ----------------------------------------------------------------------------


class Shim(Generic[ReqT, RespT]):
    """Sessions for every JSON-RPC POST that passes through; see ``docs/client.md``."""

    def __init__(
        self,
        wire: Wire[ReqT, RespT],
        *,
        session: SessionHandle | None,
        auto_create: bool,
        recreate: bool,
        delete_on_close: bool,
        retry: RetryPolicy,
        on_change: ChangeHook | None,
        close_timeout: float,
        owns_wire: bool,
    ) -> None:
        if session is not None and not isinstance(session, SessionHandle):
            raise TypeError("session must be a SessionHandle (SessionHandle.from_dict(saved) resumes a saved one)")
        if not isinstance(retry, RetryPolicy):
            raise TypeError("retry must be a RetryPolicy")
        if close_timeout < 0:
            raise ValueError("close_timeout must be 0 seconds or more")
        self.wire = wire
        self.session = SessionHandle() if session is None else session
        self.auto_create = auto_create
        self.recreate = recreate
        self.delete_on_close = delete_on_close
        self.retry = retry
        self.on_change = on_change
        self.close_timeout = close_timeout
        self.owns_wire = owns_wire
        # None: the server has not said; False: it has no sessions (capability or -32601).
        self.supported: bool | None = None
        self._endpoint: _Endpoint | None = None
        self._lock = anyio.Lock()
        self._ids = itertools.count(1)
        self._dirty = False
        self._closed = False

    # -- the transport entry point -----------------------------------------------------

    async def handle(self, request: ReqT) -> RespT:
        if request.method != "POST" or not _is_json(request.headers.get("content-type")):
            return await self.wire.send(request)
        body = await request.aread()
        parsed = _loads(body)
        messages = _jsonrpc_messages(parsed)
        if messages is None:
            return await self.wire.send(request)
        out = _Outgoing(
            url=request.url,
            headers=request.headers.multi_items(),
            extensions=dict(request.extensions),
            body=body,
            parsed=parsed,
            messages=messages,
            modern=is_modern(request.headers.get("mcp-protocol-version")),
        )
        if not all(m["method"] in SETUP_METHODS for m in messages):
            self._endpoint = _Endpoint.learn(out)
        try:
            return await self._exchange(out)
        finally:
            await self.flush_changes()

    async def _exchange(self, out: _Outgoing) -> RespT:
        started = time.monotonic()
        retries = 0
        session_retried = False
        force_create = False
        while True:
            try:
                token = await self._token_for(out, force_create=force_create)
            except _Answer as answer:
                return self._answer(out, answer.failure)
            body, headers, sent = self._prepare(out, token)
            response = await self.wire.send(self.wire.request(out.url, headers, body, out.extensions))
            verdict = await self._judge(out, sent, response)
            if verdict.kind == "unavailable" and retries < self.retry.attempts:
                delay = self.retry.delay(retries, verdict.retry_after)
                if time.monotonic() - started + delay <= self.retry.deadline:
                    await verdict.discard()
                    logger.info("server unavailable (-32010 or HTTP 503): retry %d in %.2f s", retries + 1, delay)
                    await anyio.sleep(delay)
                    retries += 1
                    continue
            elif verdict.kind in ("not_found", "required") and not session_retried:
                await verdict.discard()
                logger.info("retrying once with a new session after %s", verdict.kind.replace("_", " "))
                session_retried = force_create = True
                continue
            return verdict.deliver()

    async def _token_for(self, out: _Outgoing, *, force_create: bool) -> str | None:
        """The token to stamp, creating a session first if this request calls for one."""
        handle = self.session
        if handle.token is not None and handle.expired():
            self._drop(handle.token, "it expired by this client's clock")
        if handle.token is not None:
            return handle.token
        wanted = force_create or (self.auto_create and self.supported is not False and out.triggers_create)
        if not wanted:
            return None
        async with self._lock:
            # Another request may have created it while this one waited.
            if handle.token is None or handle.expired():
                failure = await self._create(_Endpoint.learn(out))
                if failure is not None:
                    if failure.code != METHOD_NOT_FOUND:
                        raise _Answer(failure)
                    self._unsupported()
        return handle.token

    def _prepare(self, out: _Outgoing, token: str | None) -> tuple[bytes, Headers, _Sent]:
        """The body and headers of one attempt: the session stamped where it belongs."""
        sent = _Sent(token=None)
        header_token: str | None = None
        elements = out.parsed if isinstance(out.parsed, list) else [out.parsed]
        stamped: list[Any] = []
        for element in elements:
            if not _is_message(element):
                stamped.append(element)
                continue
            own = _own_session_id(element)
            if own is not None:
                header_token = header_token or own
                if "id" in element:
                    sent.session_of.append((element["id"], own))
            params = element.get("params")
            if (
                token is None
                or element["method"] in SETUP_METHODS
                or element["method"] == METHOD_CREATE
                or _has_session_key(element)
                or (params is not None and not isinstance(params, dict))
            ):
                stamped.append(element)
                continue
            params = dict(params or {})
            meta = params.get("_meta")
            meta = dict(meta) if isinstance(meta, dict) else {}
            meta[SESSION_META_KEY] = self.session.meta()
            params["_meta"] = meta
            stamped.append({**element, "params": params})
            sent.token = token
            header_token = header_token or token
            if "id" in element:
                sent.stamped_ids.append(element["id"])
                sent.session_of.append((element["id"], token))
        if sent.token is None:
            body = out.body  # nothing stamped: the caller's bytes, exactly
        else:
            body = jsonrpc.dumps(stamped if isinstance(out.parsed, list) else stamped[0])
        headers: Headers = []
        for key, value in out.headers:
            lower = key.lower()
            if lower in ("content-length", "transfer-encoding"):
                continue
            if lower == "mcp-session-id" and out.modern and header_token is not None:
                continue  # 2026-07-28: the header mirrors the session; 2025-era: the server's own, untouched
            if lower == "accept-encoding":
                value = _decodable_encodings(value)
            headers.append((key, value))
        if out.modern and header_token is not None:
            headers.append(("mcp-session-id", header_token))
        headers.append(("content-length", str(len(body))))
        return body, headers, sent

    async def _judge(self, out: _Outgoing, sent: _Sent, response: RespT) -> _Verdict[RespT]:
        """Read enough of the answer to decide: deliver it, or retry."""
        status = response.status_code
        content_type = str(response.headers.get("content-type") or "").lower()
        encoding = response.headers.get("content-encoding")
        retry_after = _retry_after(response.headers.get("retry-after"))

        async def close() -> None:
            await response.stream.aclose()

        if content_type.startswith("text/event-stream") and status < 300:
            return await self._judge_stream(out, sent, response, encoding, close)
        if not content_type.startswith("application/json") and status != 503:
            return _Verdict(None, lambda: response, close)
        raw = await _read_all(response)
        inflate = _Inflater(encoding)
        messages = _json_messages(inflate(raw)) if content_type.startswith("application/json") else []
        for message in messages:
            self._observe(out, sent, message)
        kind = self._retry_kind(out, sent, status, messages)
        return _Verdict(kind, lambda: self.wire.with_body(response, raw), _nothing, retry_after)

    async def _judge_stream(
        self, out: _Outgoing, sent: _Sent, response: RespT, encoding: Any, close: Callable[[], Awaitable[None]]
    ) -> _Verdict[RespT]:
        """Hold only the first event: if it is a retryable error, nothing has reached the caller yet."""
        observer = _StreamObserver(self, out, sent, _Inflater(encoding))
        chunks: AsyncIterator[bytes] = response.stream.__aiter__()
        prefix: list[bytes] = []

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
                prefix.append(chunk)
                observer.feed(chunk)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await close_all()
            raise
        first = observer.first
        kind = self._retry_kind(out, sent, response.status_code, [first]) if first is not None else None
        relay = Relay(prefix, chunks, observer, close_all, self)
        return _Verdict(kind, lambda: self.wire.with_stream(response, relay), close_all)

    def _retry_kind(self, out: _Outgoing, sent: _Sent, status: int, messages: list[Any]) -> RetryKind | None:
        errors = [m for m in messages if isinstance(m, dict) and isinstance(m.get("error"), dict)]
        codes = {e["error"].get("code") for e in errors}
        if status == 503 or SESSION_STORE_UNAVAILABLE in codes:
            return "unavailable"
        if self.recreate and any(
            e["error"].get("code") == SESSION_NOT_FOUND and e.get("id") in sent.stamped_ids for e in errors
        ):
            return "not_found"
        if (
            SESSION_REQUIRED in codes
            and self.auto_create
            and sent.token is None
            and not out.has_session_method
            and not any(_has_session_key(m) for m in out.messages)
        ):
            return "required"
        return None

    def _observe(self, out: _Outgoing, sent: _Sent, message: Any) -> None:
        """Learn from one answer: the echo, the capability, a session the server no longer knows."""
        if not isinstance(message, dict) or "id" not in message:
            return
        result = message.get("result")
        if isinstance(result, dict):
            meta = result.get("_meta")
            echo = meta.get(SESSION_META_KEY) if isinstance(meta, dict) else None
            if (
                isinstance(echo, dict)
                and self.session.token is not None
                and echo.get("sessionId") == self.session.token
            ):
                self._dirty |= self.session._apply_echo(echo)
            if out.method_of(message["id"]) in ("server/discover", "initialize"):
                self._observe_capability(result)
            if out.method_of(message["id"]) == METHOD_DELETE and sent.names(message["id"], self.session.token):
                assert self.session.token is not None
                self._drop(self.session.token, "it was deleted")
            return
        error = message.get("error")
        if (
            isinstance(error, dict)
            and error.get("code") == SESSION_NOT_FOUND
            and sent.names(message["id"], self.session.token)
        ):
            assert self.session.token is not None
            self._drop(self.session.token, "the server answered -32043 (session not found)")

    def _observe_capability(self, result: dict[str, Any]) -> None:
        capabilities = result.get("capabilities")
        if not isinstance(capabilities, dict):
            return
        extensions, experimental = capabilities.get("extensions"), capabilities.get("experimental")
        supported = (
            "sessions" in capabilities
            or (isinstance(extensions, dict) and SESSIONS_EXTENSION_ID in extensions)
            or (isinstance(experimental, dict) and "sessions" in experimental)
        )
        if self.supported is not supported:
            logger.debug("the server %s sessions", "advertises" if supported else "does not advertise")
        self.supported = supported

    def _answer(self, out: _Outgoing, failure: _Failure) -> RespT:
        """Answer the caller's POST with the error that creating its session met."""
        error: dict[str, Any] = {"code": failure.code, "message": failure.message}
        if failure.data is not None:
            error["data"] = failure.data
        answers = [{"jsonrpc": "2.0", "id": rid, "error": error} for rid in out.request_ids]
        body = jsonrpc.dumps(answers if isinstance(out.parsed, list) else answers[0])
        headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
        if failure.retry_after is not None:
            headers.append(("retry-after", failure.retry_after))
        return self.wire.synthetic(failure.status, headers, body)

    # -- the held session ------------------------------------------------------------------

    def _drop(self, token: str, reason: str) -> None:
        if self.session.token != token:
            return  # already replaced by another request
        logger.info("dropping session %s: %s", self.session.id, reason)
        self.session.clear()
        self._dirty = True

    def _unsupported(self) -> None:
        if self.supported is not False:
            logger.warning("the server does not support data-layer sessions: requests go out without one")
        self.supported = False

    async def flush_changes(self) -> None:
        """Run the ``on_change`` hook if the session changed; a failing hook is logged, never raised."""
        if not self._dirty:
            return
        self._dirty = False
        if self.on_change is None:
            return
        try:
            result = self.on_change(self.session)
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("the on_change hook failed")

    # -- sessions/create and sessions/delete ----------------------------------------------

    def endpoint(self, url: Any, protocol_version: str | None, headers: Mapping[str, str] | None) -> _Endpoint:
        if self._closed:
            raise RuntimeError(
                "this transport is closed: build a new one (SessionTransport(session=...) keeps the session)"
            )
        if url is not None:
            return _Endpoint.explicit(url, protocol_version or MODERN_VERSION, headers, _DEFAULT_TIMEOUT)
        if self._endpoint is None:
            raise ValueError("no MCP endpoint is known yet: pass url= (the server's MCP endpoint)")
        return self._endpoint

    async def create_explicit(self, endpoint: _Endpoint) -> SessionHandle:
        async with self._lock:
            failure = await self._create(endpoint)
        if failure is not None:
            if failure.code == METHOD_NOT_FOUND:
                self._unsupported()
            raise failure.error()
        if self._endpoint is None:
            self._endpoint = endpoint
        await self.flush_changes()
        return self.session

    async def _create(self, endpoint: _Endpoint) -> _Failure | None:
        params: dict[str, Any] = {}
        if endpoint.modern:
            params["_meta"] = dict(endpoint.envelope)
        if self.session.label is not None:
            params["label"] = self.session.label
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": f"mcp-sessions-{next(self._ids)}", "method": METHOD_CREATE}
        if params:
            message["params"] = params
        reply = await self._call(endpoint, message, token=None)
        if isinstance(reply, _Failure):
            return reply
        session = reply.get("session")
        token = session.get("sessionId") if isinstance(session, dict) else None
        if not isinstance(session, dict) or not isinstance(token, str) or not token:
            return _Failure(_INTERNAL_ERROR, "the sessions/create result has no session")
        handle = self.session
        handle.clear()
        handle.token = token
        handle._apply_echo(session)
        self._dirty = True
        logger.info("created session %s (expires %s)", handle.id, session.get("expiresAt"))
        return None

    async def delete(self, endpoint: _Endpoint) -> bool:
        token = self.session.token
        if token is None:
            return False
        meta: dict[str, Any] = dict(endpoint.envelope) if endpoint.modern else {}
        meta[SESSION_META_KEY] = {"sessionId": token}
        message = {
            "jsonrpc": "2.0",
            "id": f"mcp-sessions-{next(self._ids)}",
            "method": METHOD_DELETE,
            "params": {"_meta": meta},
        }
        try:
            reply = await self._call(endpoint, message, token=token)
            if isinstance(reply, _Failure):
                if reply.code == SESSION_NOT_FOUND:
                    self._drop(token, "the server no longer knows it")
                    return False
                raise reply.error()
            self._drop(token, "it was deleted")
            return True
        finally:
            await self.flush_changes()

    async def _call(
        self, endpoint: _Endpoint, message: dict[str, Any], *, token: str | None
    ) -> dict[str, Any] | _Failure:
        """Send one of the shim's own requests, retrying by the policy; its result or its failure."""
        body = jsonrpc.dumps(message)
        headers = endpoint.headers_for(message["method"], token, len(body))
        started = time.monotonic()
        retries = 0
        while True:
            response = await self.wire.send(self.wire.request(endpoint.url, headers, body, endpoint.extensions))
            raw = await _read_all(response)
            status = response.status_code
            content_type = str(response.headers.get("content-type") or "").lower()
            retry_header = response.headers.get("retry-after")
            text = _Inflater(response.headers.get("content-encoding"))(raw)
            if content_type.startswith("text/event-stream"):
                candidates = _sse_messages(text)
            elif content_type.startswith("application/json"):
                candidates = _json_messages(text)
            else:
                candidates = []
            reply = next((m for m in candidates if isinstance(m, dict) and m.get("id") == message["id"]), None)
            if reply is not None and isinstance(reply.get("result"), dict) and status < 300:
                result: dict[str, Any] = reply["result"]
                return result
            failure = _failure(reply, status, retry_header)
            if failure.code == SESSION_STORE_UNAVAILABLE or status == 503:
                delay = self.retry.delay(retries, _retry_after(retry_header))
                if retries < self.retry.attempts and time.monotonic() - started + delay <= self.retry.deadline:
                    logger.info("%s: server busy, retry %d in %.2f s", message["method"], retries + 1, delay)
                    await anyio.sleep(delay)
                    retries += 1
                    continue
            return failure

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.delete_on_close and self.session.token is not None and self._endpoint is None:
                logger.warning("session %s not deleted on close: no request has named its server", self.session.id)
            elif self.delete_on_close and self.session.token is not None and self._endpoint is not None:
                sid = self.session.id
                with anyio.move_on_after(self.close_timeout) as scope:
                    try:
                        await self.delete(self._endpoint)
                    except Exception as exc:
                        logger.warning("could not delete session %s on close: %s", sid, exc)
                if scope.cancelled_caught:
                    logger.warning("could not delete session %s on close: no answer in %s s", sid, self.close_timeout)
        finally:
            if self.owns_wire:
                await self.wire.aclose()


class Relay:
    """The body of an SSE answer: the held first event, then the rest as it arrives, observed on the way."""

    def __init__(
        self,
        prefix: list[bytes],
        chunks: AsyncIterator[bytes],
        observer: _StreamObserver,
        close: Callable[[], Awaitable[None]],
        shim: Shim[Any, Any],
    ) -> None:
        self._prefix = prefix
        self._chunks = chunks
        self._observer = observer
        self._close = close
        self._shim = shim

    def __aiter__(self) -> Relay:
        return self

    async def __anext__(self) -> bytes:
        if self._prefix:
            return self._prefix.pop(0)
        chunk = await self._chunks.__anext__()
        self._observer.feed(chunk)
        await self._shim.flush_changes()
        return chunk

    async def aclose(self) -> None:
        await self._close()


class _StreamObserver:
    """Parses an SSE answer as it passes (the bytes themselves are never changed)."""

    def __init__(self, shim: Shim[Any, Any], out: _Outgoing, sent: _Sent, inflate: _Inflater) -> None:
        self._shim = shim
        self._out = out
        self._sent = sent
        self._inflate = inflate
        self._rewriter = SSERewriter(self._on_event, once=False)
        self._pending = set(map(_hashable, out.request_ids))
        # Complete events seen so far, and the message of the very first one if it had data.
        self.events = 0
        self.first: Any = None
        self._first_data: Any = None
        self._done = False

    def feed(self, chunk: bytes) -> None:
        if self._done:
            return
        try:
            output = self._rewriter.feed(self._inflate(chunk))
            if output and not self.events:
                self.events = 1
                if _first_event_has_data(output):
                    self.first = self._first_data
        except Exception:  # an observer bug must never break the caller's stream
            logger.exception("could not read the session echo from an SSE answer")
            self._done = True

    def _on_event(self, data: str) -> None:
        message = jsonrpc.loads(data.encode(), request=False)
        if not self.events and self._first_data is None:
            self._first_data = message
        if message is None:
            return None
        self._shim._observe(self._out, self._sent, message)
        if isinstance(message, dict) and "method" not in message and "id" in message:
            self._pending.discard(_hashable(message["id"]))
            if not self._pending:
                self._done = True  # every request answered: the rest is not ours to read
        return None


# -- small helpers -------------------------------------------------------------------------------


async def _nothing() -> None:
    return None


async def _read_all(response: _Response) -> bytes:
    try:
        return b"".join([chunk async for chunk in response.stream])
    finally:
        await response.stream.aclose()


def _hashable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | type(None)) else repr(value)


def _is_json(content_type: Any) -> bool:
    return isinstance(content_type, str) and content_type.lower().startswith("application/json")


def _loads(body: bytes) -> Any:
    return jsonrpc.loads(body, request=False)


def _is_message(element: Any) -> bool:
    return isinstance(element, dict) and element.get("jsonrpc") == "2.0" and isinstance(element.get("method"), str)


def _jsonrpc_messages(parsed: Any) -> list[dict[str, Any]] | None:
    """The JSON-RPC requests and notifications of a body, or ``None`` if it is not JSON-RPC."""
    if isinstance(parsed, dict):
        return [parsed] if _is_message(parsed) else None
    if isinstance(parsed, list):
        return [e for e in parsed if _is_message(e)] or None
    return None


def _meta_of(message: dict[str, Any]) -> dict[str, Any] | None:
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta if isinstance(meta, dict) else None


def _has_session_key(message: dict[str, Any]) -> bool:
    """Whether the caller put session metadata (even ``null``) on the message itself."""
    meta = _meta_of(message)
    return meta is not None and SESSION_META_KEY in meta


def _own_session_id(message: dict[str, Any]) -> str | None:
    meta = _meta_of(message)
    session = meta.get(SESSION_META_KEY) if meta is not None else None
    value = session.get("sessionId") if isinstance(session, dict) else None
    return value if isinstance(value, str) else None


def _first_event_has_data(output: bytes) -> bool:
    """Whether the first event in ``output`` (complete events, as the rewriter emits them) has a data field."""
    for line in _EOL.split(output):
        if not line:
            return False  # the blank line that ends the first event
        if line.partition(b":")[0] == b"data":
            return True
    return False


def _json_messages(body: bytes) -> list[Any]:
    parsed = _loads(body) if body else None
    if isinstance(parsed, list):
        return parsed
    return [parsed] if isinstance(parsed, dict) else []


def _sse_messages(body: bytes) -> list[Any]:
    found: list[Any] = []

    def collect(data: str) -> None:
        parsed = _loads(data.encode())
        if parsed is not None:
            found.append(parsed)

    rewriter = SSERewriter(collect, once=False)
    rewriter.feed(body)
    return found


def _failure(reply: dict[str, Any] | None, status: int, retry_after: str | None) -> _Failure:
    error = reply.get("error") if reply is not None else None
    if isinstance(error, dict) and isinstance(error.get("code"), int):
        message = error.get("message")
        return _Failure(
            error["code"], message if isinstance(message, str) else "", error.get("data"), status, retry_after
        )
    if status == 404:
        return _Failure(METHOD_NOT_FOUND, "Method not found (HTTP 404)", None, status, retry_after)
    if status == 503:
        return _Failure(SESSION_STORE_UNAVAILABLE, "Service unavailable (HTTP 503)", None, status, retry_after)
    code = INVALID_REQUEST if 400 <= status < 500 else _INTERNAL_ERROR
    return _Failure(code, f"no JSON-RPC answer (HTTP {status})", None, status if status >= 400 else 500, retry_after)


def _retry_after(value: Any) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _decodable_encodings(value: str) -> str:
    """``Accept-Encoding`` cut to what the observer can read (gzip, deflate): never br or zstd."""
    kept = [item.strip() for item in value.split(",") if item.split(";")[0].strip().lower() in _DECODABLE]
    return ", ".join(kept) or "identity"


class _Inflater:
    """Decodes a ``Content-Encoding`` for observing only: the caller gets the bytes as they came."""

    def __init__(self, encoding: Any) -> None:
        name = str(encoding or "identity").strip().lower()
        self._deflate = name == "deflate"
        self._decoder: Any = None
        self._readable = name in _DECODABLE
        if name in ("gzip", "x-gzip"):
            self._decoder = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif self._deflate:
            self._decoder = zlib.decompressobj()
        elif not self._readable:
            logger.debug("cannot read a %r response: the session echo is not observed", name)

    def __call__(self, chunk: bytes) -> bytes:
        if not self._readable:
            return b""
        if self._decoder is None:
            return chunk
        try:
            return bytes(self._decoder.decompress(chunk))
        except zlib.error:
            if self._deflate:
                # Some servers send raw deflate without the zlib wrapper.
                self._deflate = False
                self._decoder = zlib.decompressobj(-zlib.MAX_WBITS)
                return self(chunk)
            self._readable = False
            return b""

"""The session transport, written once for both HTTP libraries.

:class:`SessionTransportBase` stamps the held session into each outgoing
JSON-RPC POST, reads the server's echo from JSON and SSE answers as they pass,
and retries by the policy described in ``docs/client.md``. ``SessionTransport``
(httpx2) and ``HttpxSessionTransport`` (httpx) name their library module in
``_library`` and inherit its ``AsyncBaseTransport``: the two libraries differ
in module name only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from types import ModuleType
from typing import ClassVar, Generic, Literal, Protocol, TypeVar

import anyio

from .._wire import jsonrpc
from .._wire.protocol import METHOD_NOT_FOUND, MODERN_VERSION, SESSION_STORE_UNAVAILABLE
from ..profiles import PROFILES, WireProfile
from ._incoming import Failure, ResponseLike, ResponseT
from ._keeper import ChangeHook, SessionKeeper
from ._lifecycle import SessionLifecycle
from ._outgoing import Attempt, Endpoint, Headers, OutgoingPost, RequestLike, stamp
from ._session import RetryPolicy, SessionHandle
from ._verdict import Verdict, read_answer

logger = logging.getLogger("mcp_sessions.client")


RequestT = TypeVar("RequestT", bound=RequestLike)
RequestT_contra = TypeVar("RequestT_contra", bound=RequestLike, contravariant=True)
ResponseT_co = TypeVar("ResponseT_co", bound=ResponseLike, covariant=True)


class InnerTransport(Protocol[RequestT_contra, ResponseT_co]):
    """The transport a session transport wraps (an ``AsyncBaseTransport`` of either library)."""

    async def handle_async_request(self, request: RequestT_contra) -> ResponseT_co: ...
    async def aclose(self) -> None: ...


class SessionTransportBase(Generic[RequestT, ResponseT]):
    """Create, use, delete and inspect the session a transport holds; see :class:`SessionTransport`."""

    _library: ClassVar[ModuleType]

    def __init__(
        self,
        transport: InnerTransport[RequestT, ResponseT] | None = None,
        *,
        session: SessionHandle | None = None,
        auto_create: bool = True,
        recreate: bool = False,
        delete_on_close: bool = False,
        retry: RetryPolicy | None = None,
        on_change: ChangeHook | None = None,
        close_timeout: float = 5.0,
        close_transport: bool = True,
        profile: str | WireProfile = "draft",
    ) -> None:
        if session is not None and not isinstance(session, SessionHandle):
            raise TypeError("session must be a SessionHandle (SessionHandle.from_dict(saved) resumes a saved one)")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError("retry must be a RetryPolicy")
        if close_timeout < 0:
            raise ValueError("close_timeout must be 0 seconds or more")
        self._keeper = SessionKeeper(SessionHandle() if session is None else session, on_change, _profile(profile))
        self._retry = RetryPolicy() if retry is None else retry
        self._lifecycle = SessionLifecycle(self._post, self._keeper, self._retry)
        self._inner: InnerTransport[RequestT, ResponseT] = (
            self._library.AsyncHTTPTransport() if transport is None else transport
        )
        self._auto_create = auto_create
        self._recreate = recreate
        self._delete_on_close = delete_on_close
        self._close_timeout = close_timeout
        self._close_transport = close_transport
        self._endpoint: Endpoint | None = None  # that of the last request that was not connection set-up
        self._create_lock = anyio.Lock()
        self._closed = False

    @property
    def session(self) -> SessionHandle:
        """The held session: inspect it (``id``, ``expires_at``, ``state``) or persist it (``to_dict()``)."""
        return self._keeper.session

    @property
    def supports_sessions(self) -> bool | None:
        """What the server said: ``True`` (advertised), ``False`` (not advertised, or -32601), ``None`` (not yet)."""
        return self._keeper.supported

    # -- the caller's requests ------------------------------------------------------------

    async def handle_async_request(self, request: RequestT) -> ResponseT:
        """Send one request through the wrapped transport, with the session where it belongs."""
        if request.method == "DELETE" and self._delete_on_close and self.session.token is not None:
            await self._delete_before_close()  # a 2025 transport session ends: the server takes the delete in it
        content_type = request.headers.get("content-type")
        if request.method != "POST" or not (content_type or "").lower().startswith("application/json"):
            return await self._inner.handle_async_request(request)
        post = OutgoingPost.parse(request, await request.aread(), self._keeper.profile)
        if post is None:
            return await self._inner.handle_async_request(request)
        if not post.only_setup:
            self._endpoint = Endpoint.learn(post)
        try:
            return await self._exchange(post)
        finally:
            await self._keeper.report_changes()

    async def _exchange(self, post: OutgoingPost) -> ResponseT:
        """Send ``post`` until its answer is one to deliver: retries by the policy, a new session at most once."""
        started = time.monotonic()
        retries = 0
        session_retried = False
        while True:
            token = await self._token_for(post, force_create=session_retried)
            if isinstance(token, Failure):
                return self._refusal(post, token)
            attempt = stamp(post, token, self.session.state)
            response = await self._post(post.url, attempt.headers, attempt.body, post.extensions, "POST")
            verdict = await read_answer(self._library, response, post, attempt, self._keeper)
            reason = self._retry_reason(post, attempt, verdict)
            delay = self._retry._next_delay(retries, started, verdict.retry_after) if reason == "unavailable" else None
            if delay is not None:
                await verdict.discard()
                logger.info("server unavailable (-32010 or HTTP 503): retry %d in %.2f s", retries + 1, delay)
                await anyio.sleep(delay)
                retries += 1
            elif reason in ("not_found", "required") and not session_retried:
                await verdict.discard()
                logger.info("retrying once with a new session after %s", reason.replace("_", " "))
                session_retried = True
            else:
                return verdict.response

    def _retry_reason(
        self, post: OutgoingPost, attempt: Attempt, verdict: Verdict[ResponseT]
    ) -> Literal["unavailable", "not_found", "required"] | None:
        """Why to send ``post`` again rather than deliver this answer, if the policy says to."""
        errors = [m for m in verdict.deciding if isinstance(m, dict) and isinstance(m.get("error"), dict)]
        codes = {jsonrpc.error_code(e) for e in errors}
        if verdict.response.status_code == 503 or SESSION_STORE_UNAVAILABLE in codes:
            return "unavailable"
        gone = self._keeper.gone_codes
        if self._recreate and any(jsonrpc.error_code(e) in gone and e.get("id") in attempt.stamped_ids for e in errors):
            return "not_found"
        if (
            not self._keeper.required_codes.isdisjoint(codes)
            and self._auto_create
            and attempt.token is None
            and not post.handles_own_session
        ):
            return "required"
        return None

    async def _token_for(self, post: OutgoingPost, *, force_create: bool) -> str | Failure | None:
        """The token to stamp, creating a session first if this request calls for one; a refused create's failure."""
        self._keeper.drop_if_expired()
        if self.session.token is not None:
            return self.session.token
        if not (force_create or (self._auto_create and self._keeper.supported is not False and post.triggers_create)):
            return None
        async with self._create_lock:
            if self.session.token is None or self.session.expired():  # another request may have created it
                failure = await self._lifecycle.create(Endpoint.learn(post))
                if failure is not None and failure.code != METHOD_NOT_FOUND:  # -32601: no sessions, send without
                    return failure
        return self.session.token

    def _refusal(self, post: OutgoingPost, failure: Failure) -> ResponseT:
        """Answer the caller's POST with the error that creating its session met, under its own request ids."""
        answers = [jsonrpc.error(rid, failure.code, failure.message, failure.data) for rid in post.request_ids]
        body = jsonrpc.dumps(answers if post.batch else answers[0])
        headers = [("content-type", "application/json")]
        if failure.retry_after is not None:
            headers.append(("retry-after", failure.retry_after))
        refusal: ResponseT = self._library.Response(failure.status, headers=headers, content=body)
        return refusal

    async def _post(
        self, url: object, headers: Headers, body: bytes, extensions: Mapping[str, object], method: str
    ) -> ResponseT:
        """Send a POST (or ``method``) with exactly these headers and body through the wrapped transport."""
        request = self._library.Request(method, url, headers=headers, content=body, extensions=dict(extensions))
        return await self._inner.handle_async_request(request)

    # -- the explicit API -------------------------------------------------------------------

    async def create(
        self,
        url: str | None = None,
        *,
        protocol_version: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> SessionHandle:
        """Create a session now, replacing any held one (which is forgotten, not deleted).

        ``url`` is the MCP endpoint; without it, the endpoint of the last request
        this transport sent. ``protocol_version`` picks the era of the request
        (default ``2026-07-28``) and ``headers`` are added to it (for example
        ``Authorization``: this request does not pass through the client's auth). On the 2025 wire
        with no ``Mcp-Session-Id`` among them, a transport session of its own is opened first
        (``initialize``) and ended after.
        Raises :class:`SessionError` if the server refuses (``-32601``: the
        server has no sessions).
        """
        endpoint = self._endpoint_for(url, protocol_version, headers)
        async with self._create_lock:
            failure = await self._lifecycle.create(endpoint)
        if failure is not None:
            raise failure.error()
        if self._endpoint is None:
            self._endpoint = endpoint
        await self._keeper.report_changes()
        return self.session

    async def delete(
        self,
        url: str | None = None,
        *,
        protocol_version: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> bool:
        """Delete the held session on the server and forget it.

        ``True`` if the server deleted it, ``False`` if there was none or the
        server no longer knew it (``-32043``). Other refusals raise
        :class:`SessionError`. ``url``, ``protocol_version`` and ``headers`` as
        for :meth:`create`.
        """
        if self.session.token is None:
            return False
        endpoint = self._endpoint_for(url, protocol_version, headers)
        try:
            return await self._lifecycle.delete(endpoint)
        finally:
            await self._keeper.report_changes()

    async def aclose(self) -> None:
        """Delete the session if ``delete_on_close`` (bounded by ``close_timeout``), then close the wrapped transport.

        Failing to delete is logged, never raised. The wrapped transport is
        closed too, unless the transport was built with ``close_transport=False``.
        """
        if self._closed:
            return
        self._closed = True
        try:
            if self._delete_on_close and self.session.token is not None:
                await self._delete_before_close()
        finally:
            if self._close_transport:
                await self._inner.aclose()

    async def _delete_before_close(self) -> None:
        sid = self.session.id
        if self._endpoint is None:
            logger.warning("session %s not deleted on close: no request has named its server", sid)
            return
        with anyio.move_on_after(self._close_timeout) as scope:
            try:
                await self._lifecycle.delete(self._endpoint)
            except Exception as exc:
                logger.warning("could not delete session %s on close: %s", sid, exc)
            finally:
                await self._keeper.report_changes()
        if scope.cancelled_caught:
            logger.warning("could not delete session %s on close: no answer in %s s", sid, self._close_timeout)

    def _endpoint_for(
        self, url: str | None, protocol_version: str | None, headers: Mapping[str, str] | None
    ) -> Endpoint:
        """Where an explicit create or delete goes: ``url`` if given, else the last request's endpoint."""
        if self._closed:
            raise RuntimeError(
                "this transport is closed: build a new one (SessionTransport(session=...) keeps the session)"
            )
        if url is not None:
            return Endpoint.explicit(url, protocol_version or MODERN_VERSION, headers)
        if self._endpoint is None:
            raise ValueError("no MCP endpoint is known yet: pass url= (the server's MCP endpoint)")
        return self._endpoint


def _profile(profile: str | WireProfile) -> WireProfile:
    """The wire the shim speaks: ``"draft"`` (the default) or ``"strawman"``, or such a profile itself."""
    chosen = profile if isinstance(profile, WireProfile) else PROFILES.get(profile)
    if chosen is None or chosen.client is None:
        speaks = ", ".join(name for name, p in PROFILES.items() if p.client is not None)
        raise ValueError(f"the session client speaks the wires {speaks}, not {profile!r}")
    return chosen

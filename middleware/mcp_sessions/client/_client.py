"""The half of the session transports that does not depend on the HTTP library.

:class:`SessionClient` stamps the held session into each outgoing JSON-RPC
POST, reads the server's echo from JSON and SSE answers as they pass, and
retries by the policy described in ``docs/client.md``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Final, Generic

import anyio

from .._wire import jsonrpc
from .._wire.protocol import METHOD_NOT_FOUND, MODERN_VERSION
from ..profiles import DRAFT, WireProfile
from ._adapter import HttpAdapter, RequestT, ResponseT
from ._answers import Failure
from ._endpoint import Endpoint
from ._keeper import ChangeHook, SessionKeeper
from ._lifecycle import SessionLifecycle
from ._outgoing import OutgoingPost, stamp
from ._session import RetryPolicy, SessionHandle
from ._verdict import AnswerReader, Verdict

__all__ = ["SessionClient"]

logger = logging.getLogger("mcp_sessions.client")

_DEFAULT_TIMEOUT: Final = 30.0


class _CreateFailed(Exception):
    """Creating the session failed: answer the caller's request with this failure."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class SessionClient(Generic[RequestT, ResponseT]):
    """Sessions for every JSON-RPC POST sent through it; see ``docs/client.md``."""

    def __init__(
        self,
        adapter: HttpAdapter[RequestT, ResponseT],
        *,
        session: SessionHandle | None,
        auto_create: bool,
        recreate: bool,
        delete_on_close: bool,
        retry: RetryPolicy,
        on_change: ChangeHook | None,
        close_timeout: float,
        owns_transport: bool,
        profile: WireProfile = DRAFT,
    ) -> None:
        if session is not None and not isinstance(session, SessionHandle):
            raise TypeError("session must be a SessionHandle (SessionHandle.from_dict(saved) resumes a saved one)")
        if not isinstance(retry, RetryPolicy):
            raise TypeError("retry must be a RetryPolicy")
        if close_timeout < 0:
            raise ValueError("close_timeout must be 0 seconds or more")
        self.adapter = adapter
        self.keeper = SessionKeeper(SessionHandle() if session is None else session, on_change, profile)
        self.lifecycle = SessionLifecycle(adapter, self.keeper, retry)
        self.answers = AnswerReader(adapter, self.keeper, recreate=recreate, auto_create=auto_create)
        self.auto_create = auto_create
        self.delete_on_close = delete_on_close
        self.retry = retry
        self.close_timeout = close_timeout
        self.owns_transport = owns_transport
        self._endpoint: Endpoint | None = None
        self._create_lock = anyio.Lock()
        self._closed = False

    @property
    def session(self) -> SessionHandle:
        """The held session."""
        return self.keeper.session

    # -- the caller's requests ------------------------------------------------------------

    async def send(self, request: RequestT) -> ResponseT:
        """Send the caller's request: JSON-RPC POSTs with the session, anything else untouched."""
        if request.method != "POST" or not _is_json(request.headers.get("content-type")):
            return await self.adapter.send(request)
        post = OutgoingPost.parse(
            request.url,
            request.headers.multi_items(),
            dict(request.extensions),
            await request.aread(),
            request.headers.get("mcp-protocol-version"),
            self.keeper.profile,
        )
        if post is None:
            return await self.adapter.send(request)
        if not post.only_setup:
            self._endpoint = Endpoint.learn(post)
        try:
            return await self._exchange(post)
        finally:
            await self.keeper.report_changes()

    async def _exchange(self, post: OutgoingPost) -> ResponseT:
        """Send ``post`` until its answer is one to deliver: retries by the policy, a new session at most once."""
        started = time.monotonic()
        retries = 0
        session_retried = False
        while True:
            try:
                token = await self._token_for(post, force_create=session_retried)
            except _CreateFailed as refused:
                return self._refusal(post, refused.failure)
            meta = self.session.meta() if token is not None else None
            attempt = stamp(post, token, meta)
            response = await self.adapter.send(
                self.adapter.post(post.url, attempt.headers, attempt.body, post.extensions)
            )
            verdict = await self.answers.read(post, attempt, response)
            if verdict.reason == "unavailable" and await self._wait_to_retry(verdict, retries, started):
                retries += 1
                continue
            if verdict.reason in ("not_found", "required") and not session_retried:
                await verdict.discard()
                logger.info("retrying once with a new session after %s", verdict.reason.replace("_", " "))
                session_retried = True
                continue
            return verdict.deliver()

    async def _wait_to_retry(self, verdict: Verdict[ResponseT], retries: int, started: float) -> bool:
        """Discard an unavailable answer and wait, if the policy allows another try."""
        if retries >= self.retry.attempts:
            return False
        delay = self.retry.delay(retries, verdict.retry_after)
        if time.monotonic() - started + delay > self.retry.deadline:
            return False
        await verdict.discard()
        logger.info("server unavailable (-32010 or HTTP 503): retry %d in %.2f s", retries + 1, delay)
        await anyio.sleep(delay)
        return True

    async def _token_for(self, post: OutgoingPost, *, force_create: bool) -> str | None:
        """The token to stamp, creating a session first if this request calls for one."""
        self.keeper.drop_if_expired()
        if self.session.token is not None:
            return self.session.token
        wanted = force_create or (self.auto_create and self.keeper.supported is not False and post.triggers_create)
        if not wanted:
            return None
        async with self._create_lock:
            if self.session.token is None or self.session.expired():  # another request may have created it
                failure = await self.lifecycle.create(Endpoint.learn(post))
                if failure is not None:
                    if failure.code != METHOD_NOT_FOUND:
                        raise _CreateFailed(failure)
                    self.keeper.mark_unsupported()
        return self.session.token

    def _refusal(self, post: OutgoingPost, failure: Failure) -> ResponseT:
        """Answer the caller's POST with the error that creating its session met, under its own request ids."""
        answers = [jsonrpc.error(rid, failure.code, failure.message, failure.data) for rid in post.request_ids]
        body = jsonrpc.dumps(answers if post.batch else answers[0])
        headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
        if failure.retry_after is not None:
            headers.append(("retry-after", failure.retry_after))
        return self.adapter.synthetic(failure.status, headers, body)

    # -- the explicit API -------------------------------------------------------------------

    def endpoint(self, url: str | None, protocol_version: str | None, headers: Mapping[str, str] | None) -> Endpoint:
        """Where an explicit create or delete goes: ``url`` if given, else the last request's endpoint."""
        if self._closed:
            raise RuntimeError(
                "this transport is closed: build a new one (SessionTransport(session=...) keeps the session)"
            )
        if url is not None:
            return Endpoint.explicit(url, protocol_version or MODERN_VERSION, headers, _DEFAULT_TIMEOUT)
        if self._endpoint is None:
            raise ValueError("no MCP endpoint is known yet: pass url= (the server's MCP endpoint)")
        return self._endpoint

    async def create(self, endpoint: Endpoint) -> SessionHandle:
        """Create a session now, replacing the held one; :class:`SessionError` if the server refuses."""
        async with self._create_lock:
            failure = await self.lifecycle.create(endpoint)
        if failure is not None:
            if failure.code == METHOD_NOT_FOUND:
                self.keeper.mark_unsupported()
            raise failure.error()
        if self._endpoint is None:
            self._endpoint = endpoint
        await self.keeper.report_changes()
        return self.session

    async def delete(self, endpoint: Endpoint) -> bool:
        """Delete the held session on the server and forget it (see :meth:`SessionLifecycle.delete`)."""
        try:
            return await self.lifecycle.delete(endpoint)
        finally:
            await self.keeper.report_changes()

    async def aclose(self) -> None:
        """Delete the session if asked to (bounded, never raising), then close the wrapped transport."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.delete_on_close and self.session.token is not None:
                await self._delete_on_close()
        finally:
            if self.owns_transport:
                await self.adapter.aclose()

    async def _delete_on_close(self) -> None:
        sid = self.session.id
        if self._endpoint is None:
            logger.warning("session %s not deleted on close: no request has named its server", sid)
            return
        with anyio.move_on_after(self.close_timeout) as scope:
            try:
                await self.delete(self._endpoint)
            except Exception as exc:
                logger.warning("could not delete session %s on close: %s", sid, exc)
        if scope.cancelled_caught:
            logger.warning("could not delete session %s on close: no answer in %s s", sid, self.close_timeout)


def _is_json(content_type: str | None) -> bool:
    return isinstance(content_type, str) and content_type.lower().startswith("application/json")

"""The client's own ``sessions/create`` and ``sessions/delete``, retried by the policy."""

from __future__ import annotations

import itertools
import logging
import time
from typing import Generic

import anyio

from .._wire import jsonrpc
from .._wire.protocol import INTERNAL_ERROR
from ._adapter import HttpAdapter, RequestT, ResponseLike, ResponseT
from ._answers import Failure, Inflater, failure_of, json_messages, read_all, retry_after, sse_messages
from ._endpoint import Endpoint
from ._keeper import SessionKeeper
from ._outgoing import Era
from ._session import RetryPolicy

__all__ = ["SessionLifecycle"]

logger = logging.getLogger("mcp_sessions.client")


class SessionLifecycle(Generic[RequestT, ResponseT]):
    """Creates and deletes the held session with requests of the client's own."""

    def __init__(self, adapter: HttpAdapter[RequestT, ResponseT], keeper: SessionKeeper, retry: RetryPolicy) -> None:
        self._adapter = adapter
        self._keeper = keeper
        self._retry = retry
        self._ids = itertools.count(1)

    async def create(self, endpoint: Endpoint) -> Failure | None:
        """Create a session and hold it; the server's refusal, if it refused."""
        profile, wire = self._keeper.profile, self._keeper.wire
        params = _with_envelope(wire.create_params(self._keeper.session.label), endpoint)
        method = profile.create_method or ""
        reply = await self._call(endpoint, self._next_id(), method, params or None, None)
        if isinstance(reply, Failure):
            return reply
        created = wire.created(reply)
        if created is None:
            return Failure(INTERNAL_ERROR, f"the {method} result has no session")
        self._keeper.adopt(*created)
        return None

    async def delete(self, endpoint: Endpoint) -> bool:
        """Delete the held session and forget it: ``False`` if there was none or the server no longer knew it.

        Other refusals raise :class:`SessionError`.
        """
        token = self._keeper.session.token
        if token is None:
            return False
        wire = self._keeper.wire
        params = _with_envelope(wire.delete_params(token), endpoint)
        reply = await self._call(endpoint, self._next_id(), wire.delete_method, params, token)
        if isinstance(reply, Failure):
            if reply.code in self._keeper.gone_codes:
                self._keeper.drop(token, "the server no longer knows it")
                return False
            raise reply.error()
        if not wire.deleted(reply):
            self._keeper.drop(token, "the server no longer knows it")
            return False
        self._keeper.drop(token, "it was deleted")
        return True

    def _next_id(self) -> str:
        return f"mcp-sessions-{next(self._ids)}"

    async def _call(
        self, endpoint: Endpoint, request_id: str, method: str, params: dict[str, object] | None, token: str | None
    ) -> dict[str, object] | Failure:
        """Send one request, retrying a busy server by the policy; its result or its failure."""
        body = jsonrpc.dumps(jsonrpc.request(request_id, method, params))
        headers = endpoint.headers_for(method, token, len(body))
        started = time.monotonic()
        retries = 0
        while True:
            response = await self._adapter.send(self._adapter.post(endpoint.url, headers, body, endpoint.extensions))
            reply = _reply_to(request_id, response, await read_all(response))
            result = reply.get("result") if reply is not None else None
            if isinstance(result, dict) and response.status_code < 300:
                return result
            failure = failure_of(reply, response.status_code, response.headers.get("retry-after"))
            if failure.retryable and retries < self._retry.attempts:
                delay = self._retry.delay(retries, retry_after(failure.retry_after))
                if time.monotonic() - started + delay <= self._retry.deadline:
                    logger.info("%s: server busy, retry %d in %.2f s", method, retries + 1, delay)
                    await anyio.sleep(delay)
                    retries += 1
                    continue
            return failure


def _with_envelope(params: dict[str, object], endpoint: Endpoint) -> dict[str, object]:
    """The params with the endpoint's 2026-07-28 ``_meta`` envelope beside what the wire put there."""
    if endpoint.era is not Era.PER_REQUEST:
        return params
    meta = params.get("_meta")
    rest = {k: v for k, v in params.items() if k != "_meta"}
    return {"_meta": {**endpoint.envelope, **(meta if isinstance(meta, dict) else {})}, **rest}


def _reply_to(request_id: str, response: ResponseLike, raw: bytes) -> dict[str, object] | None:
    """The answer to ``request_id`` in a JSON or SSE body, if there is one."""
    content_type = str(response.headers.get("content-type") or "").lower()
    text = Inflater(response.headers.get("content-encoding"))(raw)
    if content_type.startswith("text/event-stream"):
        candidates = sse_messages(text)
    elif content_type.startswith("application/json"):
        candidates = json_messages(text)
    else:
        candidates = []
    return next((m for m in candidates if isinstance(m, dict) and m.get("id") == request_id), None)

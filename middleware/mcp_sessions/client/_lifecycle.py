"""The client's own ``sessions/create`` and ``sessions/delete``, retried by the policy."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace

import anyio

from .._version import __version__
from .._wire import jsonrpc
from .._wire.protocol import INTERNAL_ERROR, METHOD_NOT_FOUND, Era
from ._incoming import Failure, ResponseLike, body_messages, failure_of, read_all, retry_after
from ._keeper import SessionKeeper
from ._outgoing import Endpoint, Headers
from ._session import RetryPolicy

logger = logging.getLogger("mcp_sessions.client")

Post = Callable[[object, Headers, bytes, Mapping[str, object], str], Awaitable[ResponseLike]]
"""Send a request (url, headers, body, extensions, HTTP method) through the wrapped transport."""


class SessionLifecycle:
    """Creates and deletes the held session with requests of the client's own, sent with ``post``."""

    def __init__(self, post: Post, keeper: SessionKeeper, retry: RetryPolicy) -> None:
        self._post = post
        self._keeper = keeper
        self._retry = retry
        self._ids = itertools.count(1)

    async def create(self, endpoint: Endpoint) -> Failure | None:
        """Create a session and hold it; the server's refusal, if it refused (``-32601``: it has no sessions)."""
        method = self._keeper.profile.create_method or ""
        async with self._in_transport_session(endpoint) as endpoint:
            params = self._keeper.wire.create_params(self._keeper.session.label)
            reply = await self._call(endpoint, method, params, None)
        if isinstance(reply, Failure):
            if reply.code == METHOD_NOT_FOUND:
                self._keeper.mark_unsupported()
            return reply
        created = self._keeper.wire.created(reply)
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
        async with self._in_transport_session(endpoint) as endpoint:
            reply = await self._call(endpoint, wire.delete_method, wire.delete_params(token), token)
        if isinstance(reply, Failure) and reply.code not in self._keeper.gone_codes:
            raise reply.error()
        if isinstance(reply, Failure) or not wire.deleted(reply):
            self._keeper.drop(token, "the server no longer knows it")
            return False
        self._keeper.drop(token, "it was deleted")
        return True

    @asynccontextmanager
    async def _in_transport_session(self, endpoint: Endpoint) -> AsyncIterator[Endpoint]:
        """``endpoint`` in a transport session of its own on the 2025 wire, where a stateful server takes no
        request outside one: opened with the handshake when the caller named none, ended (DELETE) after."""
        headers = dict(endpoint.headers)
        if endpoint.era is not Era.LEGACY or "mcp-session-id" in headers:
            yield endpoint
            return
        params: dict[str, object] = {"protocolVersion": headers.get("mcp-protocol-version"), "capabilities": {}}
        params["clientInfo"] = {"name": "mcp-sessions", "version": __version__}
        body, framed = endpoint.request(f"mcp-sessions-{next(self._ids)}", "initialize", params, None)
        response = await self._post(endpoint.url, framed, body, endpoint.extensions, "POST")
        await read_all(response)
        transport_id = response.headers.get("mcp-session-id")
        if transport_id is None:  # a stateless server: every request stands alone
            yield endpoint
            return
        opened = replace(endpoint, headers=[*endpoint.headers, ("mcp-session-id", transport_id)])
        body = jsonrpc.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
        framed = [*opened.headers, ("content-length", str(len(body)))]
        await read_all(await self._post(endpoint.url, framed, body, endpoint.extensions, "POST"))
        try:
            yield opened
        finally:
            with anyio.CancelScope(shield=True):
                await read_all(await self._post(endpoint.url, opened.headers, b"", endpoint.extensions, "DELETE"))

    async def _call(
        self, endpoint: Endpoint, method: str, params: dict[str, object], token: str | None
    ) -> dict[str, object] | Failure:
        """Send one request, retrying a busy server by the policy; its result or its failure."""
        request_id = f"mcp-sessions-{next(self._ids)}"
        body, headers = endpoint.request(request_id, method, params, token)
        started = time.monotonic()
        retries = 0
        while True:
            response = await self._post(endpoint.url, headers, body, endpoint.extensions, "POST")
            messages = body_messages(response, await read_all(response))
            reply = next((m for m in messages if isinstance(m, dict) and m.get("id") == request_id), None)
            reply = reply if reply is not None else _lone_error(messages)
            result = reply.get("result") if reply is not None else None
            if isinstance(result, dict) and response.status_code < 300:
                return result
            failure = failure_of(reply, response)
            wait = retry_after(failure.retry_after)
            delay = self._retry._next_delay(retries, started, wait) if failure.retryable else None
            if delay is None:
                return failure
            logger.info("%s: server busy, retry %d in %.2f s", method, retries + 1, delay)
            await anyio.sleep(delay)
            retries += 1


def _lone_error(messages: list[object]) -> dict[str, object] | None:
    """The answer's one message when it is an error under another id: the server's refusal of the one request
    sent. A server that could not read the request's id answers with ``null`` (JSON-RPC 2.0 §5); mcp 1.x
    answers a request outside its transport session with ``"server-error"`` ("Bad Request: Missing session ID")."""
    [message] = messages if len(messages) == 1 else [None]
    return message if isinstance(message, dict) and "error" in message and "method" not in message else None

"""One bounded reader of an authorization server's answer, for the token exchange and the users' sign-ins alike.

Both ask strangers (token endpoints, metadata, registration, key sets) and read each answer the same way: within a
timeout, at most :data:`MAX_ANSWER` bytes, a failure to reach the server or to hear it out a 502 or 504 of the
caller's own error and wording. Here, not in ``_exchange`` or ``_oauth``, so that neither imports the other for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import anyio

from ..._wire import jsonrpc

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger("mcp_sessions.gateway")

MAX_ANSWER: Final = 64 * 1024
"""The most of a server's answer read."""


async def read_answer(
    http: httpx.AsyncClient,
    request: httpx.Request,
    seconds: float,
    server: str,
    failed: Callable[[str, int], Exception],
) -> tuple[httpx.Response, Any]:
    """The answer to ``request`` (closed; its status and headers still readable) and its JSON (``None`` if not),
    within ``seconds`` and :data:`MAX_ANSWER` bytes; else ``failed(description, status)`` raised, each description
    beginning with ``server`` (how the caller names the server to its client): 504 for no answer in time, 502 for
    one too long, a connection closed without one, or a server not reached. The log names the host, never the
    request."""
    import httpx  # loaded as the caller's client was made

    host = request.url.host
    body = bytearray()
    try:
        with anyio.fail_after(seconds):
            response = await http.send(request, stream=True)
            try:
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_ANSWER:
                        raise failed(f"{server}'s answer is too long", 502)
            finally:
                await response.aclose()
    except TimeoutError:
        logger.warning("mcp-sessions gateway: %s did not answer in %g s", host, seconds)
        raise failed(f"{server} did not answer in time", 504) from None
    # httpx's failures of a connection it made (a ConnectError or ConnectTimeout is one never made): the server
    # reset it (ReadError, WriteError) or ended it before a whole answer (RemoteProtocolError).
    except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as exc:
        failure = type(exc).__name__
        logger.warning("mcp-sessions gateway: %s closed the connection without an answer: %s", host, failure)
        raise failed(f"{server} closed the connection without an answer", 502) from None
    except httpx.HTTPError as exc:
        logger.warning("mcp-sessions gateway: %s could not be reached: %s", host, type(exc).__name__)
        raise failed(f"{server} could not be reached", 502) from None
    return response, jsonrpc.loads(bytes(body), answer=True, strict=True)  # None, not JSON: judged by its status alone

"""The session transport for httpx2, the HTTP library of the ``mcp`` SDK client."""

from __future__ import annotations

from types import ModuleType
from typing import ClassVar

import httpx2

from ._transport import SessionTransportBase


class SessionTransport(
    SessionTransportBase[httpx2.Request, httpx2.Response],
    httpx2.AsyncBaseTransport,
):
    """An httpx2 transport that gives every MCP request it carries a data-layer session.

    Wrap the transport of an existing client, and the client gets sessions
    without a code change::

        http = httpx2.AsyncClient(transport=SessionTransport())
        async with Client(streamable_http_client(url, http_client=http)) as client:
            await client.call_tool("count", {})  # creates the session, then stamps it

    ``transport`` is the transport to wrap (default: a new
    ``httpx2.AsyncHTTPTransport()``). Configure TLS, HTTP/2 and proxies on it: a
    client given ``transport=`` ignores its own. It is closed with this one,
    unless ``close_transport=False`` (several conversations sharing one
    connection pool).

    ``session`` is the held session (default: none yet); pass
    ``HeldSession.from_dict(saved)`` to resume one. ``auto_create`` creates a
    session on the first request that belongs to a conversation, and again after
    the server answers ``-32044``. ``recreate`` also creates a new session and
    retries once when the server answers ``-32043`` (the session is gone): off
    by default, so that losing server-side state is never silent. ``retry``
    governs ``-32010`` and HTTP 503. ``delete_on_close`` sends
    ``sessions/delete`` when the transport closes, waiting at most
    ``close_timeout`` seconds. ``on_change(session)`` (a function or a
    coroutine function) runs whenever the session is created, updated by an
    echo, or dropped: persist it there.
    """

    _library: ClassVar[ModuleType] = httpx2

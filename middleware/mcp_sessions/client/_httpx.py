"""The session transport for httpx (the ``mcp`` SDK client uses httpx2: see SessionTransport)."""

from __future__ import annotations

from types import ModuleType
from typing import ClassVar

import httpx

from ._transport import SessionTransportBase


class HttpxSessionTransport(
    SessionTransportBase[httpx.Request, httpx.Response],
    httpx.AsyncBaseTransport,
):
    """:class:`SessionTransport` for ``httpx``: the same behaviour, for clients built on httpx.

    The ``mcp`` SDK client (2.x) sends its HTTP through ``httpx2``: use
    :class:`SessionTransport` there. This one is for hand-written JSON-RPC
    clients and other libraries on ``httpx``::

        http = httpx.AsyncClient(transport=HttpxSessionTransport())

    The arguments are those of :class:`SessionTransport`, with ``transport`` an
    ``httpx.AsyncBaseTransport`` (default: a new ``httpx.AsyncHTTPTransport()``).
    """

    _library: ClassVar[ModuleType] = httpx

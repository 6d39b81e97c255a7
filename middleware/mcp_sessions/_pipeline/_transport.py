"""A data-layer session whose id travels in ``Mcp-Session-Id``, in front of a stateful 2025-era server.

SEP-1364 has ``Mcp-Session-Id`` mirror the session in every era, but a
stateful 2025-era server owns that header: it names the server's transport
session. The middleware keeps the transport session inside the data-layer
session: the server still sees its own header on every request of the session,
and the client only ever sees the session's id. A stateless server never sets
the header, so nothing is mapped and the header is dropped before it.

Transport sessions live in the server's process, so an in-process map is
where the binding belongs; it is bounded, oldest first out.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from starlette.types import Message, Scope, Send

from .._session import Session
from .._wire.protocol import MCP_SESSION_ID_HEADER

_MAX_BINDINGS: Final = 100_000


class TransportSessions:
    """The server's transport session id behind each data-layer session, by its stable id."""

    __slots__ = ("_by_session", "_limit")

    def __init__(self, limit: int = _MAX_BINDINGS) -> None:
        self._by_session: OrderedDict[str, bytes] = OrderedDict()
        self._limit = limit

    def adopt(self, session_id: str, transport_id: bytes) -> None:
        """Bind a session to the server's transport session (the one its creating request came in)."""
        self._by_session[session_id] = transport_id
        self._by_session.move_to_end(session_id)
        while len(self._by_session) > self._limit:
            self._by_session.popitem(last=False)

    def bind(self, scope: Scope, send: Send, session: Session, *, opening: bool) -> tuple[Scope, Send]:
        """The scope the server sees (its own header, or none) and a ``send`` that shows the client the session.

        An ``opening`` request (an ``initialize``) goes without a header, so the
        server opens a new transport session, which the session then adopts.
        """
        token = session.token.encode()

        async def send_as_session(message: Message) -> None:
            if message["type"] == "http.response.start":
                shown = []
                for name, value in message.get("headers", ()):
                    if name.lower() == MCP_SESSION_ID_HEADER:
                        self.adopt(session.id, bytes(value))
                        value = token
                    shown.append((name, value))
                message = {**message, "headers": shown}
            await send(message)

        return self.scope_for(scope, None if opening else session.id), send_as_session

    def scope_for(self, scope: Scope, session_id: str | None) -> Scope:
        """``scope`` with the server's own transport session id in ``Mcp-Session-Id`` (none if not known)."""
        transport_id = None if session_id is None else self._by_session.get(session_id)
        headers = [(n, v) for n, v in scope["headers"] if n.lower() != MCP_SESSION_ID_HEADER]
        if transport_id is not None:
            headers.append((MCP_SESSION_ID_HEADER, transport_id))
        return {**scope, "headers": headers}

"""A data-layer session whose id travels in ``Mcp-Session-Id``, in front of a stateful 2025-era server.

SEP-1364 has ``Mcp-Session-Id`` mirror the session in every era, but a
stateful 2025-era server owns that header: it names the server's transport
session. The middleware keeps the transport session inside the data-layer
session: the server still sees its own header on every request of the session,
and the client only ever sees the session's id. A session bound to no transport
session here (its token no longer verifies, or this process never saw one) goes
with an id the server cannot know: a stateful server answers 404, which on the
2025 wire tells the client to initialize again, and a stateless one never reads
the header (it sets none, so nothing is ever bound for it).

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
_UNBOUND: Final = b"mcp-sessions-unbound"
"""The transport session id a session bound to none goes with: no server minted it."""


class TransportSessions:
    """The server's transport session id behind each data-layer session, by its stable id."""

    __slots__ = ("_by_session",)

    def __init__(self) -> None:
        self._by_session: OrderedDict[str, bytes] = OrderedDict()

    def adopt(self, session_id: str, transport_id: bytes) -> None:
        """Bind a session to the server's transport session (the one its creating request came in)."""
        self._by_session[session_id] = transport_id
        self._by_session.move_to_end(session_id)
        while len(self._by_session) > _MAX_BINDINGS:
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

        return self.scope_for(scope, session.id, opening=opening), send_as_session

    def scope_for(self, scope: Scope, session_id: str | None, *, opening: bool = False) -> Scope:
        """``scope`` with the server's own transport session id in ``Mcp-Session-Id``: none for an ``opening``
        request; :data:`_UNBOUND` for a session bound to none (``None``: one whose token did not verify)."""
        headers = [(n, v) for n, v in scope["headers"] if n.lower() != MCP_SESSION_ID_HEADER]
        if not opening:
            transport_id = None if session_id is None else self._by_session.get(session_id)
            headers.append((MCP_SESSION_ID_HEADER, _UNBOUND if transport_id is None else transport_id))
        return {**scope, "headers": headers}

"""The sessions a request's wire names: a data-layer token (:class:`DataLayerSource`), and a 2025-era
transport session the server minted (:class:`TransportSource`).

**Data layer.** The data-layer session a call's wire names: a server-minted token, verified.

**Transport sessions.** Adopted: a session per ``Mcp-Session-Id`` the server minted.

A stateful 2025-era server (the handshake path) mints a transport session id in the ``Mcp-Session-Id`` header
of its ``initialize`` response, and every later request of that connection repeats it. A stock client never
calls ``sessions/create``, but it already has this: adopted, it becomes the session's key, with data in the
store until the transport session ends (``DELETE`` with the header, or ``idle_ttl``).

Trust: an id is adopted only if this middleware saw the server send it in an ``initialize`` response, so a
client cannot pick one (a server that runs stateless sends none, and nothing is adopted). The SDK keeps a
transport session in the one process that minted it, and so does this record: both need a client to come back
to the same replica. The raw id is a bearer value: it is held, compared and recorded only as its keyed digest.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Final

from starlette.types import Message, Scope, Send

from .._bounded import BoundedDict
from .._session import Session, SessionNotFound
from .._tokens import is_session_token
from .._wire import Refusal
from .._wire.protocol import INVALID_REQUEST, MCP_SESSION_ID_HEADER
from ..profiles import Era, InvalidSessionMeta
from ._base import TOO_MANY_SESSIONS_MESSAGE

if TYPE_CHECKING:
    from ._base import CallView, RequestView, SourceContext, SourceDigests, SourceSessions

DEFAULT_MAX_TRANSPORT_SESSIONS: Final = 100_000


class DataLayerSource:
    """The session named where the call's wire carries it (for the draft, ``params._meta``)."""

    name = "data-layer"
    """The source's name, in telemetry."""

    def __init__(self, sessions: SourceSessions) -> None:
        self._sessions = sessions

    @classmethod
    def from_context(cls, context: SourceContext) -> DataLayerSource:
        """The source in a middleware's chain (see ``sources=``)."""
        return cls(context.sessions)

    async def session_for(self, scope: Scope, call: CallView, request: RequestView) -> Session | None:
        """The verified session the call's wire names; ``None`` if none."""
        profile = call.profile
        try:
            ref = profile.carrier.read(call.message)
        except InvalidSessionMeta as exc:
            raise Refusal(INVALID_REQUEST, str(exc), reason="invalid_metadata") from None
        if ref is None:
            return None
        token, state = ref
        header = request.headers.get(MCP_SESSION_ID_HEADER)
        # On 2026-07-28 the header names the session too; in the 2025 era it is the server's transport session.
        if request.era is Era.MODERN and header is not None and header != token.encode("utf-8", "surrogatepass"):
            raise Refusal(
                profile.header_mismatch,
                "Mcp-Session-Id header does not match the session in _meta",
                reason="header_mismatch",
            )
        find = partial(self._sessions.resolve, scope, token, state)
        try:
            found = await request.once((self.name, token, state or ""), find)
        except SessionNotFound as exc:
            raise profile.not_found_refusal(token, exc.reason, exc.session_id) from None
        if found is None:
            raise Refusal(INVALID_REQUEST, TOO_MANY_SESSIONS_MESSAGE, reason="too_many_sessions")
        return found


def is_transport_session_id(value: bytes) -> bool:
    """Whether an ``Mcp-Session-Id`` value can be a transport session (a data-layer token is a JWT)."""
    return 0 < len(value) <= 256 and not is_session_token(value)


class TransportSource:
    """The adopted transport session a handshake-era request's ``Mcp-Session-Id`` names.

    Remembers the digests of the ids the server minted, at most ``max_sessions`` (the least recently used is
    forgotten first: its requests then have no session, as before adoption).
    """

    name = "transport"
    """The source's name, in telemetry."""

    def __init__(
        self, sessions: SourceSessions, digests: SourceDigests, *, max_sessions: int = DEFAULT_MAX_TRANSPORT_SESSIONS
    ) -> None:
        self._sessions = sessions
        self._digests = digests
        self._minted: BoundedDict[str, None] = BoundedDict(max_sessions)

    @classmethod
    def from_context(cls, context: SourceContext) -> TransportSource | None:
        """The source in a middleware's chain (see ``sources=``), with ``adopt_transport_sessions`` only."""
        return cls(context.sessions, context.digests) if context.adopt_transport_sessions else None

    def __len__(self) -> int:
        return len(self._minted)

    async def session_for(self, scope: Scope, call: CallView, request: RequestView) -> Session | None:
        """The adopted session of a minted transport session id; ``None`` for anything else."""
        raw = request.headers.get(MCP_SESSION_ID_HEADER)
        if raw is None or request.era is not Era.LEGACY or not is_transport_session_id(raw):
            return None
        digest = self._digests.transport(raw)
        if digest not in self._minted:
            return None
        self._minted.touch(digest)
        # A batch's elements share the header: its session, touched once.
        return await request.once((self.name, digest), partial(self._sessions.adopt, scope, digest, self.name))

    def minted(self, raw: bytes) -> None:
        """Record an id the server sent in an ``initialize`` response."""
        if not is_transport_session_id(raw):
            return
        self._minted[self._digests.transport(raw)] = None

    def watch_initialize(self, send: Send) -> Send:
        """``send``, recording the transport session id of a successful ``initialize`` response."""

        async def watching_send(message: Message) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 200:
                for name, value in message.get("headers", ()):
                    if name.lower() == MCP_SESSION_ID_HEADER:
                        self.minted(value)
                        break
            await send(message)

        return watching_send

    def watch_delete(self, raw: bytes, send: Send) -> Send:
        """``send``, ending the adopted session when the server accepts a ``DELETE`` of its transport session."""
        digest = self._digests.transport(raw) if is_transport_session_id(raw) else None
        if digest is None or digest not in self._minted:
            return send

        async def watching_send(message: Message) -> None:
            if message["type"] == "http.response.start" and 200 <= message.get("status", 500) < 300:
                self._minted.pop(digest, None)
                await self._sessions.end(digest)
            await send(message)

        return watching_send

"""The express lane: the usual request on a short path; anything else takes the whole pipeline.

The usual request is one JSON-RPC request of the only enabled wire that is
not one of its local methods, nor a method whose result advertises the wire,
and that either names a data-layer session or names none and needs none. For
it, planning, the session sources and forwarding come down to a few checks.
Every check that could go another way declines before anything has happened
(nothing read from the store, nothing sent), and the pipeline then takes the
request from the start, so the lane decides nothing the pipeline would decide
differently. A named session that does not resolve (its token does not verify,
or the store refuses it: revoked, idle, or the store down) is raised as
:class:`Refused`, with the refusal the pipeline gives it, for the pipeline to
answer as it answers any refusal; the store is then not asked twice.

The lane is built only for the configurations whose pipeline does nothing
more for such a request: one wire of the draft's shape (its session in
``params._meta``, echoed in ``result._meta``), no handles, no transport
sessions; and it is taken only while no OpenTelemetry SDK records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Receive, Scope, Send

from ._answers import Refusal
from ._body import Replay
from ._echo import Target, hashable_id
from ._forward import attach
from ._jsonrpc import Watch, fast_loads
from ._plan import era_of
from ._protocol import MCP_PROTOCOL_VERSION_HEADER, MCP_SESSION_ID_HEADER
from ._response import EchoReply
from ._service import SessionRefused, SessionService
from ._session import _current
from .profiles import Echo, SessionCarrier, WireProfile
from .sources.data_layer import refusal_of

if TYPE_CHECKING:
    from asgiref.typing import ASGISendCallable

    from ._policy import Requires
    from .sources.host import HostConversationSource

__all__ = ["Express", "Refused", "express_for"]


class Refused(Exception):
    """The session the request names did not resolve: the pipeline answers with ``refusal``."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.reason)
        self.refusal = refusal


class Express:
    """The short path for the usual request of one wire (see the module's docstring)."""

    __slots__ = (
        "_capability",
        "_declined",
        "_echo",
        "_hosts",
        "_id_member",
        "_meta_key",
        "_profile",
        "_requires",
        "_sessions",
        "_state_member",
        "_watch",
    )

    def __init__(
        self,
        profile: WireProfile,
        *,
        sessions: SessionService,
        hosts: HostConversationSource,
        requires: Requires | None,
        capability: dict[str, dict[str, Any]],
        watch: Watch,
    ) -> None:
        carrier = profile.carrier
        assert isinstance(carrier, SessionCarrier) and isinstance(profile.echo, Echo)
        self._profile = profile
        self._echo = profile.echo
        self._meta_key = carrier.meta_key
        self._id_member = carrier.id_member
        self._state_member = carrier.state_member
        # Methods the lane never takes: the wire's own, and those whose result advertises it.
        self._declined = frozenset((*profile.methods, *profile.advertised_per_request, *profile.advertised_handshake))
        self._sessions = sessions
        # Without telemetry, a host's conversation id matters only when it keeps data (conversation_data).
        self._hosts = None if hosts.data == "off" else hosts
        self._requires = requires
        self._capability = capability
        self._watch = watch

    async def take(
        self, app: ASGIApp, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes], body: bytes
    ) -> bool:
        """Forward the request if it is the usual one; ``False``, having done nothing, if it is not."""
        # An escape could spell a name or a lone surrogate, a repeated name could mean another session
        # to the server, and anything but a plain object is not the usual request: the pipeline reads those.
        if body[:1] != b"{" or self._watch.needs_check(body):
            return False
        try:
            message = fast_loads(body)
        except ValueError:
            return False
        if type(message) is not dict or message.get("jsonrpc") != "2.0" or "id" not in message:
            return False
        method = message.get("method")
        if type(method) is not str or method in self._declined:
            return False
        params = message.get("params")
        meta = params.get("_meta") if type(params) is dict else None
        named = meta.get(self._meta_key) if type(meta) is dict else None
        if named is None:  # no session named (null is none)
            if self._hosts is not None and self._hosts.find(headers, meta) is not None:
                return False  # a host's conversation with its data: the pipeline adopts it
            requires = self._requires
            if requires is not None and requires(method, params):
                return False  # refused for want of a session: the pipeline answers
            await app(scope, Replay(body, receive), send)
            return True
        # The carrier's rules (SessionCarrier.read) for a plain object: anything else, the pipeline refuses.
        if type(named) is not dict:
            return False
        token = named.get(self._id_member)
        state = None if self._state_member is None else named.get(self._state_member)
        if type(token) is not str or (state is not None and type(state) is not str):
            return False
        era = era_of(headers.get(MCP_PROTOCOL_VERSION_HEADER))
        header = headers.get(MCP_SESSION_ID_HEADER)
        if header is not None and era.session_header and header != token.encode():
            return False  # the header names another session: the pipeline refuses
        try:
            session = await self._sessions.resolve(scope, token, state)
        except SessionRefused as exc:
            raise Refused(refusal_of(self._profile, token, exc)) from None
        except Refusal as refusal:  # the store is unavailable
            raise Refused(refusal) from None
        target = Target(self._profile, session, advertised=(), capability=self._capability, era=era, operation=None)
        typed_send: ASGISendCallable = send  # type: ignore[assignment]  # an annotation, not a call
        reply = EchoReply(typed_send, hashable_id(message["id"]), target, self._echo)
        context = attach(scope, session)
        try:
            await app(scope, Replay(body, receive), reply.send)
        finally:
            _current.reset(context)
        return True


def express_for(
    profiles: Sequence[WireProfile], *, simple: bool, handles: object, transports: object
) -> WireProfile | None:
    """The wire the lane serves, when the configuration lets the pipeline do nothing more than it does."""
    if len(profiles) != 1 or not simple or handles is not None or transports is not None:
        return None
    profile = profiles[0]
    carrier = profile.carrier
    if (
        not isinstance(carrier, SessionCarrier)
        or not isinstance(profile.echo, Echo)
        or profile.unknown_is_no_session
        or profile.header_every_era
        or profile.declared is not None
    ):
        return None
    return profile

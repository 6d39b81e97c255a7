"""The data-layer session a call's wire names: a server-minted token, verified."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from starlette.types import Scope

from .._session import Session, SessionNotFound, SessionService
from .._wire import Refusal
from .._wire.protocol import INVALID_REQUEST, Era
from ..profiles import InvalidSessionMeta
from ._base import MAX_SESSIONS_PER_REQUEST, TOO_MANY_SESSIONS, once_per_request

if TYPE_CHECKING:
    from .._plan import Call, Plan
    from ._base import SourceContext


class DataLayerSource:
    """The session named where the call's wire carries it (for the draft, ``params._meta``)."""

    name = "data-layer"
    """The source's name, in telemetry."""

    __slots__ = ("_sessions",)

    def __init__(self, sessions: SessionService) -> None:
        self._sessions = sessions

    @classmethod
    def from_context(cls, context: SourceContext) -> DataLayerSource:
        """The source in a middleware's chain (see ``sources=``)."""
        return cls(context.sessions)

    async def session_for(self, scope: Scope, call: Call, plan: Plan) -> Session | None:
        """The verified session the call's wire names (a new one for an opening method); ``None`` if none."""
        if plan.unmarked:
            return None  # no wire's session member in the body: nothing to read
        profile = call.profile
        try:
            ref = profile.carrier.read(call.message)
        except InvalidSessionMeta as exc:
            raise Refusal(INVALID_REQUEST, str(exc), reason="invalid_metadata") from None
        if ref is None:
            return None
        token, state, mint = ref
        if mint:
            if plan.era is Era.MODERN:
                # An opening method (SEP-1364 alt. 2's initialize) is a handshake: the 2026-07-28 server
                # refuses it (-32601), so no session is opened and no create-limit slot is spent for it.
                return None
            if plan.batch:  # each new session counts as one more the batch names
                named = plan.named = plan.named or {}
                if len(named) >= MAX_SESSIONS_PER_REQUEST:
                    raise Refusal(INVALID_REQUEST, TOO_MANY_SESSIONS, reason="too_many_sessions")
                named[("mint", str(len(named)))] = None
            minted = await self._sessions.mint(scope, None)
            call.minted = True
            return await self._sessions.resolve(scope, minted.token, None)
        header = plan.header_session_id
        if (
            (plan.era is Era.MODERN or profile.header_every_era)
            and header is not None
            and header != token.encode("utf-8", "surrogatepass")
        ):
            raise Refusal(
                profile.header_mismatch,
                "Mcp-Session-Id header does not match the session in _meta",
                reason="header_mismatch",
            )
        try:
            if not plan.batch:
                return await self._sessions.resolve(scope, token, state)
            find = partial(self._sessions.resolve, scope, token, state)
            found = await once_per_request(plan, (self.name, token, state or ""), find)
        except SessionNotFound as exc:
            if profile.unknown_is_no_session:
                call.revoked = exc.reason
                return None
            raise profile.not_found_refusal(token, exc.reason, exc.session_id) from None
        if found is None:
            raise Refusal(INVALID_REQUEST, TOO_MANY_SESSIONS, reason="too_many_sessions")
        return found

"""The answer step: a wire's own method (create, delete, list, resume…) answered here, never forwarded."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import Scope

from .._asgi import send_json
from .._wire import Refusal, jsonrpc
from .._wire.protocol import Era
from ..profiles import LocalCall

if TYPE_CHECKING:
    from asgiref.typing import ASGISendCallable

    from .._plan import Call, Plan
    from .._session import SessionService
    from ._refusals import Refuser
    from ._transport import TransportSessions


class LocalAnswers:
    """Runs a local method's answer function and sends what it returns."""

    __slots__ = ("_mapped", "_refuser", "_retry_after", "_sessions")

    def __init__(
        self, sessions: SessionService, refuser: Refuser, *, retry_after: bytes, mapped: TransportSessions | None
    ) -> None:
        self._sessions = sessions
        self._refuser = refuser
        self._retry_after = retry_after
        self._mapped = mapped

    async def answer(self, scope: Scope, plan: Plan, call: Call, send: ASGISendCallable) -> None:
        assert call.local is not None
        local = LocalCall(
            scope=scope,
            message=call.message,
            profile=call.profile,
            era=plan.era,
            sessions=self._sessions,
            session=call.session,
            operation=call.operation,
        )
        try:
            result = await call.local.answer(local)
        except Refusal as refusal:
            call.refusal = refusal
            plan.refused = True
            return await self._refuser.refuse(plan, send)
        if plan.era is Era.MODERN:
            result["resultType"] = "complete"
        frame = jsonrpc.result(call.request_id, result)
        if local.envelope:
            frame.update(local.envelope)
        if (
            self._mapped is not None
            and local.minted is not None
            and plan.era is Era.LEGACY
            and call.profile.header_every_era
            and plan.header_session_id is not None
            and plan.header_session_id.count(b".") != 2  # a transport session id, not a session token
        ):
            # Created inside the server's transport session: requests in the session go on in it.
            self._mapped.adopt(local.minted.claims.session_id, plan.header_session_id)
        await send_json(send, 200, frame, self._retry_after)
        if call.operation is not None:
            call.operation.end()

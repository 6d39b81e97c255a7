"""Methods the middleware answers itself: what an answer function gets, and how it is answered."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.types import Scope

from .._session import Minted, SessionService
from .._wire import Refusal
from .._wire.protocol import INVALID_PARAMS, Era

if TYPE_CHECKING:
    from .._otel import Operation
    from .._session import Session
    from . import WireProfile


@dataclass(slots=True)
class LocalCall:
    """One call of a local method, as its answer function sees it; the answer returns a result or raises a Refusal."""

    scope: Scope
    """The request's ASGI scope."""
    message: dict[str, object]
    """The JSON-RPC request."""
    profile: WireProfile
    """The wire the call speaks."""
    era: Era
    """The protocol era of the request."""
    sessions: SessionService
    """The middleware's sessions: mint, resolve, revoke."""
    session: Session | None
    """The verified session the call names, for methods that need one."""
    operation: Operation | None
    """The call's telemetry, when it is traced."""
    envelope: dict[str, object] = field(default_factory=dict)
    """Members the answer adds beside ``result`` (SEP-1364's top-level ``sessionId``)."""
    minted: Minted | None = None
    """The session this call opened, if it opened one."""

    @property
    def params(self) -> dict[str, object]:
        """The call's params; an object (the pipeline refuses anything else), empty when absent."""
        params = self.message.get("params")
        return params if isinstance(params, dict) else {}

    def string_param(self, name: str, *, max_length: int) -> str | None:
        """An optional string parameter, bounded; -32602 when it is anything else."""
        value = self.params.get(name)
        if value is not None and (type(value) is not str or len(value) > max_length):
            raise Refusal(INVALID_PARAMS, f"{name} must be a string of at most {max_length} characters")
        return value

    async def mint(self) -> Minted:
        """A new session for the caller, counted in telemetry."""
        minted = self.minted = await self.sessions.mint(self.scope, self.operation)
        if (operation := self.operation) is not None:
            operation.set_session(minted.claims.session_id)
            operation.telemetry.sessions_created.add(1, operation.session_attributes())
        return minted

    async def end(self, session: Session, token: str) -> None:
        """End ``session`` everywhere; the wire's "not found" error if it had already ended."""
        if not await self.revoke(session):
            raise self.profile.not_found_refusal(token, "revoked", session.id)

    async def revoke(self, session: Session) -> bool:
        """End ``session`` everywhere, counted in telemetry; ``False`` if it had already ended."""
        revoked = await self.sessions.revoke(session, self.scope)
        if revoked and (operation := self.operation) is not None:
            attributes = operation.session_attributes()
            operation.telemetry.sessions_deleted.add(1, attributes)
            operation.telemetry.session_duration.record(max(time.time() - session.issued_at, 0.0), attributes)
        return revoked

"""The resolve step: each call's session, or its refusal, through the session sources in order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from starlette.types import Scope

from ..wire import Refusal
from ._request import check_local_call

if TYPE_CHECKING:
    from .._policy import Requires
    from ..plan import Call, Plan
    from ..session import Session
    from ..sources import SessionSource

__all__ = ["Resolver"]


class Resolver:
    """The source chain of one middleware, and the policy that says when a call needs a session."""

    __slots__ = ("_data_layer", "_requires", "_sources")

    def __init__(self, sources: Sequence[SessionSource], *, data_layer: SessionSource, requires: Requires | None):
        self._sources = tuple(sources)
        self._data_layer = data_layer
        self._requires = requires

    async def resolve(self, scope: Scope, plan: Plan) -> None:
        """Set each call's session; a call that is refused gets its refusal, and the plan is refused."""
        for call in plan.calls:
            if call.method is None:
                continue
            try:
                call.session = await self._session_of(scope, call, plan)
                if call.session is None and self._required(call):
                    raise _required(call)
            except Refusal as refusal:
                call.refusal = refusal
                plan.refused = True

    async def _session_of(self, scope: Scope, call: Call, plan: Plan) -> Session | None:
        local = call.local
        if local is not None:
            check_local_call(call, plan)
            # A session method acts on a data-layer session only, never a host's or a transport's.
            return await self._data_layer.session_for(scope, call, plan) if local.needs_session else None
        for source in self._sources:
            session = await source.session_for(scope, call, plan)
            if session is not None:
                return session
        return None

    def _required(self, call: Call) -> bool:
        if call.local is not None:
            return call.local.needs_session
        requires = self._requires
        return requires is not None and call.is_request and requires(call.method or "", call.params)


def _required(call: Call) -> Refusal:
    """The wire's "session required", saying why a host's conversation has no data where it has none."""
    profile = call.profile
    message = profile.required_message
    if call.conversation is not None and call.conversation.no_data is not None:
        message = f"{message}: {call.conversation.no_data}"
    return Refusal(profile.required, message, profile.required_data, reason="required")

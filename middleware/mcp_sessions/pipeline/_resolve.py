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
        requires = self._requires
        for call in plan.calls:
            if call.method is None:
                continue
            try:
                if call.local is not None:
                    call.session = await self._local_session(scope, call, plan)
                    continue
                session = None
                for source in self._sources:  # in order, until one says whose call it is
                    session = await source.session_for(scope, call, plan)
                    if session is not None:
                        break
                call.session = session
                if session is None and requires is not None and call.is_request and requires(call.method, call.params):
                    raise _required(call)
            except Refusal as refusal:
                call.refusal = refusal
                plan.refused = True
                if plan.batch:  # refused whole: the other elements are answered -32600, with no session work
                    break

    async def _local_session(self, scope: Scope, call: Call, plan: Plan) -> Session | None:
        """The session a wire's own method acts on: a data-layer one only, never a host's or a transport's."""
        assert call.local is not None
        check_local_call(call, plan)
        if not call.local.needs_session:
            return None
        session = await self._data_layer.session_for(scope, call, plan)
        if session is None:
            raise _required(call)
        return session


def _required(call: Call) -> Refusal:
    """The wire's "session required", saying why a host's conversation has no data where it has none."""
    profile = call.profile
    message = profile.required_message
    if call.conversation is not None and call.conversation.no_data is not None:
        message = f"{message}: {call.conversation.no_data}"
    return Refusal(profile.required, message, profile.required_data, reason="required")

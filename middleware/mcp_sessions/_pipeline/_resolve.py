"""The resolve step: each call's session, or its refusal, through the session sources in order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from starlette.types import Scope

from .._wire import Refusal
from .._wire.protocol import HEADER_MISMATCH, INVALID_PARAMS, MCP_METHOD_HEADER, Era

if TYPE_CHECKING:
    from .._plan import Call, Plan
    from .._policy import Requires
    from .._session import Session
    from ..sources import SessionSource

Explain = Callable[["Call", "Plan"], "str | None"]
"""Why a call that needs a session has none, where a source can say (a host's id with data off)."""


class Resolver:
    """The source chain of one middleware, and the policy that says when a call needs a session."""

    __slots__ = ("_data_layer", "_explain", "_requires", "_sources")

    def __init__(
        self,
        sources: Sequence[SessionSource],
        *,
        data_layer: SessionSource,
        requires: Requires | None,
        explain: Explain | None = None,
    ):
        self._sources = tuple(sources)
        self._data_layer = data_layer
        self._requires = requires
        self._explain = explain

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
                    raise self._required(call, plan)
            except Refusal as refusal:
                call.refusal = refusal
                plan.refused = True
                if plan.batch:  # refused whole: the other elements are answered -32600, with no session work
                    break

    async def _local_session(self, scope: Scope, call: Call, plan: Plan) -> Session | None:
        """The session a wire's own method acts on: a data-layer one only, never a host's or a transport's."""
        assert call.local is not None and call.method is not None
        header_method = plan.headers.get(MCP_METHOD_HEADER)
        if plan.era is Era.MODERN and header_method is not None and header_method != call.method.encode():
            raise Refusal(HEADER_MISMATCH, "Mcp-Method header does not match the request method")
        params = call.params
        if params is not None and not isinstance(params, dict):
            raise Refusal(INVALID_PARAMS, "params must be an object")
        if not call.local.needs_session:
            return None
        session = await self._data_layer.session_for(scope, call, plan)
        if session is None:  # a wire's own method names its session itself: no host's id explains its absence
            raise self._required(call, None)
        return session

    def _required(self, call: Call, plan: Plan | None) -> Refusal:
        """The wire's "session required", saying in its message why a host's conversation has no data
        where it has none, and what to do (clients show the message, not ``data``)."""
        profile = call.profile
        why = None if call.conversation is None else call.conversation.no_data
        if why is None and self._explain is not None and plan is not None:
            why = self._explain(call, plan)
        return Refusal(profile.required, profile.required_text(why), profile.required_data, reason="required")

"""A host's conversation id, named for every request: the gateway routes on it and gives it to the upstream.

In a server's own process a host's conversation id matters only to telemetry and to conversation
data, so without either the host source does not look for it. In front of replicas it also says
where the conversation's requests go and what the upstream sees in baggage: this source, last in
the gateway's chain, names it (with the host source's own rules) when no source before it did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import Scope

from ..sources import HostConversationSource, SourceContext, Trust

if TYPE_CHECKING:
    from .._session import Session
    from ..sources import Call, Plan

__all__ = ["RoutedConversations"]


class RoutedConversations:
    """The gateway's last session source: a host's conversation for a call no other source named. Never data."""

    name = "gateway"
    trust = Trust.ASSERTED

    __slots__ = ("_host",)

    def __init__(self, context: SourceContext) -> None:
        self._host = HostConversationSource.from_context(context)  # its find(), by the configured host keys

    async def session_for(self, scope: Scope, call: Call, plan: Plan) -> Session | None:
        """Name the call's host conversation (``call.conversation``) if nothing has; never a session."""
        if call.conversation is None:
            params = call.message.get("params")
            call.conversation = self._host.find(plan.headers, params.get("_meta") if type(params) is dict else None)
        return None

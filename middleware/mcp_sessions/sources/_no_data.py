"""Why a request that names a host's conversation has no session: conversation data is off.

Real clients show an error's message and drop its ``data``, so the "session
required" message itself says that the host's id gives tracing only and how to
turn conversation data on. Asked only when a call is refused, so a request
that carries a host's id costs nothing more when conversation data is off and
telemetry is too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from ._host import HostConversationSource

if TYPE_CHECKING:
    from .._plan import Call, Plan

__all__ = ["DATA_OFF", "data_off_explainer"]

DATA_OFF: Final = (
    "conversation data is off, so the host's conversation id ({source}) names this conversation in traces only; "
    'to keep data per conversation set conversation_data="anonymous" or "principal" '
    "(MCP_SESSIONS_CONVERSATION_DATA)"
)


def data_off_explainer(source: HostConversationSource) -> Callable[[Call, Plan], str | None] | None:
    """For a chain whose host source keeps no data: what a refused call that names a host's id is told."""
    if source.data != "off":
        return None  # with data on, a host's id gets a session, or its no_data says why not

    def explain(call: Call, plan: Plan) -> str | None:
        conversation = call.conversation  # found already when the request is traced
        if conversation is None:
            params = call.message.get("params")
            conversation = source.find(plan.headers, params.get("_meta") if type(params) is dict else None)
        return None if conversation is None else DATA_OFF.format(source=conversation.source)

    return explain

"""Session sources: each answers "not mine", a session, or a refusal, in order.

The built-in chain (:data:`DEFAULT_SOURCES`) asks :class:`DataLayerSource` (the
token the wire names), then :class:`~mcp_sessions.sources.host.HostConversationSource`
(a host's conversation id: tracing, and data with ``conversation_data``) and, with
``adopt_transport_sessions``, :class:`~mcp_sessions.sources.transport.TransportSource`
(a 2025 transport session the server minted). To add a source, write a class that
follows :class:`SessionSource` and give the middleware the chain with it:
``sources=[*DEFAULT_SOURCES, MySource()]``.
"""

from ..plan import Call, Conversation, Plan
from ._base import MAX_SESSIONS_PER_REQUEST, SessionSource, SourceContext, SourceFactory, Trust
from ._chain import DEFAULT_SOURCES, build_chain, check_chain
from ._no_data import data_off_explainer
from .data_layer import DataLayerSource

__all__ = [
    "DEFAULT_SOURCES",
    "MAX_SESSIONS_PER_REQUEST",
    "Call",
    "Conversation",
    "DataLayerSource",
    "Plan",
    "SessionSource",
    "SourceContext",
    "SourceFactory",
    "Trust",
    "build_chain",
    "check_chain",
    "data_off_explainer",
]

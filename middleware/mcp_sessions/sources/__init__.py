"""Session sources: each answers "not mine", a session, or a refusal, in order.

The built-in chain (:data:`DEFAULT_SOURCES`) asks :class:`DataLayerSource` (the token the wire names), then
:class:`HostConversationSource` (a host's conversation id: tracing, and data with ``conversation_data``) and,
with ``adopt_transport_sessions``, :class:`TransportSource` (a 2025 transport session the server minted). To
add a source, write a class that follows :class:`SessionSource` and give the middleware the chain with it:
``sources=[*DEFAULT_SOURCES, MySource()]``.
"""

from .._plan import Call, Conversation, Plan
from ._base import (
    DEFAULT_MAX_CONVERSATIONS_PER_CALLER,
    MAX_SESSIONS_PER_REQUEST,
    SessionSource,
    SourceContext,
    SourceFactory,
)
from ._chain import DEFAULT_SOURCES, build_chain, check_chain
from ._data_layer import DataLayerSource
from ._host import CONVERSATION_DATA_MODES, ConversationData, HostConversationSource, data_off_explainer
from ._host_keys import BUILT_IN_HOSTS, HostKey, host_keys_from_config
from ._transport import TransportSource, is_transport_session_id

__all__ = [
    "BUILT_IN_HOSTS",
    "CONVERSATION_DATA_MODES",
    "DEFAULT_MAX_CONVERSATIONS_PER_CALLER",
    "DEFAULT_SOURCES",
    "MAX_SESSIONS_PER_REQUEST",
    "Call",
    "Conversation",
    "ConversationData",
    "DataLayerSource",
    "HostConversationSource",
    "HostKey",
    "Plan",
    "SessionSource",
    "SourceContext",
    "SourceFactory",
    "TransportSource",
    "build_chain",
    "check_chain",
    "data_off_explainer",
    "host_keys_from_config",
    "is_transport_session_id",
]

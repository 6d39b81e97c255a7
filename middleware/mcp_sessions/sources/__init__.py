"""Session sources: each answers "not mine", a session, or a refusal, in order.

The built-in chain (:data:`DEFAULT_SOURCES`) asks :class:`DataLayerSource` (the token the wire names), then
:class:`HostConversationSource` (a host's conversation id: tracing, and data with ``conversation_data``) and,
with ``adopt_transport_sessions``, :class:`TransportSource` (a 2025 transport session the server minted). To
add a source, write a class that follows :class:`SessionSource` and give the middleware the chain with it:
``sources=[*DEFAULT_SOURCES, MySource()]``.
"""

from typing import Final

from ._base import CONVERSATION_DATA_MODES as CONVERSATION_DATA_MODES
from ._base import DEFAULT_MAX_CONVERSATIONS_PER_CALLER as DEFAULT_MAX_CONVERSATIONS_PER_CALLER
from ._base import MAX_SESSIONS_PER_REQUEST as MAX_SESSIONS_PER_REQUEST
from ._base import (
    CallView,
    Conversation,
    ConversationData,
    HostKey,
    RequestView,
    SessionSource,
    SourceContext,
    SourceDigests,
    SourceFactory,
    SourceSessions,
)
from ._base import build_chain as build_chain
from ._base import check_chain as check_chain
from ._host import BUILT_IN_HOSTS, HostConversationSource
from ._host import CONVERSATION_MEMBER as CONVERSATION_MEMBER
from ._host import conversation_id as conversation_id
from ._host import data_off_explainer as data_off_explainer
from ._host import host_keys_from_config as host_keys_from_config
from ._host import turn_of as turn_of
from ._named import DataLayerSource, TransportSource

DEFAULT_SOURCES: Final[tuple[SourceFactory, ...]] = (
    DataLayerSource.from_context,
    HostConversationSource.from_context,
    TransportSource.from_context,
)
"""The built-in chain: a data-layer session always wins; then a host's conversation; then, with
``adopt_transport_sessions``, the 2025 transport session."""

# What a source is given (SourceContext: SourceSessions, SourceDigests, HostKey, ConversationData) and asked
# about (CallView, RequestView, Conversation) is public with it.
# The public API is __all__; each ``name as name`` import above is for the package's other parts only.
__all__ = [
    "BUILT_IN_HOSTS",
    "DEFAULT_SOURCES",
    "CallView",
    "Conversation",
    "ConversationData",
    "DataLayerSource",
    "HostConversationSource",
    "HostKey",
    "RequestView",
    "SessionSource",
    "SourceContext",
    "SourceDigests",
    "SourceFactory",
    "SourceSessions",
    "TransportSource",
]

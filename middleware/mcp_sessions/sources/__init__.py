"""Session sources: each answers "not mine", a session, or a refusal, in order.

The middleware asks, in order: :class:`DataLayerSource` (the token the wire
names), :class:`~mcp_sessions.sources.host.HostConversationSource` (a host's
conversation id: tracing, and data with ``conversation_data``) and, with
``adopt_transport_sessions``, :class:`~mcp_sessions.sources.transport.TransportSource`
(a 2025 transport session the server minted). To add a source, add a module with
a class that follows :class:`SessionSource` and put it in the chain.
"""

from ..plan import Conversation
from ._base import SessionSource, Trust
from .data_layer import DataLayerSource

__all__ = ["Conversation", "DataLayerSource", "SessionSource", "Trust"]

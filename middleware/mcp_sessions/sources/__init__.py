"""Session sources: each answers "not mine", a session, or a refusal, in order.

To add a source (a host's conversation id, a transport session), add a module
with a class that follows :class:`SessionSource` and put it in the chain the
middleware builds.
"""

from ._base import Conversation, SessionSource, Trust
from .data_layer import DataLayerSource

__all__ = ["Conversation", "DataLayerSource", "SessionSource", "Trust"]

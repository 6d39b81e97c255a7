"""Listen streams scoped to a session, across replicas: :class:`SessionSubscriptionBus` (needs the ``mcp`` SDK).

``MCPServer(subscriptions=bus)`` serves ``subscriptions/listen`` over it, and
``MCPSessionMiddleware(app, subscriptions=bus)`` lets a tool publish to its own
session (``await get_session().notify_resource_updated(uri)``) and ends a
session's streams when it is deleted or expires. See ``docs/deployment.md``.
"""

from ._backend import Backend, MemoryBackend
from ._bus import SessionSubscriptionBus
from ._redis import RedisBackend

__all__ = ["Backend", "MemoryBackend", "RedisBackend", "SessionSubscriptionBus"]

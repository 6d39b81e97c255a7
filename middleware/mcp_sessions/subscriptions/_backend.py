"""The backend seam: where the bus's messages travel (this process, Redis pub/sub, a Redis Cluster's sharded pub/sub),
and what a message is.

The in-process :class:`MemoryBackend` is here; the Redis ones are in ``_link`` and ``_cluster``.
A message is a few bytes of JSON naming the event's kind and, for a resource, its URI; never a
session token (a session's channel names it by its stable id).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Final, Protocol

import anyio.lowlevel
from mcp.shared.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)

Receive = Callable[[str, bytes | str], None]
"""What a backend calls for each message arriving on a joined channel: ``receive(channel, message)``."""

MAX_MESSAGE_BYTES: Final = 16 * 1024
"""The largest message published or read: a resource URI longer than about 16 KB is refused."""
END: Final = b'{"end":"session"}'
"""The order, on a session's channel, to end that session's listen streams (it was deleted)."""
_KINDS: Final[dict[str, ServerEvent]] = {
    "tools": ToolsListChanged(),
    "prompts": PromptsListChanged(),
    "resources": ResourcesListChanged(),
}
_NAMES: Final = {type(event): name for name, event in _KINDS.items()}


class Backend(Protocol):
    """Channels joined and left by name, messages published to them and handed to the bus's ``receive``.

    The bus joins a channel when the first stream that needs it opens on this replica, and leaves
    it when the last one ends; ``join`` and ``leave`` are synchronous (the SDK subscribes
    synchronously) and take effect in the background. A new topology is one class with these six
    methods, and one scheme in ``_urls.py``.
    """

    def bind(self, receive: Receive) -> None:
        """Hand each message arriving on a joined channel to ``receive`` (called once, by the bus)."""

    def join(self, channel: str) -> None:
        """Start receiving ``channel``'s messages (soon: :meth:`ready` waits for it)."""

    def leave(self, channel: str) -> None:
        """Stop receiving ``channel``'s messages."""

    async def ready(self, channel: str) -> None:
        """Return once a joined ``channel``'s messages arrive, or after a bounded wait."""

    async def publish(self, channel: str, message: bytes) -> None:
        """Send ``message`` to every replica that joined ``channel``; raise if it cannot be sent."""

    async def aclose(self) -> None:
        """Release the connection; nothing arrives afterwards."""


class MemoryBackend(Backend):
    """One process, no network: what ``memory://`` builds (the SDK's in-memory bus, with sessions)."""

    def __init__(self) -> None:
        self._joined: set[str] = set()
        self._receive: Receive | None = None

    def bind(self, receive: Receive) -> None:
        self._receive = receive

    def join(self, channel: str) -> None:
        self._joined.add(channel)

    def leave(self, channel: str) -> None:
        self._joined.discard(channel)

    async def ready(self, channel: str) -> None:
        """Joined is subscribed: nothing to wait for."""

    async def publish(self, channel: str, message: bytes) -> None:
        """Deliver at once, then let the streams drain (as the SDK's ``InMemorySubscriptionBus`` does)."""
        if channel in self._joined and self._receive is not None:
            self._receive(channel, message)
        await anyio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        self._joined.clear()


def encode(event: ServerEvent) -> bytes:
    """``event`` as a message; ``ValueError`` for a resource URI too long to send."""
    if isinstance(event, ResourceUpdated):
        if not isinstance(event.uri, str):
            raise TypeError("a ResourceUpdated event's uri is a string")
        data = json.dumps({"resource": event.uri}, separators=(",", ":")).encode()
        if len(data) > MAX_MESSAGE_BYTES:
            raise ValueError(f"the resource URI is too long to publish (the message is at most {MAX_MESSAGE_BYTES} B)")
        return data
    name = _NAMES.get(type(event))
    if name is None:
        raise TypeError(f"not a ServerEvent: {type(event).__name__}")
    return b'{"event":"' + name.encode() + b'"}'


def decode(data: bytes | str) -> ServerEvent | bytes | None:
    """The event a message carries, :data:`END`, or ``None`` for a message this version cannot read."""
    if len(data) > MAX_MESSAGE_BYTES:
        return None
    raw = data.encode() if isinstance(data, str) else data
    if raw == END:
        return END
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or len(message) != 1:
        return None
    if isinstance(uri := message.get("resource"), str):
        return ResourceUpdated(uri=uri)
    name = message.get("event")
    return _KINDS.get(name) if isinstance(name, str) else None

"""Where a bus's messages travel: the :class:`Backend` protocol, and :class:`MemoryBackend` (this process).

The Redis backends (``_redis``) implement it too; the bus (``_bus``) picks one by URL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import anyio.lowlevel

Receive = Callable[[str, bytes | str], None]
"""What a backend calls for each message arriving on a joined channel: ``receive(channel, message)``."""


class Backend(Protocol):
    """Channels joined and left by name, messages published to them and handed to the bus's ``receive``.

    The bus joins a channel when the first stream that needs it opens on this replica, and leaves
    it when the last one ends; ``join`` and ``leave`` are synchronous (the SDK subscribes
    synchronously) and take effect in the background. A new topology is one class with these six
    methods, and one scheme in :func:`~._bus.backend_from_url`.
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

"""The in-process backend: a channel is a name, publishing reaches this process's joined channels at once."""

from __future__ import annotations

import anyio.lowlevel

from ._backend import Backend, Receive

__all__ = ["MemoryBackend"]


class MemoryBackend(Backend):
    """One process, no network: what ``memory://`` builds (the SDK's in-memory bus, with sessions)."""

    __slots__ = ("_joined", "_receive")

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

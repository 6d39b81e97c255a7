"""What the subscription tests share: a listen stream's listener in a session, bounded waits, and the
sessions of a Cluster's nodes."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any, cast

from mcp.shared.subscriptions import PromptsListChanged, ServerEvent

from _redis_topologies import ClusterServers
from mcp_sessions._session import Session, current_session
from mcp_sessions.subscriptions import SessionSubscriptionBus

MARKER = PromptsListChanged()  # the positive control: published last, on the global channel
WAIT = 3.0


@contextlib.contextmanager
def in_session(session_id: str | None, bus: SessionSubscriptionBus) -> Iterator[None]:
    """What the middleware does for a request that names a session: the context variable set (a session of a
    middleware given ``bus``)."""
    session = SimpleNamespace(id=session_id, _service=SimpleNamespace(bus=bus))
    token = current_session.set(None if session_id is None else cast(Session, session))
    try:
        yield
    finally:
        current_session.reset(token)


@contextlib.asynccontextmanager
async def buses(
    url: str, prefix: str, **options: Any
) -> AsyncIterator[tuple[SessionSubscriptionBus, SessionSubscriptionBus]]:
    """Two replicas' buses on the one backend and prefix, closed after the block."""
    a = SessionSubscriptionBus.from_url(url, prefix=prefix, **options)
    b = SessionSubscriptionBus.from_url(url, prefix=prefix, **options)
    try:
        yield a, b
    finally:
        await a.aclose()
        await b.aclose()


class Stream:
    """One listen stream's listener, as ListenHandler registers it, subscribed within ``session_id``."""

    def __init__(self, bus: SessionSubscriptionBus, session_id: str | None) -> None:
        self.events: list[ServerEvent] = []
        with in_session(session_id, bus):
            self.unsubscribe = bus.subscribe(self.events.append)


async def opened(bus: SessionSubscriptionBus, *session_ids: str) -> None:
    """Wait until events for these sessions' streams can arrive (what the middleware waits for before the ack)."""
    for session_id in session_ids or (None,):
        await bus.ready(session_id)


def channel(prefix: str, session_id: str) -> str:
    return f"{prefix}session:{{{session_id}}}"


def one_per_node(cluster: ClusterServers, prefix: str, avoid: int | None = None) -> list[str]:
    """A session id whose channel (and keys) is on each node in turn, the nodes' order."""
    found: dict[int, str] = {}
    for i in itertools.count():
        sid = f"sid-{i}"
        found.setdefault(cluster.nodes.index(cluster.node_for(channel(prefix, sid))), sid)
        if len(found) == len(cluster.nodes):
            return [found[index] for index in range(len(cluster.nodes))]
    raise AssertionError("unreachable")

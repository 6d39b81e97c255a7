"""What the subscription tests share: a listen stream's listener in a session, bounded waits, and the
sessions of a Cluster's nodes."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

from mcp.shared.subscriptions import PromptsListChanged, ServerEvent

from _redis_topologies import ClusterServers
from _waits import WITHIN
from mcp_sessions._session import Session, current_session
from mcp_sessions.subscriptions import SessionSubscriptionBus

MARKER = PromptsListChanged()  # the positive control: published last, on the global channel
WAIT = WITHIN  # a bound of the tests' waits for a message: the suite's one (_waits)


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
    """One listen stream's listener, as ListenHandler registers it, subscribed within ``session_id``: the context
    variable set as the middleware sets it for a request naming a session (of a middleware given ``bus``)."""

    def __init__(self, bus: SessionSubscriptionBus, session_id: str | None) -> None:
        self.events: list[ServerEvent] = []
        session = SimpleNamespace(id=session_id, _service=SimpleNamespace(bus=bus))
        token = current_session.set(None if session_id is None else cast(Session, session))
        try:
            self.unsubscribe = bus.subscribe(self.events.append)
        finally:
            current_session.reset(token)


async def opened(bus: SessionSubscriptionBus, *session_ids: str) -> None:
    """Wait until events for these sessions' streams can arrive (what the middleware waits for before the ack)."""
    for session_id in session_ids or (None,):
        await bus.ready(session_id)


def channel(prefix: str, session_id: str) -> str:
    return f"{prefix}session:{{{session_id}}}"


def one_per_node(cluster: ClusterServers, prefix: str) -> list[str]:
    """A session id whose channel (and keys) is on each node in turn, the nodes' order."""
    found: dict[int, str] = {}
    numbers = itertools.count()
    while len(found) < len(cluster.nodes):
        sid = f"sid-{next(numbers)}"
        found.setdefault(cluster.nodes.index(cluster.node_for(channel(prefix, sid))), sid)
    return [found[index] for index in range(len(cluster.nodes))]

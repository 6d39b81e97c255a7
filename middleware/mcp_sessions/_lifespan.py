"""The lifespan, passed through: the store checked at startup; at shutdown, the telemetry flushed and the store
closed when the middleware built it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from starlette.types import Message, Send

from .stores import SessionStore

logger = logging.getLogger("mcp_sessions")


def watch_lifespan(send: Send, store: SessionStore, *, owns_store: bool, flush: Callable[[], None]) -> Send:
    """The lifespan's ``send``: every message passes on untouched, after what it calls for.

    ``flush`` (the telemetry's) runs when the app's shutdown is over, before the server hears of it: uvicorn
    then ends the process by re-raising the SIGTERM it caught, and no exit handler (the OpenTelemetry SDK's
    flush) runs after that. It blocks, so it runs in a thread; it never raises.
    """

    async def lifespan_send(message: Message) -> None:
        if message["type"] == "lifespan.startup.complete":
            await _check(store)
        elif message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
            if owns_store and message["type"] == "lifespan.shutdown.complete":
                try:
                    await store.aclose()
                except Exception:
                    logger.exception("could not close the session store")
            await asyncio.to_thread(flush)
        await send(message)

    return lifespan_send


async def _check(store: SessionStore) -> None:
    """Warn at startup, not at the first request, when the store does not answer (the app still starts)."""
    try:
        async with asyncio.timeout(5):
            await store.ping()
    except Exception as exc:
        logger.warning(
            "the session store does not answer at startup (%s: %s): requests that need it will get -32010 "
            "until it does; store.ping() is the readiness check",
            type(exc).__name__,
            exc,
        )

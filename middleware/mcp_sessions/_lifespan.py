"""The lifespan, passed through: the store checked at startup, and closed at shutdown when the middleware built it."""

from __future__ import annotations

import asyncio
import logging

from starlette.types import Message, Send

from .stores import SessionStore

__all__ = ["watch_lifespan"]

logger = logging.getLogger("mcp_sessions")


def watch_lifespan(send: Send, store: SessionStore, *, owns_store: bool) -> Send:
    """The lifespan's ``send``: every message passes on untouched, after what it calls for."""

    async def lifespan_send(message: Message) -> None:
        if message["type"] == "lifespan.startup.complete":
            await _check(store)
        elif message["type"] == "lifespan.shutdown.complete" and owns_store:
            try:
                await store.aclose()
            except Exception:
                logger.exception("could not close the session store")
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

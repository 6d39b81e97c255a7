"""How long each process of ``mcp-sessions gateway --stdio`` lives.

:class:`Lifetimes` runs each process to its end: its session's end (on any replica), its idle time, its session's
expiry, its user, eviction or shutdown end it, and a crash as any other end. What its end leaves (the tombstones of
its conversations) is the table's to decide (``Table.process_ended``); the sessions it names are ended here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from ...stores import SessionStore, SessionStoreUnavailable
from ._models import EndReason
from ._relay import ANSWER_WITHIN, Conversation, Process

logger = logging.getLogger("mcp_sessions.gateway")

EndTransport = Callable[[bytes, object], Awaitable[None]]
"""Ends a 2025 transport session (its id) as its user (who opened it): a ``DELETE`` through the gateway's app."""


class Lifetimes:
    """Each process run to its end, its timers beside it; what its end leaves is asked of ``ended`` (the table's
    decision: the conversations whose sessions end with it), and those sessions ended: in ``store``, or by
    ``end_transport``."""

    def __init__(
        self,
        *,
        idle: float,
        store: SessionStore,
        ended: Callable[[Process], list[Conversation]],
        end_transport: EndTransport | None,
    ) -> None:
        self.idle = idle
        self.store = store
        self.ended = ended
        self.end_transport = end_transport

    async def serve(self, process: Process) -> None:
        """Run a child to its end (its timers beside it); then end the sessions the table says its end leaves."""
        try:
            async with anyio.create_task_group() as timers:
                timers.start_soon(self._attend, process)
                await process.child.run()
                timers.cancel_scope.cancel()
        finally:
            left = self.ended(process)
        for conversation in left:
            await self._end_session(conversation)

    def close_soon(self, conversation: Conversation, why: EndReason) -> None:
        """:meth:`close`, its session's end in a task of its own."""
        conversation.end(why)
        tasks = conversation.tasks
        if tasks is not None and not tasks.cancel_scope.cancel_called:  # else the gateway stops: it ends them all
            tasks.start_soon(self._end_session, conversation)

    async def close(self, conversation: Conversation, why: EndReason) -> None:
        """End a conversation for ``why``: its child (which its next request finds ended: refused as its kind's
        are), and its session."""
        conversation.end(why)
        await self._end_session(conversation)

    def retain(self, conversation: Conversation) -> None:
        """A request's own child kept for the retry that brings its input: ended if none comes in ``ANSWER_WITHIN``."""
        conversation.rounds += 1
        tasks = conversation.tasks
        if tasks is not None and not tasks.cancel_scope.cancel_called:
            tasks.start_soon(self._retain, conversation, conversation.rounds)

    async def _retain(self, conversation: Conversation, rounds: int) -> None:
        await anyio.sleep(ANSWER_WITHIN + 1)
        if conversation.rounds == rounds and not conversation.calls:  # no retry came
            self.close_soon(conversation, EndReason.INPUT_LATE)

    async def _end_session(self, conversation: Conversation) -> None:
        """End the session a conversation's child served: its 2025 transport session (its client then gets 404 and
        initializes again) or its data-layer session (then "Session not found"); a host's is refused here."""
        if conversation.transport is not None and self.end_transport is not None:
            await self.end_transport(conversation.transport, conversation.user)
        elif conversation.key.kind == "data-layer-session":
            try:
                await self.store.revoke(conversation.key.id, expires_at=conversation.expires_at)
            except SessionStoreUnavailable:
                logger.warning("%s: the session could not be ended in the store", conversation.child.label)

    async def _attend(self, process: Process) -> None:
        """Once a conversation takes the child (and it is ready): its idle time and expiry."""
        # a child started ahead idles from when it is taken
        await process.taken.wait()
        conversation = process.conversation
        assert conversation is not None
        if conversation.shared:
            return
        await conversation.child.ready.wait()
        conversation.last_request = anyio.current_time()  # idle from when it is ready
        await self._expire(conversation)

    async def _expire(self, conversation: Conversation) -> None:
        """End a conversation's child once it has been idle for ``idle`` seconds, or its session has expired: one
        clock, anyio's, for both."""
        while True:
            now = anyio.current_time()
            if now >= conversation.deadline:
                return await self.close(conversation, EndReason.EXPIRED)
            idle_ends = conversation.last_request + self.idle
            if now >= idle_ends and not conversation.calls:
                return await self.close(conversation, EndReason.IDLE)
            wake = idle_ends if idle_ends > now else now + self.idle
            await anyio.sleep_until(min(conversation.deadline, wake))

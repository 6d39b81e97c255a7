"""How long each process of ``mcp-sessions gateway --stdio`` lives, and what its end leaves.

:class:`Lifetimes` runs each process (``Pool.serve``) to its end: its session's end (on any replica), its idle
time, its session's expiry, its user, eviction or shutdown end it, and a crash as any other end. Whatever ended
it, its conversations are over: their later requests get the error of their kind (:meth:`Lifetimes.gone`), never
another process; why is an :class:`EndReason`, or the child's own words for a crash or a bound.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from enum import StrEnum
from functools import partial
from typing import Final

import anyio
from mcp.shared.exceptions import MCPError

from .._bounded import BoundedDict
from .._config import SessionsConfig
from ..stores import SessionStoreUnavailable
from ._stdio_pool import Pool, after_answer
from ._stdio_relay import ANSWER_WITHIN, CHILD_EXITED, Conversation, Key, Process

logger = logging.getLogger("mcp_sessions.gateway")

MAX_ENDED: Final = 100_000
"""Ended conversations remembered (each answered with the error of its kind, never a new process); oldest first."""


class EndReason(StrEnum):
    """Why the gateway ended a conversation (a crash or a bound is the child's own words), as the log says it."""

    IDLE = "idle"
    EXPIRED = "expired"
    EVICTED = "evicted"
    ANSWERED = "answered"
    SHUTDOWN = "shutdown"
    SESSION_ENDED = "its session ended"
    INPUT_LATE = "its input came too late"
    FAILED = "failed to start"
    BY_USER = "ended by its user"
    EXITED = "exited"


EXPECTED: Final = (EndReason.IDLE, EndReason.EXPIRED, EndReason.BY_USER)
"""The ends a caller's own process (``caller``, ``sessionless``) leaves no tombstone for: her next request gets a
new one. Any other end (a crash, a bound, eviction) is told to her next request once (``Table._own``)."""


class Lifetimes:
    """Each conversation's end, and what it leaves: a tombstone (the error of its kind), its session ended."""

    def __init__(self, pool: Pool, conversations: dict[Key, Conversation], config: SessionsConfig, idle: float) -> None:
        self.pool, self.conversations, self.config, self.idle = pool, conversations, config, idle
        self.ended: BoundedDict[Key, str] = BoundedDict(MAX_ENDED)  # tombstones: why each ended
        self.retained: dict[str, Conversation] = {}  # a request's child awaiting its retry, by requestState
        self.end_transport: Callable[[bytes, object], Awaitable[None]] | None = None  # a DELETE, as its user
        self.fronted = False  # a replica behind a front (--forwarded-allow-ips): see gone
        pool.serve = self.serve

    def not_found(self) -> MCPError:
        return MCPError(self.config.profiles[0].not_found, self.config.profiles[0].not_found_text)

    def gone(self, key: Key, why: str | None = None) -> MCPError:
        """The error of an ended conversation's kind: "not found" for one these ended with its session (or a
        front's), else that its process has ended, and why."""
        why = why or self.ended.get(key, "ended")
        if self.fronted or why in (EndReason.EVICTED, EndReason.SESSION_ENDED):
            return self.not_found()
        said = "the gateway is shutting down" if why == EndReason.SHUTDOWN else why
        return MCPError(
            CHILD_EXITED, f"the server process of this conversation has ended ({said}), with its state; start a new one"
        )

    async def ready(self, conversation: Conversation) -> Conversation:
        """``conversation`` once its process is ready to serve it; the error of its end if it has ended."""
        await conversation.child.ready.wait()
        if conversation.child.failure is not None:
            raise MCPError(CHILD_EXITED, conversation.child.failure)
        if conversation.child.done.is_set():
            raise self.gone(conversation.key, conversation.why or EndReason.EXITED)
        conversation.last_request = anyio.current_time()
        return conversation

    def answered(self, conversation: Conversation) -> None:
        """A request's own child, once it has answered: ended once that answer is sent, or retained for the retry
        that brings the input it asked for (until that retry, or ``ANSWER_WITHIN``)."""
        if conversation.key.kind != "request":
            return  # a conversation's child, or the shared one: it serves the next request too
        if not conversation.parked:
            return after_answer(partial(self.close_soon, conversation, EndReason.ANSWERED))
        for state in conversation.parked:
            self.retained[state] = conversation
        conversation.rounds += 1
        if self.pool.tasks is not None:
            self.pool.tasks.start_soon(self._retain, conversation, conversation.rounds)

    async def _retain(self, conversation: Conversation, rounds: int) -> None:
        await anyio.sleep(ANSWER_WITHIN + 1)
        if conversation.rounds == rounds and not conversation.calls:  # no retry came
            self.close_soon(conversation, EndReason.INPUT_LATE)

    def close_soon(self, conversation: Conversation, why: str) -> None:
        conversation.why = conversation.why or why
        if self.pool.tasks is not None:
            self.pool.tasks.start_soon(self.close, conversation, why)

    async def close(self, conversation: Conversation, why: str) -> None:
        """End a conversation for ``why``: its session first (so that its next request is refused as its kind's
        are), then its child."""
        conversation.why = conversation.why or why
        await self._end_session(conversation)
        conversation.end(why)

    async def serve(self, process: Process) -> None:
        """Run a child to its end (its timers beside it); its end ends its conversation, and a caller's process's
        every conversation, each remembered as ended unless a new one takes its name."""
        child = process.child
        try:
            async with anyio.create_task_group() as timers:
                timers.start_soon(self._attend, process)
                await child.run()
                timers.cancel_scope.cancel()
        finally:
            self.pool.ended(process)
            ended = process.conversation.why if process.conversation is not None else None
            failed = EndReason.FAILED if child.failure is not None else None
            self.pool.events.ended(ended or failed or child.reason or EndReason.EXITED)
        if (conversation := process.conversation) is None or conversation.shared:
            return
        if conversation.unwatch is not None:
            conversation.unwatch()
        for state in conversation.parked:
            self.retained.pop(state, None)
        if conversation.why == EndReason.SHUTDOWN:
            return
        key = conversation.key
        if self.conversations.get(key) is conversation:
            del self.conversations[key]
        why = conversation.why or failed or EndReason.EXITED
        if _told(key, why):
            self.ended[key] = why
        logger.info("%s: the conversation ended (%s)", child.label, why)
        if conversation.why is None and child.failure is None:
            await self._end_session(conversation)  # a crash ends its session as any other end
        for rider in list(conversation.riders.values()):  # a caller's process: its conversations end
            self.ended[rider.key] = why
            await self._end_session(rider)

    async def _end_session(self, conversation: Conversation) -> None:
        """End the session a conversation's child served: its 2025 transport session (its client then gets 404 and
        initializes again) or its data-layer session (then "Session not found"); a host's is refused here."""
        if conversation.transport is not None and self.end_transport is not None:
            await self.end_transport(conversation.transport, conversation.user)
        elif conversation.key.kind == "data-layer-session":
            try:
                await self.config.store.revoke(conversation.key.id, expires_at=conversation.expires_at)
            except SessionStoreUnavailable:
                logger.warning("%s: the session could not be ended in the store", conversation.child.label)

    async def _attend(self, process: Process) -> None:
        """Once a conversation takes the child (and it is ready): its idle time and expiry."""
        await process.taken.wait()  # a child started ahead idles from when it is taken
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


def _told(key: Key, why: str) -> bool:
    """Whether an end is told to the next request that names its conversation: every end, but a request's own
    (never named again) and a caller's own that ended as she would expect (``EXPECTED``)."""
    if key.kind == "request":
        return False
    return key.kind not in ("caller", "sessionless") or why not in EXPECTED

"""Admission to the process table of ``mcp-sessions gateway --stdio``: whether a caller's new conversation may
have a process now, and which idle ones end to make room for it; and which 2025 transport sessions with no process
end to make room for a new one.

:class:`Admission` answers those questions for ``_table.Table``: the limits per caller
(``--max-processes-per-principal``) and overall (``--max-processes``), the create limit (``MCP_SESSIONS_CREATE_LIMIT``)
and eviction, in that order of refusal, eviction last: an idle conversation ends only once nothing else refuses the
new one. At a limit, the conversation idle longest ends for the new one, if idle :data:`EVICT_AFTER` seconds: the
caller's own at hers, anyone's when every process of the gateway's runs, as httpcore's pool closes its idle
connections for a new one rather than refuse it; and :data:`MAX_CONNECTIONS`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final

import anyio
from mcp.shared.exceptions import MCPError

from ..._session import RateLimit
from ..._wire.protocol import RATE_LIMITED
from ._models import Caller, Key, ProcessEvents
from ._modes import EVICT_AFTER
from ._relay import Conversation

MAX_CONNECTIONS: Final = 1024
"""2025 transport sessions open with no process (a connection that has made no call, or whose calls all name
another conversation, as ``connect``'s): past it, the oldest is ended (its client gets 404, and initializes again);
past eight times ``--max-processes-per-principal`` of one caller's, her oldest. The ``mcp`` SDK would keep 10,000
for one address that loops on ``initialize``, and refuse every other client."""


class Admission:
    """The limits a new conversation's process is admitted by, and what a refusal says (counted by ``events``)."""

    def __init__(
        self, max_processes: int, per_caller: int, create_limit: RateLimit | None, events: ProcessEvents
    ) -> None:
        self.max_processes = max_processes
        self.per_caller = per_caller
        self.create_limit = create_limit
        self.events = events

    def connections_over(self, connections: Mapping[Key, str], caller: str) -> list[Key]:
        """Of the 2025 transport sessions with no process (each with its caller's id, oldest first), those to end
        now that ``caller`` opened one: hers beyond eight times her limit, then any beyond :data:`MAX_CONNECTIONS`."""
        mine = [key for key, owner in connections.items() if owner == caller]
        over = mine[: max(0, len(mine) - 8 * self.per_caller)]
        over += list(connections)[: max(0, len(connections) - MAX_CONNECTIONS)]
        return list(dict.fromkeys(over))

    def admit(
        self, live: Sequence[Conversation], caller: Caller, *, transport: bool, counted: bool
    ) -> list[Conversation]:
        """Admit ``caller``'s new conversation beside the ``live`` ones: the caller's conversations to end for it
        (the idle ones, oldest first), or an ``MCPError`` (``-32029``, with when to retry) that names the limit.
        ``counted``: its create spent its create-limit slot already; ``transport``: it is a 2025 transport session's."""
        mine = [conversation for conversation in live if caller.same_as(conversation.owner)]
        evicted: list[Conversation] = []
        if len(mine) >= self.per_caller:
            spare = sorted((c for c in mine if _spare(c, transport)), key=lambda c: c.last_request)
            evicted = spare[: len(mine) - self.per_caller + 1]
        if len(mine) - len(evicted) >= self.per_caller:
            raise refused(
                self.events,
                "max_processes_per_principal",
                f"Too many server processes for this caller: each caller may have at most {self.per_caller} "
                f"conversations' processes at once, and none of hers has been idle {EVICT_AFTER:g} s "
                f"(the limit max_processes_per_principal: --max-processes-per-principal {self.per_caller}, key "
                f"max-processes-per-principal = {self.per_caller}); end one (DELETE, sessions/delete) or retry later",
            )
        evicted += _room(live, evicted, len(live) - len(evicted) - self.max_processes + 1)
        if len(live) - len(evicted) >= self.max_processes:
            raise refused(
                self.events,
                "max_processes",
                f"Too many server processes: the gateway runs at most {self.max_processes} conversations' "
                f"processes at once, and none has been idle {EVICT_AFTER:g} s (the limit max_processes: "
                f"--max-processes {self.max_processes}, key max-processes = {self.max_processes}); end one (DELETE, "
                "sessions/delete) or retry later",
            )
        limit = None if counted else self.create_limit
        if limit is not None and (wait := limit.take(caller.id)):
            raise refused(
                self.events,
                "create_limit",
                "Too many server processes started, retry later (MCP_SESSIONS_CREATE_LIMIT)",
                max(1, math.ceil(wait)),
            )
        return evicted


def refused(events: ProcessEvents, limit: str, message: str, retry: int = 1) -> MCPError:
    """A refusal answered in-band (HTTP 200), with when to try again, in seconds."""
    events.refused(limit)
    return MCPError(RATE_LIMITED, message, {"retryAfter": retry})


def _room(live: Sequence[Conversation], evicted: Sequence[Conversation], needed: int) -> list[Conversation]:
    """At ``--max-processes``, the ``needed`` conversations (anyone's) idle longest, beyond those ``evicted``
    already, that may end to make room: each idle :data:`EVICT_AFTER` seconds at least (as :func:`_spare` says)."""
    if needed <= 0:
        return []
    ending = {id(conversation) for conversation in evicted}
    spare = (c for c in live if id(c) not in ending and _spare(c, transport=False))
    return sorted(spare, key=lambda c: c.last_request)[:needed]


def _spare(conversation: Conversation, transport: bool) -> bool:
    """Whether a caller's ``conversation`` may be ended to make room for its new one: none of its requests is in
    flight or waits for input, and it has been idle for ``EVICT_AFTER`` seconds (a 2025 transport session no
    data-layer session lives in, for a new one, at once: a client that never sends DELETE leaves them behind)."""
    if conversation.calls or conversation.parked:
        return False
    idle = anyio.current_time() - conversation.last_request
    lost = transport and conversation.transport is not None and not conversation.holds_sessions
    return idle >= EVICT_AFTER or lost

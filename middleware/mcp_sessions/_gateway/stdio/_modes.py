"""The stdio gateway's modes and limits, defined once: what ``--processes`` and ``--sessionless`` offer (their choices
are these ``Literal``'s arguments), what the table is given and what the status says, and the defaults of how many
processes run and for how long. It imports nothing of the gateway, so that the command's flags (``mcp-sessions
--help``) can read it without loading the ``mcp`` SDK."""

import os
from typing import Final, Literal, get_args

Processes = Literal["auto", "per-conversation", "shared"]
"""Whose conversations a process serves (``--processes``): ``"auto"`` becomes ``"per-conversation"`` or
``"per-caller"`` (:meth:`Table.choose`)."""
PROCESSES: Final = get_args(Processes)
Sessionless = Literal["per-caller", "per-request", "shared"]
"""Where the requests that name no conversation go (``--sessionless``)."""
SESSIONLESS: Final = get_args(Sessionless)

ROOM: Final = 64 << 20
"""What a conversation's process is given at least under ``--process-memory``'s default, which shares half the host's
memory among the processes that may run at once. Measured in a control group of 64 MiB (cgroup v1's
``max_usage_in_bytes``, through ``initialize``, ``tools/list`` and a call): a Python server on the ``mcp`` SDK 47 MiB,
npm's server-memory and server-filesystem 23 MiB each, none killed."""
DEFAULT_WARM: Final = 2
"""Processes started ahead for new conversations and requests of every kind (``--warm``)."""
DEFAULT_MAX_PROCESSES_PER_CALLER: Final = 8
"""A caller's processes at once (``--max-processes-per-principal``): a person's few conversations, and the scripts she
runs that end none (the docs' ``call.py`` six times in a minute, before it ended its own), within one caller's
share of :func:`default_max_processes`."""
EVICT_AFTER: Final = 10.0
"""How long a conversation may be idle before a new one ends it to make room, at its caller's
``--max-processes-per-principal`` or the gateway's ``--max-processes`` (``_admission``): long enough that two calls of
one turn keep it, short enough that a team's new conversations in a minute find room."""
DEFAULT_PROCESS_IDLE: Final = 300.0
"""How long a conversation's process lives without a request (``--process-idle``): at most five minutes, as the
docs say, where the sessions' ``idle_ttl`` sets none."""


def default_max_processes(memory: int | None = None) -> int:
    """``--max-processes`` unless given: as many processes as half the host's ``memory`` (in bytes; this host's unless
    given) gives :data:`ROOM` each, beside :data:`DEFAULT_WARM` started ahead and the shared one (so that
    ``--process-memory``'s default stays at least that), from 16 to 64. A 4 GiB host's 29 serve a team of 20 opening
    two conversations each in a minute, and one of them six more, an idle one ended for a new one when all run
    (``_admission``); a 16 GB host's and more, 64."""
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if memory is None else memory
    return min(max(host // 2 // ROOM - DEFAULT_WARM - 1, 16), 64)

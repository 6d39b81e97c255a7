"""The stdio gateway's modes and limits, as the gateway's configuration defines them once (``_config``): what
``--processes``, ``--sessionless`` and ``--conversation-state`` offer (their choices are these ``Literal``'s
arguments), what the table is given and what the status says, how long a conversation idles before a new one may
end it, and how many processes run by default. The configuration imports nothing of ``stdio/``, which is built from
it."""

from .._config import EVICT_AFTER, PROCESSES, SESSIONLESS, Processes, Sessionless, StateKept, default_max_processes

__all__ = ["EVICT_AFTER", "PROCESSES", "SESSIONLESS", "Processes", "Sessionless", "StateKept", "default_max_processes"]

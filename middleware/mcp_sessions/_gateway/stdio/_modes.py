"""The stdio gateway's modes, as the gateway's configuration defines them once (``_config``): what ``--processes``
and ``--sessionless`` offer (their choices are these ``Literal``'s arguments), what the table is given and what the
status says. The configuration imports nothing of ``stdio/``, which is built from it."""

from .._config import PROCESSES, SESSIONLESS, Processes, Sessionless

__all__ = ["PROCESSES", "SESSIONLESS", "Processes", "Sessionless"]

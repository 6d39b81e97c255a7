"""The stdio gateway's modes, defined once: what ``--processes`` and ``--sessionless`` offer (their choices are these
``Literal``'s arguments), what the table is given and what the status says. It imports nothing of the gateway, so that
the command's flags (``mcp-sessions --help``) can read it without loading the ``mcp`` SDK."""

from typing import Final, Literal, get_args

Processes = Literal["auto", "per-conversation", "shared"]
"""Whose conversations a process serves (``--processes``): ``"auto"`` becomes ``"per-conversation"`` or
``"per-caller"`` (:meth:`Table.choose`)."""
PROCESSES: Final = get_args(Processes)
Sessionless = Literal["per-caller", "per-request", "shared"]
"""Where the requests that name no conversation go (``--sessionless``)."""
SESSIONLESS: Final = get_args(Sessionless)

"""What the draft wire's checks share: its names and codes, and one run's client and findings."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from ._exchange import Exchange, member
from ._model import MODERN, Recorder
from ._peer import Peer

__all__ = [
    "INVALID_REQUEST",
    "KEY",
    "LONG_UNKNOWN_ID",
    "MISMATCH",
    "NOT_FOUND",
    "REQUIRED",
    "UNKNOWN_ID",
    "Draft",
    "echo_of",
    "is_rfc3339_utc",
    "tampered",
]

KEY: Final = "io.modelcontextprotocol/session"
EXTENSION: Final = "io.modelcontextprotocol/sessions"
NOT_FOUND: Final = -32043
REQUIRED: Final = -32044
MISMATCH: Final = -32020
INVALID_REQUEST: Final = -32600
UNKNOWN_ID: Final = "sess-conformance-unknown"
LONG_UNKNOWN_ID: Final = "sess-conformance-" + "x" * 283
"""An unknown id of 300 characters: ``-32043`` sends back its first 256."""
NOT_FOUND_DATA_LIMIT: Final = 256
_RFC3339: Final = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]00:00)")


def echo_of(exchange: Exchange) -> object:
    """The session metadata a result carries, ``None`` when there is none."""
    return member(exchange.result, "_meta", KEY)


def is_rfc3339_utc(value: object) -> bool:
    """Whether ``value`` is an RFC 3339 timestamp in UTC (``Z`` or a zero offset) naming a real instant."""
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def tampered(token: str) -> str:
    """``token`` with its middle character changed: a forgery of a real session id, never the id itself."""
    middle = len(token) // 2
    return token[:middle] + ("B" if token[middle] == "A" else "A") + token[middle + 1 :]


@dataclass
class Draft:
    """One run of the draft wire: the client, the recorder, and what the checks found on the way."""

    peer: Peer
    rec: Recorder
    tools: frozenset[str] = frozenset()
    errors: list[tuple[int, object]] = field(default_factory=list)
    """``(HTTP status, error code)`` of each session error the run provoked."""
    not_found: list[tuple[str, object]] = field(default_factory=list)
    """``(the sessionId sent, error.data)`` of each ``-32043`` answer."""
    echoes: int = 0

    def use(
        self,
        method: str,
        params: Mapping[str, object] | None = None,
        *,
        session: str,
        state: str | None = None,
        header: str | None = None,
        meta: Mapping[str, object] | None = None,
    ) -> Exchange:
        """A request in a session: its metadata in ``params._meta`` and, on 2026-07-28, the ``Mcp-Session-Id``."""
        value = {"sessionId": session, **({"state": state} if state is not None else {})}
        if self.peer.era == MODERN and header is None:
            header = session
        return self.peer.call(method, params, meta={**(meta or {}), KEY: value}, session_header=header)

    def tool(
        self, name: str, arguments: Mapping[str, object] | None = None, *, session: str, state: str | None = None
    ) -> Exchange:
        """``tools/call`` of ``name`` in a session."""
        return self.use("tools/call", {"name": name, "arguments": dict(arguments or {})}, session=session, state=state)

    def error(self, exchange: Exchange, expected: int, sent: str | None = None) -> str | None:
        """Note a session error the run provoked (``sent``: the sessionId it named); the problem if not ``expected``."""
        code = exchange.error_code
        self.errors.append((exchange.status, code))
        if code == NOT_FOUND and sent is not None:
            self.not_found.append((sent, member(exchange.answer, "error", "data")))
        if code == expected:
            return None
        return f"expected error {expected}, got {exchange.summary()}"

    def create(self) -> tuple[Exchange, str | None]:
        """``sessions/create`` as the draft's vector sends it (2026-07-28: with the envelope); its id, if any."""
        exchange = self.peer.call("sessions/create")
        token = member(exchange.result, "session", "sessionId")
        return exchange, token if isinstance(token, str) and token else None

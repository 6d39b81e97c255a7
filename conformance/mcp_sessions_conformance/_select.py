"""Which wires a run without ``--wire`` checks: those the server advertises, at the era each runs in.

A server is judged only on the wires it says it speaks, as the official suite runs a server's
scenarios only for the features it declares: ``capabilities.sessions`` (the draft),
``capabilities.experimental.session`` (the strawman), ``capabilities.sessions.required`` (SEP-1364
alternative 1), and for alternative 2, which has no capability, a top-level ``sessionId`` in the
answer to an ``initialize`` that asks for one. The draft and alternative 1 share the name
``sessions``: where its ``required`` is a boolean, each is taken only if the server does not answer
its create method with "method not found". The host conversation ids are this project's own, checked
only with ``--conventions``, wherever the draft is advertised.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ._answers import handshake_only
from ._link import Link
from ._model import LEGACY
from ._peer import ACCEPT, CLIENT_INFO, Peer, ProbeError, Unusable, member

METHOD_NOT_FOUND: Final = -32601


class Discovery:
    """What a server advertises at one era, read once: its capabilities, or why they could not be read."""

    def __init__(self, link: Link, url: str, era: str, headers: Mapping[str, str]) -> None:
        self.peer = Peer(link, url, era, headers)
        self.capabilities: Mapping[str, object] | None = None
        self.error: str | None = None
        self.legacy_only = False
        """Whether the server refused the era as one that speaks only 2025-11-25 does."""
        try:
            self.capabilities = self.peer.server_capabilities()
        except (ProbeError, Unusable) as exc:
            self.error = str(exc)
            last = self.peer.last
            if isinstance(exc, Unusable) and last is not None:
                self.error += f" (the last answer: {last.explained(era)})"
                self.legacy_only = era != LEGACY and handshake_only(last.status, last.head.decode("utf-8", "replace"))

    def _answers(self, method: str, params: Mapping[str, object]) -> bool:
        """Whether the server knows ``method`` (it does not answer "method not found")."""
        try:
            return self.peer.call(method, params).error_code != METHOD_NOT_FOUND
        except ProbeError:
            return False

    def advertises(self, wire: str) -> str | None:
        """``None`` when the server advertises ``wire``, else what it lacks (for the run's SKIPPED line)."""
        capabilities = self.capabilities or {}
        sessions = capabilities.get("sessions")
        shared = isinstance(member(sessions, "required"), bool)
        if wire in ("draft", "hosts"):
            if not isinstance(sessions, dict):
                return "no capabilities.sessions"
            return (
                "sessions/create is not a method there" if shared and not self._answers("sessions/create", {}) else None
            )
        if wire == "strawman":
            return (
                None
                if isinstance(member(capabilities, "experimental", "session"), dict)
                else "no capabilities.experimental.session"
            )
        if wire == "sep1364-alt1":
            if not shared:
                return "no boolean capabilities.sessions.required"
            return (
                None
                if self._answers("session/create", {"capabilities": {}})
                else "session/create is not a method there"
            )
        return None if self._opens_alt2_session() else "initialize with a null sessionId answers no sessionId"

    def _opens_alt2_session(self) -> bool:
        """SEP-1364 alternative 2's probe: ``initialize`` with a null top-level ``sessionId`` answers a new one."""
        if self.peer.era != LEGACY:
            return False
        probe = self.peer.fresh()
        params = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": CLIENT_INFO}
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params, "sessionId": None}
        try:
            opened = probe.post(body, ACCEPT, 0)
        except ProbeError:
            return False
        token = member(opened.answer, "sessionId")
        return isinstance(token, str) and bool(token)

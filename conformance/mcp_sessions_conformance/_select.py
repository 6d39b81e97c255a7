"""Which wires a run without ``--wire`` checks: those the server advertises, at the era each runs in.

A server is judged only on the wires it says it speaks, as the official suite runs a server's
scenarios only for the features it declares: ``capabilities.sessions`` (the draft) and
``capabilities.experimental.session`` (the strawman). The host conversation ids are this project's own,
checked only with ``--conventions``, wherever the draft is advertised.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._answers import handshake_only
from ._link import Link
from ._model import LEGACY
from ._peer import Peer, ProbeError, Unusable, member


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

    def advertises(self, wire: str) -> str | None:
        """``None`` when the server advertises ``wire``, else what it lacks (for the run's SKIPPED line)."""
        capabilities = self.capabilities or {}
        if wire in ("draft", "hosts"):
            return None if isinstance(capabilities.get("sessions"), dict) else "no capabilities.sessions"
        return (
            None
            if isinstance(member(capabilities, "experimental", "session"), dict)
            else "no capabilities.experimental.session"
        )

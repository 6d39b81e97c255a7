"""The session an echo is built from, shared by the unit tests of the response rewriting."""

from __future__ import annotations

KEY = "io.modelcontextprotocol/session"
ECHO = {"sessionId": "aaa.bbb.ccc", "expiresAt": "2027-01-15T08:00:00Z"}


class FakeSession:
    token = "aaa.bbb.ccc"
    state_token = None
    expires_at_timestamp = 1_800_000_000

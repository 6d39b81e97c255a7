"""Who a call belongs to, as telemetry names it."""

from __future__ import annotations

__all__ = ["Conversation"]


class Conversation:
    """Who a call belongs to, as telemetry names it: an id and the source that found it.

    Application code never sees one: it sees a :class:`~mcp_sessions.Session`
    or nothing. A host's conversation id without data (``conversation_data``
    off) is only this, so ``get_session()`` is ``None`` while every span of the
    request still carries ``session.id``. ``no_data`` says why a conversation
    that could have had data has none (it goes into the "session required" error);
    ``user`` is a user id the host sent beside it (ChatGPT's anonymized ``openai/subject``),
    ``turn`` the turn of the conversation this call is part of (Codex's ``turn_id``).
    """

    __slots__ = ("id", "no_data", "source", "turn", "user")

    def __init__(
        self, id: str, source: str, *, user: str | None = None, turn: str | None = None, no_data: str | None = None
    ) -> None:
        self.id = id
        self.source = source
        self.user = user
        self.turn = turn
        self.no_data = no_data

    def __repr__(self) -> str:
        return f"<Conversation source={self.source!r} id={self.id!r}>"

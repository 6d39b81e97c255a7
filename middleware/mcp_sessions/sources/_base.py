"""The seam: what a session source is, and how far its id is trusted."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Protocol

from starlette.types import Scope

if TYPE_CHECKING:
    from .._plan import Call, Plan
    from .._session import Session

__all__ = ["Conversation", "SessionSource", "Trust"]


class Trust(enum.Enum):
    """How far a source's id is trusted, which decides what its session may do."""

    #: Minted by a server and verified here: data, state and tracing.
    VERIFIED = "verified"
    #: Only asserted by the client: tracing only, unless the operator opts into data.
    ASSERTED = "asserted"


class Conversation:
    """Who a call belongs to, as telemetry names it: an id and the source that found it.

    Application code never sees one: it sees a :class:`~mcp_sessions.Session`
    or nothing. A host's conversation id without data (``conversation_data``
    off) is only this, so ``get_session()`` is ``None`` while every span of the
    request still carries ``session.id``. ``no_data`` says why a conversation
    that could have had data has none (it goes into the "session required" error);
    ``user`` is a user id the host sent beside it (ChatGPT's anonymized ``openai/subject``).
    """

    __slots__ = ("id", "no_data", "source", "user")

    def __init__(self, id: str, source: str, *, user: str | None = None, no_data: str | None = None) -> None:
        self.id = id
        self.source = source
        self.user = user
        self.no_data = no_data

    def __repr__(self) -> str:
        return f"<Conversation source={self.source!r} id={self.id!r}>"


class SessionSource(Protocol):
    """Finds the session a call belongs to.

    ``session_for`` returns ``None`` ("not mine": the next source is asked),
    a :class:`~mcp_sessions.Session`, or raises :class:`~mcp_sessions._answers.Refusal`.
    A source that recognises the call but gives it no data sets
    ``call.conversation`` (tracing only) and returns ``None``.
    """

    name: str
    trust: Trust

    async def session_for(self, scope: Scope, call: Call, plan: Plan) -> Session | None: ...

"""The seam: what a session source is, and how far its id is trusted."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Protocol

from starlette.types import Scope

if TYPE_CHECKING:
    from ..plan import Call, Plan
    from ..session import Session

__all__ = ["SessionSource", "Trust"]


class Trust(enum.Enum):
    """How far a source's id is trusted, which decides what its session may do."""

    #: Minted by a server and verified here: data, state and tracing.
    VERIFIED = "verified"
    #: Only asserted by the client: tracing only, unless the operator opts into data.
    ASSERTED = "asserted"


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

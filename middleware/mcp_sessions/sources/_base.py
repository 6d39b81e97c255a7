"""The seam: what a session source is, and how far its id is trusted."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, NamedTuple, Protocol, TypeAlias, runtime_checkable

from starlette.types import Scope

if TYPE_CHECKING:
    from .._plan import Call, Plan
    from .._session import Session, SessionService
    from .._tokens import IdDigests
    from ._host import ConversationData, HostKey

__all__ = [
    "DEFAULT_MAX_CONVERSATIONS_PER_CALLER",
    "MAX_SESSIONS_PER_REQUEST",
    "SessionSource",
    "SourceContext",
    "SourceFactory",
    "Trust",
]

DEFAULT_MAX_CONVERSATIONS_PER_CALLER: Final = 1_000
"""Host conversations with data one caller (a principal, else a client address) may have at once, per process."""
MAX_SESSIONS_PER_REQUEST: Final = 8
"""The distinct sessions one request may name (a batch's elements; a session and its state count as one): each is
verified and touched once, however many elements name it. A batch element naming one more is refused (-32600), or,
for a host's conversation, gets no data."""


class Trust(enum.Enum):
    """How far a source's id is trusted, which decides what its session may do."""

    #: Minted by a server and verified here: data, state and tracing.
    VERIFIED = "verified"
    #: Only asserted by the client: tracing only, unless the operator opts into data.
    ASSERTED = "asserted"


@runtime_checkable
class SessionSource(Protocol):
    """Finds the session a call belongs to.

    ``session_for`` returns ``None`` ("not mine": the next source is asked),
    a :class:`~mcp_sessions.Session`, or raises :class:`~mcp_sessions.Refusal` (the call is then
    answered with it and never reaches the app).
    A source that recognises the call but gives it no data sets
    ``call.conversation`` (tracing only) and returns ``None``.
    """

    name: str
    trust: Trust

    async def session_for(self, scope: Scope, call: Call, plan: Plan) -> Session | None: ...


class SourceContext(NamedTuple):
    """What a middleware gives each source factory of its chain (``sources=``) when it is built."""

    sessions: SessionService
    """Mints, resolves and adopts sessions: :meth:`~mcp_sessions._session.SessionService.adopt` gives a session
    with data in the store to an id a source found."""
    digests: IdDigests
    """Keyed digests, so that an id a client sent is never stored or logged as sent."""
    host_keys: tuple[HostKey, ...]
    conversation_data: ConversationData
    adopt_transport_sessions: bool
    max_conversations_per_caller: int | None = DEFAULT_MAX_CONVERSATIONS_PER_CALLER
    """Host conversations with data one caller may have at once (``None``: no maximum)."""


SourceFactory: TypeAlias = "Callable[[SourceContext], SessionSource | None]"
"""Builds a source for one middleware, or ``None`` when its configuration leaves the source out."""

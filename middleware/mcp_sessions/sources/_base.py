"""The seam: what a session source is, what the middleware gives one, and the chain of sources it asks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Final, NamedTuple, Protocol, TypeAlias, TypeGuard, TypeVar, cast, runtime_checkable

from starlette.types import Scope

from .._session import SessionNotFound
from .._wire import Refusal

if TYPE_CHECKING:
    from .._plan import Call, Plan
    from .._session import Session, SessionService
    from .._tokens import IdDigests
    from ._host import ConversationData, HostKey

T = TypeVar("T")

DEFAULT_MAX_CONVERSATIONS_PER_CALLER: Final = 1_000
"""Host conversations with data one caller (a principal, else a client address) may have at once, per process."""
MAX_SESSIONS_PER_REQUEST: Final = 8
"""The distinct sessions one request may name (a batch's elements; a session and its state count as one): each is
verified and touched once, however many elements name it. A batch element naming one more is refused (-32600), or,
for a host's conversation, gets no data."""
TOO_MANY_SESSIONS_MESSAGE: Final = f"a request may name at most {MAX_SESSIONS_PER_REQUEST} sessions"


@runtime_checkable
class SessionSource(Protocol):
    """Finds the session a call belongs to; the middleware asks each source of its chain in turn.

    What a call gets is the source's to decide: a session with data (:meth:`SessionService.adopt`) for an id
    the server minted or the operator chose to trust, or, for an id only the client asserts, a
    ``call.conversation`` (tracing only) and ``None``.
    """

    name: str
    """The source's name: where its sessions came from, in telemetry."""

    async def session_for(self, scope: Scope, call: Call, plan: Plan) -> Session | None:
        """``None`` for "not mine" (the next source is asked), the call's session, or raise a
        :class:`~mcp_sessions.Refusal` (the call is answered with it and never reaches the app).

        A source that recognises the call but gives it no data sets ``call.conversation`` (tracing only)
        and returns ``None``.
        """


class SourceContext(NamedTuple):
    """What a middleware gives each source factory of its chain (``sources=``) when it is built."""

    sessions: SessionService
    """Mints, resolves and adopts sessions: :meth:`~mcp_sessions.sources.SessionService.adopt` gives a session
    with data in the store to an id a source found."""
    digests: IdDigests
    """Keyed digests, so that an id a client sent is never stored or logged as sent."""
    host_keys: tuple[HostKey, ...]
    """Where hosts put their conversation ids, in the order they are tried (``conversation_keys``)."""
    conversation_data: ConversationData
    """Whether a host's conversation gets data, and keyed by what (``conversation_data``)."""
    adopt_transport_sessions: bool
    """Whether a 2025 transport session the server minted becomes a session (``adopt_transport_sessions``)."""
    max_conversations_per_caller: int | None = DEFAULT_MAX_CONVERSATIONS_PER_CALLER
    """Host conversations with data one caller may have at once (``None``: no maximum)."""


SourceFactory: TypeAlias = "Callable[[SourceContext], SessionSource | None]"
"""Builds a source for one middleware, or ``None`` when its configuration leaves the source out."""


async def once_per_request(plan: Plan, key: tuple[str, ...], find: Callable[[], Awaitable[T]]) -> T | None:
    """``find()`` for the first message of the request that names ``key``, its outcome reused for a batch's others
    (a refusal or a session not found raised again); ``None`` once the request names
    :data:`MAX_SESSIONS_PER_REQUEST` other sessions."""
    named = plan.named = plan.named or {}
    if key not in named:
        if len(named) >= MAX_SESSIONS_PER_REQUEST:
            return None
        try:
            named[key] = await find()
        except (Refusal, SessionNotFound) as refused:
            named[key] = refused
            raise
    if isinstance(found := named[key], Refusal | SessionNotFound):
        raise found
    return cast("T", found)


def _is_factory(entry: SessionSource | SourceFactory) -> TypeGuard[SourceFactory]:
    """A class (whose instances are sources) or a function: called with the middleware's context."""
    return isinstance(entry, type) or not isinstance(entry, SessionSource)


def check_chain(entries: Iterable[SessionSource | SourceFactory]) -> tuple[SessionSource | SourceFactory, ...]:
    """``entries`` as a chain; ``TypeError`` naming an entry that is neither a source nor a factory."""
    chain = tuple(entries)
    for entry in chain:
        if _is_factory(entry) and not callable(entry):
            raise TypeError(
                "sources= takes session sources (objects with name and session_for) and factories that "
                f"build one from a SourceContext (a class, or a function such as DataLayerSource.from_context), "
                f"not {entry!r}"
            )
    return chain


def build_chain(entries: Iterable[SessionSource | SourceFactory], context: SourceContext) -> tuple[SessionSource, ...]:
    """The sources of one middleware, in order: each object as it is, each factory's source (if any)."""
    chain: list[SessionSource] = []
    for entry in entries:
        if _is_factory(entry):
            if (source := entry(context)) is not None:
                chain.append(source)
        elif isinstance(entry, SessionSource):
            chain.append(entry)
    return tuple(chain)

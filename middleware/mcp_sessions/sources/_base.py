"""The seam: what a session source is, what the middleware gives one, and the chain of sources it asks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import KW_ONLY, dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    Literal,
    NamedTuple,
    Protocol,
    TypeAlias,
    TypeGuard,
    TypeVar,
    runtime_checkable,
)

from starlette.types import Scope

if TYPE_CHECKING:
    from .._session import Session
    from ..profiles import Era, WireProfile

T = TypeVar("T")

DEFAULT_MAX_CONVERSATIONS_PER_CALLER: Final = 1_000
"""Host conversations with data one caller (a principal, else a client address) may have at once, per process."""
MAX_SESSIONS_PER_REQUEST: Final = 8
"""The distinct sessions one request may name (a batch's elements; a session and its state count as one): each is
verified and touched once, however many elements name it. A batch element naming one more is refused (-32600), or,
for a host's conversation, gets no data."""
TOO_MANY_SESSIONS_MESSAGE: Final = f"a request may name at most {MAX_SESSIONS_PER_REQUEST} sessions"


@dataclass(eq=False)
class Conversation:
    """Who a call belongs to, as telemetry names it: an id and the source that found it.

    Application code never sees one: it sees a :class:`~mcp_sessions.Session`
    or nothing. A host's conversation id without data (``conversation_data``
    off) is only this, so ``get_session()`` is ``None`` while every span of the
    request still carries ``session.id``.
    """

    id: str
    """The conversation's id, as the host or the source named it."""
    source: str
    """The name of what found it: a host (``openai``…), ``baggage``, or a source's own name."""
    _: KW_ONLY
    user: str | None = None
    """A user id the host sent beside it (ChatGPT's anonymized ``openai/subject``)."""
    turn: str | None = None
    """The turn of the conversation this call is part of (Codex's ``turn_id``)."""
    no_data: str | None = None
    """Why a conversation that could have had data has none (it goes into the "session required" error)."""

    def __repr__(self) -> str:
        return f"<Conversation source={self.source!r} id={self.id!r}>"


class CallView(Protocol):
    """What a source is asked about: one JSON-RPC call of a request (each element of a batch is one)."""

    message: Any
    """The call as parsed: a dict with its ``method`` (``message.get("params")`` for its params)."""
    profile: WireProfile
    """The wire it speaks (its ``carrier`` reads the session the call names)."""
    conversation: Conversation | None
    """Set by a source that recognises the call but gives it no data: who it belongs to, in telemetry only."""


class RequestView(Protocol):
    """What a source reads of the HTTP request the call came in."""

    headers: dict[bytes, bytes]
    """The request's headers, by lower-case name (the first of each)."""
    era: Era
    """The protocol era the ``Mcp-Protocol-Version`` header names (:class:`mcp_sessions.profiles.Era`)."""
    traced: bool
    """Whether an OpenTelemetry SDK records this request."""

    async def once(self, key: tuple[str, ...], find: Callable[[], Awaitable[T]]) -> T | None:
        """``await find()`` for the first call of the request that names ``key`` (the source's name and what
        names the session), its outcome (a refusal raised too) reused for a batch's other calls; ``None`` once the
        request names 8 other sessions (the middleware's limit per request)."""


@runtime_checkable
class SessionSource(Protocol):
    """Finds the session a call belongs to; the middleware asks each source of its chain in turn.

    What a call gets is the source's to decide: a session with data (:meth:`SourceSessions.adopt`) for an id
    the server minted or the operator chose to trust, or, for an id only the client asserts, a
    ``call.conversation`` (tracing only) and ``None``.
    """

    name: str
    """The source's name: where its sessions came from, in telemetry."""

    async def session_for(self, scope: Scope, call: CallView, request: RequestView) -> Session | None:
        """``None`` for "not mine" (the next source is asked), the call's session, or raise a
        :class:`~mcp_sessions.Refusal` (the call is answered with it and never reaches the app).

        A source that recognises the call but gives it no data sets ``call.conversation`` (tracing only)
        and returns ``None``.
        """


class SourceSessions(Protocol):
    """What a source may do with the middleware's sessions: find, adopt and end them (``SourceContext.sessions``)."""

    async def principal_of(self, scope: Scope) -> str | None:
        """The digest of the caller's principal (the ``principal`` hook's answer); ``None`` for an anonymous one."""

    async def resolve(self, scope: Scope, token: str, state_token: str | None) -> Session:
        """The live session a data-layer ``token`` names for this caller; ``SessionNotFound`` otherwise."""

    async def adopt(self, scope: Scope, session_id: str, source: str) -> Session | None:
        """A session with data in the store for an id a source found (a digest, never the id as sent);
        ``None`` once it has ended. ``source`` names the source, in telemetry."""

    async def end(self, session_id: str) -> bool:
        """End a session :meth:`adopt` gave and drop its data; ``False`` if the store could not."""

    @property
    def limits_creation(self) -> bool:
        """Whether new sessions count against a create limit (``create_limit``)."""

    def wait_to_create(self, scope: Scope, principal: str | None) -> float:
        """Seconds before this caller may start another session under the create limit (0: now, and it counts)."""

    @property
    def kept_for(self) -> float:
        """Seconds the store keeps an adopted session's records after a request starts it."""


class SourceDigests(Protocol):
    """Keyed digests of the ids a source finds (``SourceContext.digests``): the same on every replica that
    shares the keys, and no way back to the id."""

    def transport(self, transport_session_id: bytes) -> str:
        """The stable id of a 2025-era transport session: ``ts-`` and 24 characters."""

    def conversation(self, source: str, conversation_id: str, principal: str | None) -> str:
        """The stable id of a host's conversation (with ``principal``, of that user's conversation)."""


class HostKey(NamedTuple):
    """Where one host puts its conversation id: a ``_meta`` key or an HTTP header, and the source's name."""

    name: str
    """The source's name in telemetry (``openai``, ``meta:acme/chat``…)."""
    place: Literal["meta", "header"]
    """Whether the id is in ``params._meta`` or in a header."""
    key: str
    """The ``_meta`` key, or the header's name in lower case."""
    member: str | None = None
    """With a member, the id is that member of the object at ``_meta[key]`` (Codex's turn metadata)."""


ConversationData = Literal["off", "principal", "anonymous"]
"""Whether a host's conversation gets data: ``off`` (tracing only), or keyed by the ``principal``'s conversation
(unauthenticated requests get none), or ``anonymous`` (by the host's id alone)."""
CONVERSATION_DATA_MODES: Final = ("off", "principal", "anonymous")
"""The values ``conversation_data`` takes."""


class SourceContext(NamedTuple):
    """What a middleware gives each source factory of its chain (``sources=``) when it is built."""

    sessions: SourceSessions
    """Resolves, adopts and ends sessions: :meth:`~mcp_sessions.sources.SourceSessions.adopt` gives a session
    with data in the store to an id a source found."""
    digests: SourceDigests
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

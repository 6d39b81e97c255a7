"""The process table's words, which the table and its parts share (httpcore's ``_models`` for its pool): what names a
conversation (:class:`Key`), who asks (:class:`Caller`, :class:`Owner`, :class:`Asking`), why a process ended
(:class:`EndReason`), and what the operator sees and counts of the processes (:class:`ProcessView`,
:class:`ProcessEvents`). Nothing here does I/O."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import Final, Literal, NamedTuple

from starlette.types import Scope

from ..._asgi import header
from ..._config import SessionsConfig
from ..._session import SCOPE_KEY, Session, authenticated_user, caller_of, principal_digest
from ..._wire import printable
from ..._wire.protocol import MCP_PROTOCOL_VERSION_HEADER, MCP_SESSION_ID_HEADER
from ...profiles import Era
from .._serving import DRAINING, REFUSING
from ..auth._users import Credentials, ProcessEnv, ProxiedUser

Kind = Literal[
    "transport-session", "data-layer-session", "host-conversation", "sessionless", "request", "caller", "shared"
]
"""What names a conversation, and so who may reach its process (``_table``): a 2025 client's transport
session (its ``Mcp-Session-Id``'s digest), a data-layer session (its id), a host's conversation id (bound to its
caller), a caller's 2026-07-28 requests that name none (one conversation of hers), a 2026-07-28 request that
names none (a process of its own); a caller (its own process, which serves all of its conversations, each named
in ``_meta``), or nothing (the shared process)."""


class Key(NamedTuple):
    """A conversation's name in the table: its kind, and its id within that kind (never a bearer value)."""

    kind: Kind
    id: str


@dataclass(frozen=True)
class Owner:
    """A caller as the operator reads them, ``name`` (the authenticated principal's name, else the client address,
    escaped: what prints), and who they are, ``identity``, which alone compares: how they were authenticated (a token
    of the issuer, a proxy's header, none) and their id. A proxy's "alice" is not the "alice" of a token, and a name
    alone (a ``str``) is no owner."""

    name: str = field(compare=False)
    identity: tuple[str, ...]

    def __str__(self) -> str:
        return self.name


class Caller(NamedTuple):
    """Who asks: ``id`` is whom the limits count and a conversation belongs to (the principal's digest, else the
    client address), ``name`` how the operator knows them (:class:`Owner`)."""

    id: str
    name: Owner

    def same_as(self, other: Caller | None) -> bool:
        """Whether ``other`` is this caller: counted as one (``id``), and the same principal (``name``'s identity)."""
        return other is not None and other.id == self.id and other.name == self.name


def known_as(scope: Scope) -> Owner:
    """The caller as the operator knows them (:class:`Owner`): the authenticated principal, else the address."""
    user = scope.get("user")
    if user is not None and getattr(user, "is_authenticated", False):
        kind = "proxy" if isinstance(user, ProxiedUser) else "token"
        return Owner(printable(str(user.display_name)), (kind, str(authenticated_user(scope))))
    client = scope.get("client")
    address = client[0] if client else ""
    return Owner(printable(address), ("address", address))


class Asking(NamedTuple):
    """A request as the process table's decisions read it, every input of theirs (:func:`asking`): who asks, what it
    names of its conversation, and what a process it starts is given."""

    caller: Caller
    session: Session | None  # what the sessions found it in
    transport: bytes | None  # :func:`transport_of`
    user: object = None  # the authenticated user (``scope["user"]``): who may end its 2025 transport session
    draining: bool = False  # the gateway drains: no new conversation but a 2025 transport session's first call
    refusing: bool = False  # the drain's signalled calls are answered: no new request (but a retry's input)
    credentials: Callable[[], Credentials] = partial(ProcessEnv().of, None)  # --process-env's, if a process starts
    later: list[Callable[[], None]] | None = None  # its AFTER_ANSWER: done once its answer is sent (None: at once)


AFTER_ANSWER: Final = "mcp_sessions.gateway.after_answer"
"""In a request's scope, what it leaves to do once its answer is sent (``_server._Opening`` does it)."""


async def asking(scope: Scope, config: SessionsConfig, process_env: ProcessEnv) -> Asking:
    """The request ``scope`` as the table reads it, read here once, at its edge (``Table.relay``, the sessions'
    create, a 2025 transport session's opening): who asks (whom the limits count, as the create limit does: the
    principal, else the client address), and what the request names: its session, its 2025 transport session."""
    principal = await principal_digest(config.principal, scope, config.keys.audience)
    return asked_by(scope, principal, scope.get(SCOPE_KEY), process_env)


def asked_by(scope: Scope, principal: str | None, session: Session | None, process_env: ProcessEnv) -> Asking:
    """What the table's decisions read of the request ``scope`` of ``principal`` (its digest; None: unauthenticated,
    counted by its address), in ``session``, read here once."""
    caller = Caller(caller_of(scope, principal), known_as(scope))
    draining = scope.get(DRAINING, bool)()
    refusing = scope.get(REFUSING, bool)()
    credentials = partial(process_env.of, scope)
    later = scope.get(AFTER_ANSWER)
    return Asking(caller, session, transport_of(scope), scope.get("user"), draining, refusing, credentials, later)


def transport_of(scope: Scope) -> bytes | None:
    """The ``Mcp-Session-Id`` of a request's 2025 transport session: on the 2025 path only (a 2026-07-28 request's
    header is its session token, or anything its client put there, and names none)."""
    headers = scope.get("headers", ())
    raw = header(headers, MCP_SESSION_ID_HEADER)
    return raw if Era.of(header(headers, MCP_PROTOCOL_VERSION_HEADER)) is Era.LEGACY else None


def key_digest(key: Key) -> str:
    """A short digest of a conversation's key, for logs and the operator's view: it names, it grants nothing."""
    return hashlib.sha256(f"{key.kind}\0{key.id}".encode()).hexdigest()[:12]


class EndReason(Enum):
    """Why a process ended: ``label`` names it in the ends metric (``mcp_sessions.process.end_reason``, a fixed
    vocabulary) and the status, ``text`` in the log and in its conversation's error (a crash's own words are its
    :class:`End`'s ``detail``, which begin with the same word)."""

    IDLE = "idle", "idle"
    EXPIRED = "expired", "expired"
    EVICTED = "evicted", "evicted"
    ANSWERED = "answered", "answered"
    SHUTDOWN = "shutdown", "shutdown"
    SESSION_ENDED = "session_ended", "its session ended"
    INPUT_LATE = "input_late", "its input came too late"
    FAILED = "failed_to_start", "failed to start"
    UIDS_IN_USE = "failed_to_start", "every uid is in use"
    NOT_INITIALIZED = "failed_to_start", "it did not initialize"
    BY_USER = "ended_by_user", "ended by its user"
    CRASH = "crash", "crash"
    OVER_MEMORY = "over_memory_bound", "over its memory bound (--process-memory)"
    OVER_PIDS = "over_process_bound", "over its process bound (--process-pids)"
    EXITED = "other", "exited"
    ENDED = "other", "ended"
    ELSEWHERE = "other", "it ran on another replica, or before this one restarted"
    ASKED = "other", "asked its revisions"
    UNANSWERED = "other", "it did not answer server/discover"

    def __init__(self, label: str, text: str) -> None:
        self.label = label
        self.text = text


STARTS_FAILED: Final = frozenset(
    {EndReason.FAILED, EndReason.UIDS_IN_USE, EndReason.NOT_INITIALIZED, EndReason.UNANSWERED}
)
"""The ends of a process that never served: what it said is why it failed to start."""
OVER: Final = {"memory": EndReason.OVER_MEMORY, "pids": EndReason.OVER_PIDS}
"""The end of a process whose control group reached a bound (``Place.exceeded``), by the bound."""
UNASKED: Final = frozenset({EndReason.CRASH, EndReason.OVER_MEMORY, EndReason.OVER_PIDS, EndReason.EXITED})
"""The ends no one asked for: the sessions its conversations served end with it (a crash as any other end)."""


class End(NamedTuple):
    """How a process ended, set once where it ends (``Child.stop``; a crash's cause, once its group is stopped,
    in its place) and told in the same words everywhere: ``reason.label`` in the ends metric and the status,
    :meth:`__str__` in the log and the client's error."""

    reason: EndReason
    detail: str = ""  # its own words, where the reason's text does not say which (which crash)

    def __str__(self) -> str:
        return self.detail or self.reason.text

    @property
    def failure(self) -> str | None:
        """Why it failed to start, if it never served (:data:`STARTS_FAILED`)."""
        return str(self) if self.reason in STARTS_FAILED else None


class ProcessEvents:
    """What the process metrics count (``_status.ProcessMetrics`` counts them); by default, nothing."""

    def started(self) -> None:
        """A process was started."""

    def ended(self, why: EndReason) -> None:
        """A process ended, for ``why``."""

    def refused(self, limit: str) -> None:
        """A conversation was refused a process by ``limit``, the option's name."""


@dataclass(frozen=True)
class ProcessView:
    """One live process, as an operator sees it (:meth:`~._pool.Pool.views`); its memory is read from ``/proc``."""

    kind: str  # a conversation's Kind ("caller": a caller's own process), or "warm"
    principal: Owner | None  # whose it is (the principal's name, else the client address); None for shared or warm
    conversation: str | None  # a short digest of its conversation's key (never a bearer value); None likewise
    pid: int | None
    age: float  # seconds since its process started
    idle: float  # seconds since its last request
    requests: int  # requests it has served

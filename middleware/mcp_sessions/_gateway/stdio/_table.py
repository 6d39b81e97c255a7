"""The process table of ``mcp-sessions gateway --stdio``: which process a request reaches.

:class:`Table` holds the shared process and one per conversation (or, ``"per-caller"``, one per caller for all
of its conversations), each conversation with its owner in it. The parts it is made of each answer one question:
``_pool`` makes the processes (through a factory: a real ``Child``, or a test's in memory) and keeps those
started ahead; ``_admission`` says whether a new conversation may have one (the limits, eviction);
``_lifetimes`` runs each to its end and answers an ended conversation with the error of its kind. What a
process's messages do for its client is ``_relay``'s.

Who may reach a process is decided in one place, :meth:`Table.conversation_for`, which every relayed request
walks once (:meth:`Table.relay`), as httpcore's pool serves a request: the request read once at its edge (one
:class:`~._models.Asking`: who asks, what it names, its session), then one decision from that value that returns
what it leaves to do (:class:`Actions`), then one method that does it (:meth:`Table.perform`). There, the request's
name for its conversation becomes a typed :class:`Key` (a 2025 transport session on the 2025 path only, a
data-layer session, a host's conversation, the caller's requests that name none, a request's own, the shared
one); each conversation is created whole, its owner in it; and the caller is checked against that owner, for
every kind, before any process is reached.
"""

from __future__ import annotations

import hashlib
import logging
import math
import secrets
import shlex
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Literal, NamedTuple

import anyio
import anyio.abc
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import LATEST_MODERN_VERSION
from pydantic import ValidationError
from starlette.types import Scope

from ..._bounded import BoundedDict
from ..._config import SessionsConfig
from ..._session import PRINCIPAL_CLAIM, SCOPE_KEY
from ..._tokens import IdDigests, SessionClaims
from ..._wire import Refusal
from ..._wire.protocol import RATE_LIMITED, UPSTREAM_UNAVAILABLE
from ...subscriptions import SessionSubscriptionBus
from .._front import StartupFailed
from .._serving import CUT, CUT_DATA, RESTARTING
from ..auth._users import ProcessEnv
from ._admission import Admission, refused
from ._child import EXIT_DRAIN, Child, ChildFactory, ChildProcess, ProcessOptions
from ._first import FirstProcess
from ._lifetimes import EndTransport, Lifetimes
from ._models import (
    UNASKED,
    Asking,
    Caller,
    End,
    EndReason,
    Key,
    Owner,
    ProcessEvents,
    asked_by,
    asking,
    key_digest,
)
from ._modes import Processes, Sessionless, StateKept
from ._pool import Pool
from ._relay import ANSWER_WITHIN, CHILD_EXITED, Conversation, Process

logger = logging.getLogger("mcp_sessions.gateway")

_HELD: Final = "mcp-sessions.gateway.held-by"  # in a host conversation's data: the start that runs it
_WATCHED: Final = ("transport-session", "data-layer-session")  # end with their session, anywhere
LISTS: Final = frozenset({"tools/list", "prompts/list", "resources/list", "resources/templates/list"})
"""What 2026-07-28 says depends on no conversation (``server/discover`` too, which no process answers)."""
MAX_ENDED: Final = 100_000
"""Ended conversations remembered (each answered with the error of its kind, never a new process); oldest first."""
EXPECTED: Final = (EndReason.IDLE, EndReason.EXPIRED, EndReason.BY_USER)
"""The ends a caller's own process (``caller``, ``sessionless``) leaves no tombstone for: her next request gets a
new one. Any other end (a crash, a bound, eviction) is told to her next request once (``Table._own``)."""
Metrics = Callable[[Callable[[], Counter[str]]], ProcessEvents]
"""What counts the table's processes, given how many of each kind live (``_status.ProcessMetrics``)."""


@dataclass(frozen=True)
class Actions:
    """Everything a decision of the table leaves to do, which :meth:`Table.perform` does: a decision starts,
    ends and waits for nothing, as httpcore's pool's assignment of requests to connections returns the connections
    to close, and its request closes them in one place."""

    start: tuple[Process, ...] = ()  # made and counted live (``Pool.start``): to run, in the pool's task group
    end: tuple[tuple[Conversation, EndReason], ...] = ()  # to end now (their next request is refused), sessions too
    release: tuple[Conversation, ...] = ()  # requests' own, answered: ended once that answer is sent
    retain: tuple[Conversation, ...] = ()  # requests' own that asked for input: kept for the retry that brings it
    refill: bool = False  # one started ahead may have been taken: more are started once the answer is sent


NOTHING: Final = Actions()


class Reached(NamedTuple):
    """A decision's answer for a request: the conversation it reaches, and what the decision leaves to do."""

    conversation: Conversation
    actions: Actions = NOTHING


class Table:
    """Which process a request reaches: one table of conversations, each keyed by its :class:`Key` with its owner
    in it, and of what ended conversations leave (their tombstones, the requests kept for their input), the one
    owner of them all. Each event (a request, a process's end, an answer) is one synchronous decision here, from
    what it is handed (:class:`Asking`: :meth:`route`, :meth:`open`, :meth:`answered`, :meth:`process_ended`),
    which starts and ends nothing: it returns what to do (:class:`Actions`: the processes it made, through
    ``pool``, to launch; the conversations to end, one evicted by ``admission``), and :meth:`perform` does it, each
    process's life run by ``lifetimes``. Around the decisions, the async methods as the gateway runs it: what a
    request names and who asks read once, before the table decides (:meth:`relay`), its process awaited after
    (:meth:`reach`); its shared process started and every process stopped with the gateway, what the server
    speaks chosen, each request relayed, and the operator's and each user's views."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        config: SessionsConfig,
        processes: Processes,
        idle: float,
        max_processes: int,
        per_caller: int,
        sessionless: Sessionless,
        warm: int,
        environ: Mapping[str, str],
        bus: SessionSubscriptionBus,
        options: ProcessOptions | None = None,
        process_env: ProcessEnv | None = None,
        factory: ChildFactory = Child,
        fronted: bool = False,
        end_transport: EndTransport | None = None,
        metrics: Metrics = lambda kinds: ProcessEvents(),
        state: StateKept = "process",
        first: FirstProcess | None = None,
    ) -> None:
        self.config = config
        # the operator's word that a conversation's state outlives its process (--conversation-state disk): see resumed
        self.state = state
        self.bus = bus
        self.sessionless = sessionless
        self.process_env = ProcessEnv() if process_env is None else process_env
        self.fronted = fronted  # a replica behind a front (--forwarded-allow-ips): see gone
        # "auto" (Table.choose) becomes one of the others before the first request
        self.mode: Literal["auto", "per-conversation", "per-caller", "shared"] = processes
        events = metrics(lambda: self.pool.kinds())
        self.lifetimes = Lifetimes(idle=idle, store=config.store, ended=self.process_ended, end_transport=end_transport)
        self.pool = Pool(
            command,
            warm=warm if processes != "shared" else 0,
            environ=environ,  # the allow-list's (_sandbox.environment)
            max_line=config.max_response_size,
            options=options,
            process_env=self.process_env,
            bus=bus,
            serve=self.lifetimes.serve,
            events=events,
            factory=factory,
            first=first,  # the shared process, started ahead as the gateway started (_first)
        )
        self.admission = Admission(max_processes, per_caller, config.create_limit, events)
        self._conversations: dict[Key, Conversation] = {}
        self._ended: BoundedDict[Key, End] = BoundedDict(MAX_ENDED)  # tombstones: how each ended
        self._retained: dict[str, Conversation] = {}  # a request's child awaiting its retry, by requestState
        self.digests = IdDigests(config.keys)  # the middleware's: a transport session's key is its adopted session's
        self.instance = secrets.token_hex(8)  # this start of the gateway, as a host conversation's data names it
        self._shared: Process | None = None
        self._moved: BoundedDict[str, Key] = BoundedDict(MAX_ENDED)  # a session opened in a transport session: its key
        # 2025 transport sessions with no process yet, oldest first: their callers, ids and users
        self._connections: dict[Key, tuple[str, bytes, object]] = {}

    def transport_key(self, raw: bytes) -> Key:
        """The key of the 2025 transport session whose ``Mcp-Session-Id`` is ``raw``: a digest, never the id."""
        return Key("transport-session", self.digests.transport(raw))

    def route(self, asked: Asking, method: str, state: object) -> Reached:
        """The decision: the conversation a caller's request reaches (and what reaching it leaves to do), named by
        its ``session``, its 2025 transport session (``transport``) or ``state``, or none; opened (within the limits)
        where it may be. With ``processes="per-caller"``, the caller's own process, for a request that names no
        conversation or one of those it serves; a conversation it does not serve, or served before it ended, is
        refused as in the per-conversation table, never served by another process."""
        caller = asked.caller
        session = asked.session
        if session is not None and session.source == "data-layer":
            # ended: "not found" at once, as the session's revocation (under way) will say; the call that ended its
            # process was told why
            key = self._moved.get(session.id, Key("data-layer-session", session.id))
            found = self._holder(key, caller)
            if found is None and self.resumed(key):
                return self.open(asked, key, expires_at=session.expires_at_timestamp, counted=True)
            if found is not None and found.child.done.is_set():  # its end not yet handled: ended all the same
                found = None
            return self._found(found, caller, self.not_found)
        # a host's: its name is no secret, its caller's
        if session is not None and session.source != "transport":
            key = Key("host-conversation", _bound(session.id, caller.id))
            if (found := self._holder(key, caller)) is None and key not in self._ended:
                return self.open(asked, key, counted=True)  # its first request spent the operation
            return self._found(found, caller, partial(self.gone, key))
        if asked.transport is not None:
            return self._transported(asked, method=method)
        if self.mode == "per-caller":
            return self._own(asked, "caller")
        if self.sessionless == "per-caller":
            return self._own(asked, "sessionless")
        # a retry that brings input reaches the request that asked
        if state is not None:
            waiting = self._retained.get(state) if isinstance(state, str) else None
            reached = self._found(waiting, caller, _no_state)
            del self._retained[str(state)]  # still good for its owner until it is taken
            return reached
        return self.open(asked, Key("request", secrets.token_hex(12)))  # a request's own child

    def resumed(self, key: Key) -> bool:
        """Whether a conversation this table has never served (its process ran before the gateway's restart, its
        crash, or on another replica) gets a new process: where the server keeps its state on disk or keeps none
        (``state="disk"``), as nothing it held is lost; where it kept it in its process, it has ended, and is told
        so. One that ended here stays ended (its tombstone, or its session's end, says how)."""
        return self.state == "disk" and key not in self._conversations and key not in self._ended

    def _found(self, found: Conversation | None, caller: Caller, missing: Callable[[], MCPError]) -> Reached:
        """The one check of who may reach a process, for every kind of name: the conversation ``found`` is the
        caller's own (reached, with nothing to do); another's is refused as a name that names none (no one learns
        whose it is)."""
        if found is None:
            raise missing()
        if not caller.same_as(found.owner):
            raise _no_state() if found.key.kind == "request" else self.not_found()
        return Reached(found)

    def _transported(self, asked: Asking, *, counted: bool = False, method: str = "") -> Reached:
        """A 2025 transport session's conversation: its process, started by its first request that needs one (its
        ``initialize`` starts none, nor a list, which the shared process answers as a fresh one would: a client that
        only lists, or names another conversation in each request, such as ``mcp-sessions connect``'s, costs none),
        within the limits (a refusal is that request's error)."""
        assert asked.transport is not None
        transport = self.transport_key(asked.transport)
        if (found := self._holder(transport, asked.caller)) is None and transport not in self._ended:
            if method in LISTS:
                return self.shared_conversation()
            self._connections.pop(transport, None)  # a process's now: the limits count it
            return self.open(asked, transport, counted=counted)
        return self._found(found, asked.caller, partial(self.gone, transport))

    def _holder(self, key: Key, caller: Caller) -> Conversation | None:
        """The live conversation ``key`` names: its own process's, or (per-caller) its caller's, that serves it."""
        if self.mode != "per-caller":
            return self._conversations.get(key)
        own = self._conversations.get(Key("caller", caller.id))
        return own if own is not None and key in own.riders else None

    def _own(
        self, asked: Asking, kind: Literal["caller", "sessionless"], counted: bool = False, *, told: bool = True
    ) -> Reached:
        """The caller's own process of ``kind``, started (within the limits) if it has none that lives. One that has
        ended leaves its conversations ended (:meth:`process_ended`), not the caller: her next request that names
        none is told why once (unless it ended as she would expect: ``EXPECTED``), and the one after gets a new one;
        a request that opens a conversation of its own (not ``told``: its session's end was told already, as
        ``-32043``) gets a new one at once."""
        key = Key(kind, asked.caller.id)
        if (end := self._ended.pop(key, None)) is not None and told:
            raise self.gone(key, end)
        if (own := self._conversations.get(key)) is not None and not own.child.done.is_set():
            return Reached(own)
        if own is not None:
            for ridden in own.riders:
                self._ended[ridden] = own.child.end or End(EndReason.EXITED)
            del self._conversations[key]
        return self.open(asked, key, counted=counted)

    def shared_conversation(self) -> Reached:
        """The shared process's conversation; a new one made (to start) if it has ended: no one's, a new one is as
        good."""
        started: tuple[Process, ...] = ()
        if self._shared is None or (self._shared.child.done.is_set() and self._shared.child.ready.is_set()):
            self._shared = self.pool.start(shared=True)
            started = (self._shared,)
        assert self._shared.conversation is not None
        return Reached(self._shared.conversation, Actions(start=started))

    def open(
        self,
        asked: Asking,
        key: Key,
        *,
        expires_at: float = math.inf,
        counted: bool = False,
    ) -> Reached:
        """A new conversation, ``asked``'s caller's (a 2025 transport session's, ``key``, is the one the request
        names), its child taken from those started ahead or started: within the limits,
        and spending the caller's create-limit slot (unless its create has, ``counted``); with
        ``processes="per-caller"``, in the caller's own process, which starts (within the limits) if it has none
        that lives, and ends it. One whose child has ended is refused with the error of its kind (:meth:`gone`),
        never given a new child. The caller's idle conversations make room for it only once nothing else refuses
        it."""
        if key in self._conversations or key in self._ended:
            raise self.gone(key)
        # a client of a transport session opened before the drain holds it: its first call is served
        if asked.draining and key.kind != "transport-session":
            raise restarting()
        caller = asked.caller
        transport = asked.transport if key.kind == "transport-session" else None
        begun = partial(
            Conversation, key, owner=caller, bus=self.bus, expires_at=expires_at, transport=transport, user=asked.user
        )
        if self.mode == "per-caller" and key.kind != "caller":
            own = self._own(asked, "caller", counted, told=False)
            own.conversation.riders[key] = begun(own.conversation.child)
            return own
        live = [found for found in self._conversations.values() if not found.child.done.is_set()]
        evicted = self.admission.admit(live, caller, transport=transport is not None, counted=counted)
        process = self.pool.take(caller.name, asked.credentials)
        for conversation in evicted:  # the start is certain now
            logger.info("%s: ended to make room for a new conversation of %s", conversation.child.label, caller.name)
        conversation = begun(process.child, credentials=process.credentials)
        self._conversations[key] = process.take(conversation)
        # from now: its session's end (a DELETE while its process starts too) ends it
        if key.kind in _WATCHED:
            conversation.unwatch = self.bus.watch(key.id, partial(conversation.end, EndReason.SESSION_ENDED))
        named = key_digest(key) if key.kind in ("caller", "sessionless") else key.id  # a caller's: her digest
        logger.info("%s: serves the conversation %s", process.child.label, named)
        started = (process,) if process.tasks is None else ()  # one started ahead runs already
        ended = tuple((conversation, EndReason.EVICTED) for conversation in evicted)
        return Reached(conversation, Actions(start=started, end=ended, refill=True))

    def perform(self, actions: Actions, later: list[Callable[[], None]] | None = None) -> None:
        """Do what a decision returned (nothing, for a refusal, which returns none), in one place: the processes it
        made launched (``Pool.launch``); the conversations it ended ended at once, their sessions each in a task (a
        store's write, or a 2025 transport session's ``DELETE``: the request that evicted them does not wait for
        it); a request's own process kept for its retry (``Lifetimes.retain``); and, once the answer of the request
        that asked is sent (``later``, its :data:`~._models.AFTER_ANSWER`; at once with none), a request's own
        process ended and those started ahead refilled (``Pool.fill``), which takes no CPU from that answer.
        Synchronous, as nothing here waits: what takes time runs in the pool's task group."""
        for conversation, why in actions.end:
            self.lifetimes.close_soon(conversation, why)
        for conversation in actions.retain:
            self.lifetimes.retain(conversation)
        self.pool.launch(actions.start)
        after: list[Callable[[], None]] = [
            partial(self.lifetimes.close_soon, answered, EndReason.ANSWERED) for answered in actions.release
        ]
        if actions.refill:
            after.append(self.pool.fill)
        if later is not None:
            later.extend(after)
            return
        for action in after:
            action()

    def answered(self, conversation: Conversation) -> Actions:
        """The decision once a request's own child has answered: ended once that answer is sent, or retained for the
        retry that brings the input it asked for (until that retry, or ``ANSWER_WITHIN``)."""
        if conversation.key.kind != "request":
            # a conversation's child, or the shared one: it serves the next request too
            return NOTHING
        if not conversation.parked:
            return Actions(release=(conversation,))
        for state in conversation.parked:
            self._retained[state] = conversation
        return Actions(retain=(conversation,))

    def process_ended(self, process: Process) -> list[Conversation]:
        """The decision at a process's end: it leaves the pool; its conversation, and a caller's process's every
        conversation, are remembered as ended (unless a new one takes its name); the conversations whose sessions
        end with it (a crash ends its session as any other end) are returned, for the lifetimes to end."""
        child = process.child
        conversation = process.conversation
        end = child.end or End(EndReason.EXITED)  # its child's, set once where it ended
        self.pool.ended(process, end.reason)
        if conversation is None or conversation.shared:
            return []
        if conversation.unwatch is not None:
            conversation.unwatch()
        for state in conversation.parked:
            self._retained.pop(state, None)
        if end.reason is EndReason.SHUTDOWN:
            return []
        key = conversation.key
        if self._conversations.get(key) is conversation:
            del self._conversations[key]
        if _told(key, end.reason):
            self._ended[key] = end
        logger.info("%s: the conversation ended (%s)", child.label, end)
        # a caller's process: its conversations end
        riders = list(conversation.riders.values())
        for rider in riders:
            self._ended[rider.key] = end
        return [conversation, *riders] if end.reason in UNASKED else riders

    def not_found(self) -> MCPError:
        return MCPError(self.config.profiles[0].not_found, self.config.profiles[0].not_found_text)

    def gone(self, key: Key, end: End | None = None) -> MCPError:
        """The error of an ended conversation's kind: "not found" for one these ended with its session (or a
        front's), else that its process has ended, and how (its :class:`End`'s words)."""
        end = end or self._ended.get(key, End(EndReason.ENDED))
        if end.reason is EndReason.SHUTDOWN:
            return restarting()
        if self.fronted or end.reason in (EndReason.EVICTED, EndReason.SESSION_ENDED):
            return self.not_found()
        # a caller's own: the gateway starts the next one itself
        then = "the next request starts a new one" if key.kind in ("caller", "sessionless") else "start a new one"
        return MCPError(
            CHILD_EXITED, f"the server process of this conversation has ended ({end}), with its state; {then}"
        )

    def conversation_for(self, asked: Asking, method: str, state: object = None) -> Reached:
        """The decision of which conversation a request (``asked``: read once at its edge, :meth:`relay`) reaches,
        the most specific name first: its data-layer session's (one opened in a 2025 transport session is that
        transport session's, ``Table.created``), its host conversation's (bound to its caller: what a host's request
        names in ``_meta``, whatever connection it came through), its 2025 transport session's; else, naming none,
        its caller's own (``sessionless="per-caller"``), a child of the request's own (``"per-request"``: the one
        that asked, for a retry that brings its input, ``state``, its ``requestState``) or the shared one
        (``"shared"``), which also answers the lists (:data:`LISTS`) that name nothing: they cost no process and
        count against no limit. Whatever names it, the caller must be its owner. A conversation whose
        child ran elsewhere (another replica, or before a restart) or has ended gets no new one: a data-layer
        session's is "not found" here; a host's, which the store the replicas share records as another start's
        (:meth:`claim`, done before), has ended. Which conversation the request reaches is one decision
        (:meth:`route`), whose answer (:class:`Reached`) the caller has done (:meth:`reach`)."""
        if asked.refusing and state is None:  # a retry that brings input is part of a call in flight
            raise restarting()
        nameless = asked.session is None and asked.transport is None and state is None
        sessionless = self.sessionless if self.mode != "per-caller" else "per-caller"
        if self.mode == "shared" or (nameless and (method in LISTS or sessionless == "shared")):
            return self.shared_conversation()
        return self.route(asked, method, state)

    async def claim(self, scope: Scope) -> None:
        """The table's one wait on the store the replicas share, made before the SDK's app answers the request
        ``scope`` (``_TransportRequests``), so that a store that fails or stalls is answered as the sessions answer
        it: the retryable -32010 with HTTP 503 and ``Retry-After``, never the SDK's -32603. A host conversation this
        table has not served is claimed there for this start (:data:`_HELD`), unless another start's claim is there:
        then it ran elsewhere, and has ended (its tombstone, which :meth:`route` answers). A drain opens it nowhere
        (:meth:`open` refuses it): never claimed here, the next replica may open it."""
        session = scope.get(SCOPE_KEY)  # the sessions': only a host's conversation is claimed
        if self.mode == "shared" or session is None or session.source in ("data-layer", "transport"):
            return
        asked = await asking(scope, self.config, self.process_env)
        key = Key("host-conversation", _bound(session.id, asked.caller.id))
        if asked.draining or self._holder(key, asked.caller) is not None or key in self._ended:
            return
        held = await session.data.get(_HELD, self.instance)
        if held != self.instance and not self.resumed(key):
            self._ended[key] = End(EndReason.ELSEWHERE)
            return
        await session.data.set(_HELD, self.instance)

    async def reach(self, reached: Reached, later: list[Callable[[], None]] | None = None) -> Conversation:
        """What a decision returned done (:meth:`perform`: ``later``, once the answer of the request that asked is
        sent, if one did), then the conversation it reaches once its process is ready (:meth:`ready`)."""
        self.perform(reached.actions, later)
        return await self.ready(reached.conversation)

    async def ready(self, conversation: Conversation) -> Conversation:
        """``conversation`` once its process is ready to serve it; the error of its end if it has ended."""
        if not conversation.child.ready.is_set():  # still starting (a set Event's wait yields a turn all the same)
            await conversation.child.ready.wait()
        end = conversation.child.end
        if end is not None and end.reason is EndReason.UIDS_IN_USE:  # a limit, refused as the admission's are
            raise refused(self.admission.events, "process_uids", f"Too many server processes: {end}")
        if end is not None and end.failure is not None:
            raise MCPError(CHILD_EXITED, end.failure)
        if conversation.child.done.is_set():
            raise self.gone(conversation.key, end or End(EndReason.EXITED))
        conversation.last_request = anyio.current_time()
        return conversation

    async def created(self, claims: SessionClaims, *, scope: Scope) -> None:
        """The sessions' ``on_create``, given the create's request (``scope``): a new conversation's child, started
        and initialized before its session is handed out; beyond the limits (or when the child fails to start), the
        create is refused. A session opened in a 2025 transport session of the same caller is that conversation (one
        conversation, one process): its child serves it (started now if it has none), as it serves a reconnect that
        names the session while it lives. Its create spent the caller's create-limit slot already."""
        if self.mode == "shared":
            return
        asked = asked_by(scope, claims.extra.get(PRINCIPAL_CLAIM), None, self.process_env)
        try:
            if asked.transport is not None and self.mode == "per-conversation":
                reached = self._transported(asked, counted=True)
            else:
                key = Key("data-layer-session", claims.session_id)
                reached = self.open(asked, key, expires_at=claims.expires_at, counted=True)
            conversation = await self.reach(reached, asked.later)
        except MCPError as exc:
            retry = 1 if exc.error.code == RATE_LIMITED else None
            raise Refusal(exc.error.code, exc.error.message, reason="process_refused", retry_after=retry) from None
        if conversation.key.kind == "transport-session":  # one conversation, one process
            self._moved[claims.session_id] = conversation.key
            conversation.holds_sessions = True

    def unanswered(self, raw: bytes, stopping: Callable[[], bool]) -> MCPError:
        """The error of a request in flight as the 2025 transport session ``raw`` names ended: its conversation's, or,
        once the gateway has been asked to stop (``stopping``: it leaves no tombstone), that the stop cut it."""
        return cut() if stopping() else self.gone(self.transport_key(raw))

    async def connected(self, raw: bytes, scope: Scope) -> None:
        """A 2025 transport session just opened (its ``initialize`` answered), which has no process until a call
        needs one: those the admission says are too many (overall, and per caller) are ended, oldest first."""
        caller = (await asking(scope, self.config, self.process_env)).caller
        self._connections[self.transport_key(raw)] = (caller.id, raw, scope.get("user"))
        owners = {key: owner for key, (owner, _, _) in self._connections.items()}
        for key in self.admission.connections_over(owners, caller.id):
            _, ended, user = self._connections.pop(key)
            if self.lifetimes.end_transport is not None:
                await self.lifetimes.end_transport(ended, user)

    @asynccontextmanager
    async def running(self, start_deadline: float | None = None) -> AsyncIterator[types.InitializeResult]:
        """Start the shared child (its ``initialize`` answered by ``start_deadline``, if given: the gateway's start's
        end), one started ahead beside it and the rest of ``warm`` once it has answered; at the end, stop every child.
        Yields the shared child's answer."""
        async with self.pool.running():
            try:
                self._shared = first = self.pool.start(shared=True, start_deadline=start_deadline)
                assert first.conversation is not None
                try:
                    self.pool.launch((first,))
                    # One beside it: a first conversation's process is no second start in a row. The rest once it
                    # has answered: more starts at once share the cores its start, which the gateway's readiness
                    # waits for, needs.
                    self.pool.fill(1)
                    await self.ready(first.conversation)
                    self.pool.fill()
                except MCPError as exc:
                    raise await self.failed(exc.error.message, first.child) from None
                assert first.child.initialized is not None
                yield first.child.initialized
            finally:
                for conversation in self._conversations.values():
                    conversation.end(EndReason.SHUTDOWN)

    async def choose(self, start_deadline: float | None = None) -> None:
        """``processes="auto"``'s choice (docs/gateway.md, "Process lifetimes"): a process per conversation where
        something per user goes into it (``--process-env``, a uid each), or the server speaks only 2025-11-25 and
        keeps a conversation's state in its process; else, for a server that speaks 2026-07-28, a process per
        caller, which serves all of that caller's conversations (``"per-caller"``): one caller's call that ends it (a
        bound, a crash) ends no other's, and no caller's state reaches another's. One process for everyone is
        ``processes="shared"``, the operator's word alone. A server that answers its first request neither with
        revisions nor with an error, by ``start_deadline`` or before it ends, does not start: ``StartupFailed``."""
        options = self.pool.options
        if self.process_env.sources or (options is not None and options.uids is not None):
            self.mode = "per-conversation"
            return
        probe = await self.pool.revisions(start_deadline)
        if probe.end is not None and probe.end.failure is not None:
            raise await self.failed(probe.end.failure, probe)
        if LATEST_MODERN_VERSION in probe.revisions:
            self.mode = "per-caller"
            logger.info(
                "the server speaks 2026-07-28: a process per caller, each request naming its conversation; what the "
                "server keeps in its memory is the caller's, shared by her conversations unless it keys it by the "
                "one a request names (--processes per-conversation: a process each)"
            )
        else:
            self.mode = "per-conversation"
            logger.info("the server speaks only the 2025-11-25 handshake: --processes per-conversation")

    async def relay(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        """A client's request, relayed to the process of its conversation, and its answer: the one walk of every
        relayed request through the table. Its edge: the request is read once (:func:`~._models.asking`), and what
        the table does is that value's: decided (:meth:`conversation_for`), done (:meth:`reach`), and, once it is
        answered, decided and done again (:meth:`answered`, :meth:`perform`)."""
        scope = {} if ctx.request is None else ctx.request.scope
        asked = await asking(scope, self.config, self.process_env)
        state = (ctx.params or {}).get("requestState")
        conversation = await self.reach(self.conversation_for(asked, ctx.method, state), asked.later)
        try:
            # each request names its conversation
            if conversation.pooled:
                return await conversation.relay(ctx, self.named(asked, conversation.owner))
            # its process has the --process-env values it started with: this request's?
            given = self.process_env.check(conversation.credentials, scope)
            if conversation.masked is not None:  # a masked value renewed (an exchanged token): the proxy's alone
                self.pool.renew(conversation.masked, given)
            return await conversation.relay(ctx)
        finally:
            self.perform(self.answered(conversation), asked.later)

    def named(self, asked: Asking, owner: Caller | None) -> str | None:
        """A request's conversation as a process of many sees it: a digest of its session's name and its caller
        (``owner``, a caller's own process's, found already; else the shared one's request's), the same for each of
        its requests (never a bearer value); None for a request that names none."""
        session = asked.session
        if session is None:
            return None
        caller = owner or asked.caller
        return hashlib.sha256(f"{session.source}\0{session.id}\0{caller.id}".encode()).hexdigest()[:32]

    async def failed(self, why: str, child: ChildProcess) -> StartupFailed:
        """A child's failure to start the gateway (the shared one's, the revision probe's), in one line: why, and
        what it last said on its stderr."""
        with anyio.move_on_after(EXIT_DRAIN):
            await child.stderr_ended.wait()
        said = "" if child.last_words is None else f"; its last stderr line: {child.last_words}"
        return StartupFailed(f"{shlex.join(self.pool.command)}: {why}{said}")

    async def tool_schemas(self) -> dict[str, Mapping[str, Any]]:
        """The input schemas of the shared child's tools (its first page), for the SDK's check of a 2026-07-28
        ``tools/call``'s ``Mcp-Param`` headers: without them, the SDK would ask ``tools/list`` of a process at
        every ``tools/call`` (a request's own process too). None if it lists none in time."""
        shared = await self.reach(self.shared_conversation())
        assert shared.child.link is not None
        try:
            with anyio.fail_after(ANSWER_WITHIN):
                listed = await shared.child.link.send_raw_request("tools/list", {})
            tools = types.ListToolsResult.model_validate(listed).tools
            return {tool.name: tool.input_schema for tool in tools}
        except (TimeoutError, MCPError, ValidationError):
            # A process's list the SDK's types do not take: none.
            return {}

    async def end(self, conversation: str, principal: Owner) -> bool:
        """End the conversation whose digest (its view's) is ``conversation``, if it is ``principal``'s: a user's
        own, ended as the gateway ends any (``Lifetimes.close``), and answered once its process has left the pool, so
        that no view lists it after."""
        for found in list(self._conversations.values()):
            owner = found.owner
            mine = owner is not None and owner.name == principal  # who, not the name (Owner)
            if mine and key_digest(found.key) == conversation and not found.child.done.is_set():
                [process] = [process for process in self.pool.live if process.child is found.child]
                await self.lifetimes.close(found, EndReason.BY_USER)
                await process.gone.wait()
                return True
        return False


def _bound(sid: str, caller: str) -> str:
    """A host conversation's key: its id and its caller's digest, so that another caller naming it gets its own."""
    return hashlib.sha256(f"{sid}\0{caller}".encode()).hexdigest()[:32]


def _told(key: Key, why: EndReason) -> bool:
    """Whether an end is told to the next request that names its conversation: every end, but a request's own
    (never named again) and a caller's own that ended as she would expect (``EXPECTED``)."""
    if key.kind == "request":
        return False
    return key.kind not in ("caller", "sessionless") or why not in EXPECTED


def restarting() -> MCPError:
    """A conversation the gateway's stop refuses: ``-32014``, which a client may send again."""
    return MCPError(UPSTREAM_UNAVAILABLE, RESTARTING)


def cut() -> MCPError:
    """A call the gateway's stop cut: ``-32603``, which says it may have run (``_serving.CUT``)."""
    return MCPError(types.INTERNAL_ERROR, CUT, CUT_DATA)


def _no_state() -> MCPError:
    return MCPError(types.INVALID_PARAMS, "requestState names no request waiting for input here")

"""The process table of ``mcp-sessions gateway --stdio``: which process a request reaches, and how long it lives.

:class:`Children` holds the shared process and one per conversation, bounded overall and per caller, taken from
those started ahead (each with an id of its own, its ``MCP_SESSION_ID``); each ends with its session, when idle or
at shutdown, and its conversation is then over (see ``_stdio``). What a process's messages do for its client is
``_stdio_relay``'s.
"""

from __future__ import annotations

import hashlib
import logging
import math
import secrets
import shlex
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Literal

import anyio
import anyio.abc
import mcp_types as types
from mcp.shared.dispatcher import DispatchContext
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from starlette.types import Scope

from .._asgi import header
from .._bounded import BoundedDict
from .._config import SessionsConfig
from .._session import PRINCIPAL_CLAIM, SCOPE_KEY, Session, caller_of, principal_digest
from .._tokens import IdDigests, SessionClaims
from .._wire import Refusal
from .._wire.protocol import MCP_SESSION_ID_HEADER, RATE_LIMITED
from ..stores import SessionStoreUnavailable
from ..subscriptions import SessionSubscriptionBus
from ._auth import REQUEST, ProcessEnv
from ._front import StartupFailed
from ._stdio_child import EXIT_DRAIN, Child, ProcessOptions, inherited
from ._stdio_relay import ANSWER_WITHIN, CHILD_EXITED, Conversation

logger = logging.getLogger("mcp_sessions.gateway")

MAX_ENDED: Final = 100_000
"""Ended conversations remembered (each answered with the error of its kind, never a new process); oldest first."""
RETRY_LATER: Final = {"retryAfter": 1}  # in a refusal answered in-band (HTTP 200): when to try again, in seconds
_BOUND: Final = "hc-"  # the key of a host conversation bound to its caller
_REQUEST: Final = "rq-"  # the key of a request's own child
_HELD: Final = "mcp-sessions.gateway.held-by"  # in a host conversation's data: the gateway start that runs its child
AFTER_ANSWER: Final = "mcp_sessions.gateway.after_answer"
"""In a request's scope, what it leaves to do once its answer is sent (``_stdio._Opening`` does it)."""


@dataclass(frozen=True)
class ProcessView:
    """One live process, as the operator's status and the metrics see it: nothing in it is a bearer value."""

    kind: str  # "transport-session" | "data-layer-session" | "host-conversation" | "request" | "shared" | "warm"
    principal: str | None  # whose it is: the authenticated principal's name, else the client address
    conversation: str | None  # a short digest of its conversation's key; None for shared and warm
    pid: int | None
    age: float  # seconds since its process started
    idle: float  # seconds since its last request
    requests: int  # the requests it has served


class ProcessEvents:
    """What the process metrics count (``_status.ProcessMetrics`` counts them); by default, nothing."""

    def started(self) -> None:
        """A process was started."""

    def ended(self, why: str) -> None:
        """A process ended, for ``why``."""

    def refused(self, limit: str) -> None:
        """A conversation was refused a process by ``limit``, the option's name."""


class Children:
    """The children: the shared one, and one per conversation in one table (keyed by the conversation's stable
    id), bounded overall (``max_processes``) and per caller (``per_caller``); and their lifetimes."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        config: SessionsConfig,
        processes: Literal["per-conversation", "shared"],
        idle: float,
        max_processes: int,
        per_caller: int,
        sessionless: Literal["per-request", "shared"],
        warm: int,
        environ: Mapping[str, str],
        bus: SessionSubscriptionBus,
        options: ProcessOptions | None = None,
        process_env: ProcessEnv | None = None,
    ) -> None:
        self.command, self.config, self.mode, self.bus = list(command), config, processes, bus
        self.process_env = ProcessEnv() if process_env is None else process_env
        self.per_request = processes == "per-conversation" and sessionless == "per-request"
        self.warm_count = warm if processes == "per-conversation" else 0
        self.warm: deque[Conversation] = deque()  # started and initialized ahead, for new conversations and requests
        self.retained: dict[str, Conversation] = {}  # a request's child waiting for its retry, by its requestState
        self.idle, self.max_processes, self.per_caller = idle, max_processes, per_caller
        self.environ = {key: value for key, value in environ.items() if inherited(key)}
        self.digests = IdDigests(config.keys)  # the middleware's: a transport session's key is its adopted session's
        self.options = options
        self.fronted = False  # a replica behind a front (--forwarded-allow-ips): see _gone
        self.instance = secrets.token_hex(8)  # this start of the gateway, as a host conversation's data names it
        self.shared: Conversation | None = None
        self.conversations: dict[str, Conversation] = {}
        self.ended: BoundedDict[str, tuple[float, str]] = BoundedDict(MAX_ENDED)  # tombstones: until when, and why
        self.moved: BoundedDict[str, str] = BoundedDict(MAX_ENDED)  # a session opened in a transport session: its key
        self.end_transport: Callable[[bytes, object], Awaitable[None]] | None = None  # a DELETE, as its user
        self._tasks: anyio.abc.TaskGroup | None = None
        self.metrics = ProcessEvents()  # what the metrics count: _status.ProcessMetrics, set by the app

    @asynccontextmanager
    async def running(self) -> AsyncIterator[types.InitializeResult]:
        """Start the shared child; at the end, stop every child. Yields the shared child's answer."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                try:
                    shared = await self.shared_conversation()
                except MCPError as exc:
                    raise await self._failed(exc.error.message) from None
                assert shared.child.initialized is not None
                self._fill()
                yield shared.child.initialized
            finally:
                self._tasks = None
                for conversation in self.conversations.values():
                    conversation.why = "shutdown"
                tasks.cancel_scope.cancel()  # each child stops its process group, shielded (_stdio_child.stop_group)

    async def _failed(self, why: str) -> StartupFailed:
        """The shared child's failure to start, in one line: why, and what it last said on its stderr."""
        child = None if self.shared is None else self.shared.child
        if child is not None:
            with anyio.move_on_after(EXIT_DRAIN):
                await child.stderr_ended.wait()
        said = "" if child is None or child.last_words is None else f"; its last stderr line: {child.last_words}"
        return StartupFailed(f"{shlex.join(self.command)}: {why}{said}")

    async def created(self, claims: SessionClaims) -> None:
        """The sessions' ``on_create``: a new conversation's child, started and initialized before its session is
        handed out; beyond the limits (or when the child fails to start), the create is refused. A session opened in
        a 2025 transport session is that conversation (one conversation, one process): its child serves it, as it
        serves a reconnect that names the session while it lives."""
        if self.mode == "shared":
            return
        scope = REQUEST.get() or {}
        if (transport := self.transport_key(scope)) in self.conversations:  # in a 2025 transport session: its child
            self.moved[claims.session_id] = transport  # one conversation, one process
            return
        caller = caller_of(scope, claims.extra.get(PRINCIPAL_CLAIM))
        try:
            await self.open(claims.session_id, caller, expires_at=claims.expires_at)
        except MCPError as exc:
            retry = 1 if exc.error.code == RATE_LIMITED else None
            raise Refusal(exc.error.code, exc.error.message, reason="process_refused", retry_after=retry) from None

    def transport_key(self, scope: Scope) -> str | None:
        """The key of the transport session the request's ``Mcp-Session-Id`` names, if it has (or had) a process."""
        raw = header(scope.get("headers", ()), MCP_SESSION_ID_HEADER)
        if raw is None:  # a data-layer token's digest names no process here either
            return None
        key = self.digests.transport(raw)
        return key if key in self.conversations or key in self.ended else None

    async def conversation_for(self, scope: Scope, state: object = None) -> Conversation:
        """The conversation a request names, the most specific name first: its data-layer session's (one opened in a
        2025 transport session is that transport session's, :meth:`created`), its 2025 transport session's, its host
        conversation's (bound to its caller); else, with ``sessionless="per-request"``, a child of the request's own
        (the one that asked, for a retry that brings its input: ``state``, its ``requestState``), or the shared one.
        A conversation whose child ran elsewhere (another replica, or before a restart) or has ended gets no new
        one: a data-layer session's is "not found" here; a host's, which the store the replicas share records as
        another start's (:data:`_HELD`), has ended."""
        session: Session | None = scope.get(SCOPE_KEY)
        if self.mode == "shared":
            return await self.shared_conversation()
        if session is not None and session.source == "data-layer":  # its child: its create's, or its transport's
            held = self.moved.get(session.id, session.id)
            if held not in self.conversations:  # ended, elsewhere, or before a restart: its client starts again
                raise MCPError(self.config.profiles[0].not_found, self.config.profiles[0].not_found_text)
            return await self.open(held, None)
        if (key := self.transport_key(scope)) is not None:
            return await self.open(key, None)
        if session is None and not self.per_request:
            return await self.shared_conversation()
        if session is None:  # a request's own child; a retry that brings input reaches the one that asked
            if state is None:
                return await self.open(_REQUEST + secrets.token_hex(12), await self.caller(scope))
            if not isinstance(state, str) or (retained := self.retained.pop(state, None)) is None:
                raise MCPError(types.INVALID_PARAMS, "requestState names no request waiting for input here")
            return retained
        caller = await self.caller(scope)
        key = _bound(session.id, caller)  # a host's conversation: its name is no secret
        if key not in self.conversations and key not in self.ended:  # new here: is it, says the store replicas share?
            if await session.data.get(_HELD, self.instance) != self.instance:
                raise self._gone(key, "it ran on another replica, or before this one restarted")
            await session.data.set(_HELD, self.instance)
        return await self.open(key, caller)

    def processes(self) -> list[ProcessView]:
        """Every live process now: the shared one, those started ahead, and each conversation's."""
        now, views = time.monotonic(), []
        shared = [] if self.shared is None else [self.shared]
        for kind, conversations in (("shared", shared), ("warm", list(self.warm))):
            views += [_view(kind, conversation, now) for conversation in conversations]
        for conversation in list(self.conversations.values()):
            views.append(_view(_kind(conversation), conversation, now))
        return [view for view in views if view.pid is not None]

    async def end(self, conversation: str, principal: str) -> bool:
        """End the conversation whose digest (its view's) is ``conversation``, if it is ``principal``'s: a user's
        own, ended as the gateway ends any (:meth:`close`)."""
        for found in list(self.conversations.values()):
            view = _view(_kind(found), found, time.monotonic())
            if view.pid is not None and (view.conversation, view.principal) == (conversation, principal):
                await self.close(found, "ended by its user")
                return True
        return False

    async def caller(self, scope: Scope) -> str:
        """Whom the per-caller limit counts, as the create limit does: the principal, else the client address."""
        return caller_of(scope, await principal_digest(self.config.principal, scope, self.config.keys.audience))

    async def tool_schemas(self) -> dict[str, Mapping[str, Any]]:
        """The input schemas of the shared child's tools (its first page), for the SDK's check of a 2026-07-28
        ``tools/call``'s ``Mcp-Param`` headers: without them, the SDK would ask ``tools/list`` of a process at
        every ``tools/call`` (a request's own process too). None if it lists none in time."""
        shared = await self.shared_conversation()
        assert shared.child.link is not None
        try:
            with anyio.fail_after(ANSWER_WITHIN):
                listed = await shared.child.link.send_raw_request("tools/list", {})
            return {tool.name: tool.input_schema for tool in types.ListToolsResult.model_validate(listed).tools}
        except (TimeoutError, MCPError, ValidationError):  # a process's list the SDK's types do not take: none
            return {}

    async def shared_conversation(self) -> Conversation:
        if self.shared is None or (self.shared.child.done.is_set() and self.shared.child.ready.is_set()):
            self.shared = self._start(shared=True)  # it serves no conversation: a new one is as good
        return await self._ready(self.shared)

    async def open(
        self, key: str, caller: str | None, *, expires_at: float = math.inf, transport: bytes | None = None
    ) -> Conversation:
        """The conversation ``key`` names, its child started if it has none yet (``caller`` is ``None`` where only
        its own start may start it: a transport session's, at its ``initialize``); one whose child has ended is
        refused with the error of its kind (:meth:`_gone`), never given a new child."""
        if (found := self.conversations.get(key)) is not None:
            return await self._ready(found)
        if key in self.ended or caller is None:
            raise self._gone(key)
        live = [conversation for conversation in self.conversations.values() if not conversation.child.done.is_set()]
        mine = [conversation for conversation in live if conversation.caller == caller]
        if len(mine) >= self.per_caller and transport is not None and self._tasks is not None:  # idle ones make room
            idle = sorted((c for c in mine if c.transport is not None and not c.calls), key=lambda c: c.last_request)
            for conversation in idle[: len(mine) - self.per_caller + 1]:
                self._close_soon(conversation, "evicted")
                live.remove(conversation)
                mine.remove(conversation)
        if len(mine) >= self.per_caller:
            self.metrics.refused("max_processes_per_principal")
            raise MCPError(
                RATE_LIMITED,
                f"Too many server processes for this caller: each caller may have at most {self.per_caller} "
                "conversations' processes at once (--max-processes-per-principal); end one or retry later",
                RETRY_LATER,
            )
        if len(live) >= self.max_processes:
            self.metrics.refused("max_processes")
            raise MCPError(
                RATE_LIMITED,
                f"Too many server processes: the gateway runs at most {self.max_processes} conversations' "
                "processes at once (--max-processes); end one (sessions/delete) or retry later",
                RETRY_LATER,
            )
        conversation = self.conversations[key] = self.warm.popleft() if self.warm else self._start()
        conversation.sid, conversation.caller, conversation.expires_at = key, caller, expires_at
        conversation.transport, conversation.principal = transport, known_as(REQUEST.get() or {})
        conversation.user = (REQUEST.get() or {}).get("user")  # who may end its transport session
        conversation.named.set()
        logger.info("%s: serves the conversation %s", conversation.child.label, key)
        self._fill()
        return conversation if transport is not None else await self._ready(conversation)

    def _fill(self) -> None:
        """Start children ahead, up to ``warm`` of them, for new conversations and requests: once the answer of the
        request being served is sent (a process start takes a core for most of a second)."""

        def fill() -> None:
            while self._tasks is not None and len(self.warm) < self.warm_count:
                self.warm.append(self._start())

        _after_answer(fill)

    def answered(self, conversation: Conversation) -> None:
        """A request's own child, once it has answered: ended once that answer is sent, or retained for the retry
        that brings the input it asked for (until that retry, or ``ANSWER_WITHIN``)."""
        if conversation.sid is None or not conversation.sid.startswith(_REQUEST):
            return  # a conversation's child, or the shared one: it serves the next request too
        if not conversation.parked:
            return _after_answer(partial(self._close_soon, conversation, "answered"))
        for state in conversation.parked:
            self.retained[state] = conversation
        conversation.rounds += 1
        if self._tasks is not None:
            self._tasks.start_soon(self._retain, conversation, conversation.rounds)

    async def _retain(self, conversation: Conversation, rounds: int) -> None:
        await anyio.sleep(ANSWER_WITHIN + 1)
        if conversation.rounds == rounds and not conversation.calls:  # no retry came
            self._close_soon(conversation, "its input came too late")

    def _close_soon(self, conversation: Conversation, why: str) -> None:
        conversation.why = conversation.why or why
        if self._tasks is not None:
            self._tasks.start_soon(self.close, conversation, why)

    def _gone(self, key: str | None, why: str | None = None) -> MCPError:
        if self.fronted:  # a replica's conversations are its front's sessions: "not found", so its client starts again
            return MCPError(self.config.profiles[0].not_found, self.config.profiles[0].not_found_text)
        why = why or self.ended.get(key or "", (0.0, "ended"))[1]
        return MCPError(
            CHILD_EXITED, f"the server process of this conversation has ended ({why}), with its state; start a new one"
        )

    async def _ready(self, conversation: Conversation) -> Conversation:
        await conversation.child.ready.wait()
        if conversation.child.failure is not None:
            raise MCPError(CHILD_EXITED, conversation.child.failure)
        if conversation.child.done.is_set():
            raise self._gone(conversation.sid, conversation.why or "exited")
        conversation.last_request = time.monotonic()
        return conversation

    def _start(self, *, shared: bool = False) -> Conversation:
        """A new child: the shared one, or one a conversation or a request takes (started ahead, or by the request
        that starts its conversation: with ``--process-env``, that user's values), with an id of its own."""
        if self._tasks is None:
            raise MCPError(CHILD_EXITED, "the gateway is shutting down")
        values = {} if shared else self.process_env.values()  # none but a request's: no child is started ahead then
        process = None if shared else secrets.token_hex(8)
        environ = {**self.environ, **values, **({} if process is None else {"MCP_SESSION_ID": process})}
        conversation = Conversation(self._tasks, self.bus)
        conversation.credentials = self.process_env.digest(values)
        conversation.child = Child(
            self.command,
            label="shared" if process is None else f"process {process}",
            environ=environ,
            max_line=self.config.max_response_size,
            on_request=conversation.on_request,
            on_notify=_unreached,
            on_progress=conversation.on_notification,
            options=self.options,
        )
        self._tasks.start_soon(self._serve, conversation)
        self.metrics.started()
        return conversation

    async def _serve(self, conversation: Conversation) -> None:
        """Run a child to its end: its session's end (on any replica), its idle time or its expiry end it; its end
        ends the conversation, which then gets the error of its kind (a crash as any other end)."""
        child = conversation.child
        async with anyio.create_task_group() as timers:
            timers.start_soon(self._expire, conversation)
            timers.start_soon(self._watch, conversation)
            await child.run()
            timers.cancel_scope.cancel()
        self.metrics.ended(conversation.why or ("failed to start" if child.failure else child.reason or "exited"))
        if conversation in self.warm:
            self.warm.remove(conversation)
        for state in conversation.parked:
            self.retained.pop(state, None)
        key = conversation.sid
        if key is None or conversation.why == "shutdown":
            return
        if self.conversations.get(key) is conversation:
            del self.conversations[key]
        why = conversation.why or ("failed to start" if child.failure is not None else "exited")
        if not key.startswith(_REQUEST):
            self.ended[key] = (time.time() + self.config.ttl, why)
        logger.info("%s: the conversation ended (%s)", child.label, why)
        if conversation.why is None and child.failure is None:
            await self._end_session(conversation)  # a crash ends its session as any other end

    async def close(self, conversation: Conversation, why: str) -> None:
        """End a conversation for ``why``: its session first (so that its next request is refused as its kind's
        are), then its child."""
        conversation.why = conversation.why or why
        await self._end_session(conversation)
        conversation.end(why)

    async def _end_session(self, conversation: Conversation) -> None:
        """End the session a conversation's child served: its 2025 transport session (its client then gets 404 and
        initializes again) or its data-layer session (then "Session not found"); a host's is refused here."""
        key = conversation.sid
        if conversation.transport is not None and self.end_transport is not None:
            await self.end_transport(conversation.transport, conversation.user)
        elif key is not None and not key.startswith((_BOUND, _REQUEST)):
            try:
                await self.config.store.revoke(key, expires_at=conversation.expires_at)
            except SessionStoreUnavailable:
                logger.warning("%s: the session could not be ended in the store", conversation.child.label)

    async def _expire(self, conversation: Conversation) -> None:
        """End a conversation's child once it has been idle for ``idle`` seconds, or its session has expired."""
        await conversation.named.wait()  # a child started ahead idles from when it is taken
        await conversation.child.ready.wait()
        conversation.last_request = time.monotonic()  # idle from its start, however long the start took
        while True:
            left = min(conversation.last_request + self.idle - time.monotonic(), conversation.expires_at - time.time())
            if left <= 0 and (not conversation.calls or conversation.expires_at <= time.time()):
                return await self.close(conversation, "idle" if conversation.expires_at > time.time() else "expired")
            await anyio.sleep(left if left > 0 else self.idle)

    async def _watch(self, conversation: Conversation) -> None:
        """End a session's child when its session is ended, on any replica (a host's or a request's has none)."""
        await conversation.named.wait()
        key = conversation.sid
        if key is None or key.startswith((_BOUND, _REQUEST)):
            return
        unwatch = self.bus.watch(key, partial(conversation.end, "its session ended"))
        try:
            await anyio.sleep_forever()
        finally:
            if unwatch is not None:
                unwatch()


def _after_answer(action: Callable[[], None]) -> None:
    """``action`` once the current request's answer is sent, or now outside a request (or after its answer): what a
    request leaves to do (stop its own process, refill the pool) takes no CPU from its answer."""
    if (pending := (REQUEST.get() or {}).get(AFTER_ANSWER)) is None:
        return action()
    pending.append(action)


def known_as(scope: Scope) -> str:
    """Who a request's caller is, as the operator knows them: the authenticated principal's name, else the client
    address (as the per-caller limit counts callers)."""
    user = scope.get("user")
    if user is not None and getattr(user, "is_authenticated", False):
        return str(user.display_name)
    client = scope.get("client")
    return str(client[0]) if client else ""


def _view(kind: str, conversation: Conversation, now: float) -> ProcessView:
    key = conversation.sid
    return ProcessView(
        kind=kind,
        principal=None if key is None else conversation.principal,
        conversation=None if key is None else hashlib.sha256(key.encode()).hexdigest()[:12],
        pid=None if conversation.child.done.is_set() else conversation.child.pid,
        age=now - conversation.started,
        idle=now - conversation.last_request,
        requests=conversation.requests,
    )


def _kind(conversation: Conversation) -> str:
    key = conversation.sid or ""
    if key.startswith(_BOUND):
        return "host-conversation"
    if key.startswith(_REQUEST):
        return "request"
    return "data-layer-session" if conversation.transport is None else "transport-session"


def _bound(sid: str, caller: str) -> str:
    """A host conversation's key: its id and its caller's digest, so that another caller naming it gets its own."""
    return _BOUND + hashlib.sha256(f"{sid}\0{caller}".encode()).hexdigest()[:32]


async def _unreached(dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None) -> None:
    """The link's ``on_notify``: ``Conversation.on_notification`` takes every notification first."""

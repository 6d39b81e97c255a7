"""``mcp-sessions gateway --stdio CMD``: sessions for a stdio MCP server, a process per conversation.

Where the HTTP gateway has its proxy, this one has an MCP server of the ``mcp`` SDK (a low-level
``Server``): the SDK speaks both eras to clients (the 2025-11-25 handshake and transport sessions, the
2026-07-28 envelope and ``server/discover``), and each of its handlers relays the request to the child that
holds the request's conversation, as an MCP client (``_stdio_child``). The session middleware sits at its
endpoint, as in any ``MCPServer`` app, and tells each request's conversation (:data:`SCOPE_KEY`).

The first child, started with the gateway, is the shared one (requests without a session, or every
request with ``processes="shared"``); clients' ``initialize`` and ``server/discover`` are answered from
its own ``initialize`` answer, and only the methods it advertises are relayed (any other is the SDK's
"Method not found"). A conversation's child starts at its ``sessions/create`` (the sessions' ``on_create``,
which refuses the create beyond ``max_processes``; a session this gateway did not mint, such as an adopted
one, gets its child at its first request). It ends when its session is deleted or expires (asked of the
session store, so a delete at any replica counts), and at shutdown. A child idle for ``idle`` seconds ends
with its session; a child that exits answers its requests in flight with an error at once, and its
session is revoked: the conversation's later requests get "Session not found", and a client starts a new
conversation, with a new process, as after any ended session.
"""

from __future__ import annotations

import copy
import itertools
import logging
import math
import os
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Final, Literal, cast

import anyio
import anyio.abc
import mcp_types as types
from mcp.server.caching import CacheableMethod, CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import ListenHandler
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.dispatcher import DispatchContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.subscriptions import event_from_wire
from mcp_types.methods import CACHEABLE_METHODS, INPUT_REQUIRED_METHODS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Receive, Scope, Send

from .._config import SessionsConfig
from .._middleware import MCPSessionMiddleware
from .._session import SCOPE_KEY, Session
from .._tokens import SessionClaims
from .._wire import Refusal
from .._wire.protocol import RATE_LIMITED
from ..sources import HostConversationSource
from ..stores import SessionStatus, SessionStoreUnavailable
from ..subscriptions import SessionSubscriptionBus
from ._auth import REQUEST, FrontedConversations, GatewayAuth, ProcessEnv
from ._front import GatewayFront, HostCheck, trusted_proxies
from ._stdio_child import Child

logger = logging.getLogger("mcp_sessions.gateway")

DEFAULT_PROCESS_IDLE: Final = 600.0
DEFAULT_MAX_PROCESSES: Final = 16
SWEEP_EVERY: Final = 1.0
"""How often idle children, and children whose session ended, are looked for."""
CHILD_EXITED: Final = -32603
ANSWER_WITHIN: Final = 300.0
"""How long a child's request waits for a 2026-07-28 client's retry that answers it."""
MAX_PARKED: Final = 16
"""How many of a conversation's 2026-07-28 calls may wait for the client's input at once."""
MAX_QUEUED_PROGRESS: Final = 64
"""How many of a call's progress notifications may wait for a slow client; more are dropped until it catches up."""
_RELAYED: Final[dict[str, tuple[tuple[str, type[types.RequestParams]], ...]]] = {
    "tools": (("tools/list", types.PaginatedRequestParams), ("tools/call", types.CallToolRequestParams)),
    "resources": (
        ("resources/list", types.PaginatedRequestParams),
        ("resources/templates/list", types.PaginatedRequestParams),
        ("resources/read", types.ReadResourceRequestParams),
    ),
    "prompts": (("prompts/list", types.PaginatedRequestParams), ("prompts/get", types.GetPromptRequestParams)),
    "completions": (("completion/complete", types.CompleteRequestParams),),
    "logging": (("logging/setLevel", types.SetLevelRequestParams),),
}
_SUBSCRIBE: Final = (
    ("resources/subscribe", types.SubscribeRequestParams),
    ("resources/unsubscribe", types.UnsubscribeRequestParams),
)
_CLIENT_RESULTS: Final[dict[str, type[types.Result]]] = {
    "sampling/createMessage": types.CreateMessageResult,
    "elicitation/create": types.ElicitResult,
    "roots/list": types.ListRootsResult,
}
_MINTED_META: Final = "io.modelcontextprotocol/"  # the envelope and the session: the gateway's, not the child's


class Call:
    """A client's request relayed to the child; ``ctx`` is the client's request that carries it now (on
    2026-07-28, each retry that brings the client's input takes over)."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], progress_token: object = None) -> None:
        self.ctx = ctx
        self.progress_token = progress_token  # the client's, under which the child's progress reaches it
        self.in_rounds = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and ctx.method in INPUT_REQUIRED_METHODS
        self.events: deque[tuple[str, Any]] = deque()  # the child's progress and requests, then its answer or error
        self.queued_progress = 0
        self.arrived = anyio.Event()
        self.waiting: dict[str, tuple[anyio.Event, list[dict[str, Any]]]] = {}  # the child's requests, by key
        self.shown: set[str] = set()  # the keys of those the client has been asked (in an input_required result)
        self.scope = anyio.CancelScope()

    async def run(self, send: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        """The child's answer (or error), as the last event."""
        with self.scope:
            try:
                self._put("result", await send())
            except MCPError as exc:
                self._put("error", exc)
        if self.scope.cancelled_caught:  # abandoned: a 2026-07-28 retry that comes after learns so, at once
            self._put("error", MCPError(types.INVALID_REQUEST, "this request was abandoned: its input came too late"))

    async def ask(self, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """The client's answer to a request of the child's: a 2025 client is asked on the stream of its request;
        a 2026-07-28 client gets it in an ``input_required`` result, and answers in its retry."""
        request = {"method": method, "params": params}
        if not self.in_rounds:
            if self.ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                raise MCPError(
                    types.INVALID_REQUEST, f"a 2026-07-28 client cannot be asked this during {self.ctx.method}"
                )
            metadata = ServerMessageMetadata(related_request_id=self.ctx.request_id)
            typed = types.server_request_adapter.validate_python(request, by_name=False)
            result = await self.ctx.session.send_request(typed, _CLIENT_RESULTS[method], metadata=metadata)
            return result.model_dump(by_alias=True, mode="json", exclude_none=True)
        if len(self.waiting) >= MAX_PARKED:
            raise MCPError(types.INVALID_REQUEST, f"at most {MAX_PARKED} requests may wait for the client at once")
        key, answered, answer = secrets.token_hex(4), anyio.Event(), list[dict[str, Any]]()
        self.waiting[key] = (answered, answer)
        self._put("ask", (key, request))
        with anyio.move_on_after(ANSWER_WITHIN):
            await answered.wait()
        self.waiting.pop(key, None)
        self.shown.discard(key)
        if not answered.is_set():  # the client did not come back: its call is abandoned
            self.scope.cancel()
        if not answer:
            raise MCPError(types.INVALID_REQUEST, "the client gave no answer to this request")
        return answer[0]

    def answer(self, responses: Mapping[str, Any]) -> None:
        """A 2026-07-28 client's answers to the child's requests it was asked; one it did not answer gets an error. A
        request of the child's that came after the client was asked waits for the next round."""
        for key in [key for key in self.waiting if key in self.shown]:
            answered, answer = self.waiting.pop(key)
            if isinstance(response := responses.get(key), dict):
                answer.append(response)
            answered.set()

    async def _report(self, params: Mapping[str, Any]) -> None:
        """A progress notification of the child's, to the client under its own token."""
        progress, total, message = params.get("progress"), params.get("total"), params.get("message")
        if not isinstance(progress, int | float) or isinstance(progress, bool):
            return
        total = total if isinstance(total, int | float) and not isinstance(total, bool) else None
        message = message if isinstance(message, str) else None
        try:
            await self.ctx.session.send_progress_notification(
                self.progress_token,  # type: ignore[arg-type]  # the client's token, as it sent it
                float(progress),
                total,
                message,
                self.ctx.request_id,  # type: ignore[arg-type]  # any request id
            )
        except Exception:  # the client's stream may be gone: the answer is still awaited
            logger.debug("a progress notification could not be relayed", exc_info=True)

    def _put(self, kind: str, value: Any) -> None:
        self.events.append((kind, value))
        self.arrived.set()

    async def outcome(self) -> dict[str, Any]:
        """The child's answer; or, on 2026-07-28, the child's requests to the client as an ``input_required`` result."""
        while True:
            while not self.events:
                await self.arrived.wait()
                self.arrived = anyio.Event()
            kind, value = self.events.popleft()
            if kind != "progress":
                break
            self.queued_progress -= 1
            await self._report(value)  # queued as the child sent it, before its answer: it reaches the client first
        if kind == "error":
            raise value
        if kind == "result":
            return value  # type: ignore[no-any-return]
        asked = dict([value])
        while self.events and self.events[0][0] == "ask":  # more of the child's requests at once: in one result
            key, request = self.events.popleft()[1]
            asked[key] = request
        self.shown.update(asked)
        return {"resultType": "input_required", "inputRequests": asked}


class Conversation:
    """A child and what its conversation's requests need of it: the calls in flight, the last one's time."""

    def __init__(
        self, sid: str | None, expires_at: float, tasks: anyio.abc.TaskGroup, bus: SessionSubscriptionBus
    ) -> None:
        self.sid, self.expires_at = sid, expires_at  # the session's stable id and its token's expiry
        self.bus = bus  # its 2026-07-28 listen streams
        self.tasks = tasks  # where its calls run: a 2026-07-28 call outlives the client's request
        self.calls: list[Call] = []  # in flight, oldest first
        self.progressing: dict[str, Call] = {}  # calls whose client asked for progress, by the child's token
        self._tokens = itertools.count(1)
        self.parked: dict[str, Call] = {}  # 2026-07-28 calls waiting for the client's input, by requestState
        self.latest: ServerRequestContext[Any, Any] | None = None
        self.credentials = b""  # the digest of its process's --process-env values
        self.last_request = time.monotonic()
        self.ended_by_gateway = False  # idle, its session ended, or shutdown: not a crash
        self.child: Child

    async def relay(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        """The child's answer to a client's request; the client's own progress token gets the child's progress."""
        params = dict(ctx.params or {})
        given = params.pop("_meta", None) or {}
        if meta := {key: value for key, value in given.items() if _passed_on(key)}:
            params["_meta"] = meta
        state, responses = params.pop("requestState", None), params.pop("inputResponses", None)
        if state is not None:  # a 2026-07-28 retry: the answers for the child, then its call goes on
            call = self.parked.pop(state, None) if isinstance(state, str) else None
            if call is None or call.ctx.method != ctx.method:
                raise MCPError(types.INVALID_PARAMS, "requestState names no request waiting for input here")
            call.ctx = ctx
            call.answer(responses if isinstance(responses, dict) else {})
        else:
            call = Call(ctx, given.get("progressToken"))
            if call.progress_token is not None:  # the child reports under a token of the link's
                self.progressing = {key: held for key, held in self.progressing.items() if not held.scope.cancel_called}
                key = str(next(self._tokens))
                params["_meta"] = {**params.get("_meta", {}), "progressToken": key}
                self.progressing[key] = call
            assert self.child.link is not None
            self.tasks.start_soon(call.run, partial(self.child.link.send_raw_request, ctx.method, params))
        self.calls.append(call)
        self.latest = ctx
        parked = False
        try:
            result = await call.outcome()
            if result.get("resultType") == "input_required":
                self.parked = {key: held for key, held in self.parked.items() if not held.scope.cancel_called}
                if len(self.parked) >= MAX_PARKED:
                    raise MCPError(types.INVALID_REQUEST, f"at most {MAX_PARKED} requests may wait for input at once")
                result["requestState"] = state = secrets.token_urlsafe(16)
                self.parked[state] = call
                parked = True
        except MCPError as exc:
            if self.child.done.is_set():  # ended under the request: say so, not the link's "Connection closed"
                raise MCPError(
                    CHILD_EXITED, f"the server process of this conversation exited ({exc.message})"
                ) from None
            raise
        finally:
            self.calls.remove(call)
            self.last_request = time.monotonic()
            if not parked:
                call.scope.cancel()  # answered, or the client went away: the child's call ends (and is cancelled)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:  # a 2025 child's result, complete as it is
            result.setdefault("resultType", "complete")
        return result

    async def on_request(
        self, dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """The child's request to the client: asked through the conversation's latest call in flight. The shared
        child asks no one: nothing says which client's call caused its request, and another client must not see it
        (nor answer for it)."""
        if method == "ping":
            return {}
        if method not in _CLIENT_RESULTS:
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found")
        if self.sid is None:
            raise MCPError(types.INVALID_REQUEST, "the shared server process cannot ask a client; a session's can")
        if not self.calls:
            raise MCPError(types.INVALID_REQUEST, "no request of the client is in progress to carry this one")
        return await self.calls[-1].ask(method, params)

    def on_progress(self, method: str, params: Mapping[str, Any] | None) -> bool:
        """The link's receive-order intercept: a progress notification joins its call's events as it arrives, so that
        it reaches the client before the answer that follows it (``on_notify`` runs in a task of its own)."""
        if method != "notifications/progress":
            return False
        token = params.get("progressToken") if isinstance(params, Mapping) else None
        call = self.progressing.get(token) if isinstance(token, str) else None
        if call is not None and call.queued_progress < MAX_QUEUED_PROGRESS:
            call.queued_progress += 1
            call._put("progress", params)
        return True

    async def on_notify(self, dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None) -> None:
        """A notification of the child's: a change (a list's, a resource's) to the conversation's 2026-07-28 listen
        streams; and to a 2025 client, on the stream of a request in flight, else the conversation's GET stream.
        The shared child's reach no one: they would go to whichever client spoke last."""
        if self.sid is None or method == "notifications/progress":
            return  # a request's progress went to the client under its own token (``relay``)
        if (event := event_from_wire(method, params)) is not None:
            await self.bus.publish_to_session(self.sid, event)
        if self.latest is None:
            return
        target = self.calls[-1].ctx if self.calls else self.latest
        if event is not None and target.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return  # on 2026-07-28, a change is announced on listen streams only
        try:
            notification = types.server_notification_adapter.validate_python(
                {"method": method, "params": params}, by_name=False
            )
        except ValueError:
            logger.warning("%s: dropped a notification that is not MCP's (%s)", self.child.label, method[:100])
            return
        if self.calls:
            await target.session.send_notification(notification, target.request_id)
        else:  # the standalone stream of the connection the conversation's latest request came through
            await self.latest.session.send_notification(notification)


class Children:
    """The children: the shared one, one per conversation (at most ``max_processes``), and their lifetimes."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        config: SessionsConfig,
        processes: Literal["per-conversation", "shared"],
        idle: float,
        max_processes: int,
        environ: Mapping[str, str],
        bus: SessionSubscriptionBus,
        process_env: ProcessEnv,
    ) -> None:
        self.command, self.config, self.processes, self.bus = list(command), config, processes, bus
        self.process_env = process_env
        self.idle, self.max_processes = idle, max_processes
        self.environ = {key: value for key, value in environ.items() if not key.startswith("MCP_SESSIONS_")}
        self.shared: Conversation | None = None
        self.conversations: dict[str, Conversation] = {}  # by the session's stable id
        self._tasks: anyio.abc.TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[types.InitializeResult]:
        """Start the shared child and the sweep; at the end, stop every child. Yields the shared child's answer."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                try:
                    shared = await self.conversation_for(None)
                except MCPError as exc:
                    raise RuntimeError(f"{' '.join(self.command)}: {exc.error.message}") from None
                assert shared.child.initialized is not None
                tasks.start_soon(self._sweep)
                yield shared.child.initialized
            finally:
                self._tasks = None
                for conversation in self.conversations.values():
                    conversation.ended_by_gateway = True
                tasks.cancel_scope.cancel()  # each child stops its process group, shielded (_stdio_child.stop_group)

    async def created(self, claims: SessionClaims) -> None:
        """The sessions' ``on_create``: a new conversation's child, started and initialized before its session is
        handed out; beyond ``max_processes`` (or when the child fails to start), the create is refused."""
        if self.processes == "shared":
            return
        try:
            await self.conversation_for(claims.session_id, claims.expires_at)
        except MCPError as exc:
            retry = 1 if exc.error.code == RATE_LIMITED else None
            raise Refusal(exc.error.code, exc.error.message, reason="process_refused", retry_after=retry) from None

    async def conversation_for(self, sid: str | None, expires_at: float = math.inf) -> Conversation:
        """The conversation ``sid`` names (the shared one for none), its child started if it has none (yet, or
        again after it was idle)."""
        if sid is None or self.processes == "shared":
            if self.shared is None or (self.shared.child.done.is_set() and self.shared.child.ready.is_set()):
                self.shared = self._start(
                    None, math.inf
                )  # the shared child serves no conversation: a new one is as good
            conversation = self.shared
        elif (found := self.conversations.get(sid)) is not None:
            conversation = found
        else:
            live = sum(not conversation.child.done.is_set() for conversation in self.conversations.values())
            if live >= self.max_processes:
                raise MCPError(
                    RATE_LIMITED,
                    f"Too many server processes: the gateway runs at most {self.max_processes} conversations' "
                    "processes at once (--max-processes); end one (sessions/delete) or retry later",
                )
            conversation = self.conversations[sid] = self._start(sid, expires_at)
        await conversation.child.ready.wait()
        if conversation.child.failure is not None:
            raise MCPError(CHILD_EXITED, conversation.child.failure)
        if conversation.child.done.is_set():
            raise MCPError(CHILD_EXITED, "the server process of this conversation has exited; start a new session")
        conversation.last_request = time.monotonic()
        return conversation

    def _start(self, sid: str | None, expires_at: float) -> Conversation:
        if self._tasks is None:
            raise MCPError(CHILD_EXITED, "the gateway is shutting down")
        values = {} if sid is None else self.process_env.values()  # this user's, from the request that starts it
        conversation = Conversation(sid, expires_at, self._tasks, self.bus)
        conversation.credentials = self.process_env.digest(values)
        environ = self.environ if sid is None else {**self.environ, **values, "MCP_SESSION_ID": sid}
        conversation.child = Child(
            self.command,
            label="shared" if sid is None else f"session {sid}",
            environ=environ,
            max_line=self.config.max_response_size,
            on_request=conversation.on_request,
            on_notify=conversation.on_notify,
            on_progress=conversation.on_progress,
        )
        self._tasks.start_soon(self._serve, conversation)
        return conversation

    async def _serve(self, conversation: Conversation) -> None:
        """Run a child to its end; a conversation's child that ended by itself ends its session too."""
        child = conversation.child
        await child.run()
        if conversation.sid is not None and child.failure is None and not conversation.ended_by_gateway:
            try:
                await self.config.store.revoke(conversation.sid, expires_at=conversation.expires_at)
            except SessionStoreUnavailable:
                logger.warning("%s: the session could not be ended in the store", child.label)

    async def _sweep(self) -> None:
        """End the children that are idle or whose session ended; forget those that have ended."""
        store = self.config.store
        while True:
            await anyio.sleep(SWEEP_EVERY)
            now = time.monotonic()
            for sid, conversation in list(self.conversations.items()):
                child = conversation.child
                if not child.ready.is_set():
                    continue  # starting: its first request waits for it
                if child.done.is_set():
                    if child.ready.is_set() and now - conversation.last_request > self.idle:
                        del self.conversations[sid]
                    continue
                try:
                    if idle := not conversation.calls and now - conversation.last_request > self.idle:
                        await store.revoke(sid, expires_at=conversation.expires_at)  # its state ends with it
                    status = await store.touch(sid, expires_at=conversation.expires_at, now=time.time(), idle_ttl=None)
                except SessionStoreUnavailable:
                    continue
                if idle or status is not SessionStatus.ACTIVE or time.time() >= conversation.expires_at:
                    conversation.ended_by_gateway = True
                    child.stop()
                    del self.conversations[sid]


class StdioServer(Server[Any]):
    """The MCP server clients see: the shared child's identity and capabilities, each request relayed."""

    def __init__(self, children: Children) -> None:
        super().__init__(
            "mcp-sessions-stdio",
            lifespan=self._running,
            on_subscriptions_listen=ListenHandler(children.bus),  # scoped to the request's session by the bus
            cache_hints=dict.fromkeys(cast("frozenset[CacheableMethod]", CACHEABLE_METHODS), CacheHint()),
        )
        self.children = children
        self.child_capabilities = types.ServerCapabilities()

    @asynccontextmanager
    async def _running(self, _: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        async with self.children.running() as answer:
            info = answer.server_info
            self.name, self.version, self.title = info.name, info.version, info.title
            self.description, self.website_url, self.icons = info.description, info.website_url, info.icons
            self.instructions, self.child_capabilities = answer.instructions, answer.capabilities
            for capability, methods in _RELAYED.items():
                if getattr(answer.capabilities, capability) is not None:
                    for method, params_type in methods:
                        self.add_request_handler(method, params_type, self._relay)
            if answer.capabilities.resources is not None and answer.capabilities.resources.subscribe:
                for method, params_type in _SUBSCRIBE:
                    self.add_request_handler(method, params_type, self._relay)
            yield {}

    def create_initialization_options(self, *args: Any, **kwargs: Any) -> InitializationOptions:
        """A 2025 client's ``initialize`` answer: the child's, its capabilities as it gave them."""
        options = super().create_initialization_options(*args, **kwargs)
        options.capabilities = self.child_capabilities
        return options

    async def _relay(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        scope = {} if ctx.request is None else ctx.request.scope
        session: Session | None = scope.get(SCOPE_KEY)
        if session is None:
            conversation = await self.children.conversation_for(None)
        else:
            REQUEST.set(scope)  # this request's --process-env values, should it start the process
            conversation = await self.children.conversation_for(session.id, session.token_expires_at)
            self.children.process_env.check(conversation.credentials)
        return await conversation.relay(ctx)


def stdio_gateway_app(
    command: Sequence[str],
    *,
    config: SessionsConfig | None = None,
    processes: Literal["per-conversation", "shared"] = "per-conversation",
    process_idle: float | None = None,
    max_processes: int = DEFAULT_MAX_PROCESSES,
    allowed_hosts: Collection[str] | None = None,
    allowed_origins: Collection[str] | None = None,
    forwarded_allow_ips: str | Collection[str] | None = None,
    environ: Mapping[str, str] | None = None,
    auth: GatewayAuth | None = None,
    process_env: Collection[str] = (),
) -> GatewayFront:
    """Sessions for a stdio MCP server: the ASGI app ``mcp-sessions gateway --stdio`` serves (see the module).

    ``command`` is the server's program and its arguments (run without a shell). ``processes``: a child per
    conversation (the default), or one ``"shared"`` by everyone. ``process_idle``: how long a conversation's
    child lives without a request (default: the sessions' ``idle_ttl``, else 600 s). ``max_processes``: how
    many conversations' children may run at once. ``environ`` (default ``os.environ``) is what the children
    get, without any ``MCP_SESSIONS_*`` variable, and with ``MCP_SESSION_ID``, the conversation's stable id.
    ``process_env`` (``NAME=claim:CLAIM``, ``NAME=header:HEADER-NAME``) sets each conversation's own values of
    those variables, from the request that starts it (``_auth.ProcessEnv``); the gateway's own never reach a
    process. The other arguments are :func:`gateway_app`'s. Serve it with lifespan on: it starts and stops the children.
    """
    if not command:
        raise ValueError("--stdio needs a command")
    if processes not in ("per-conversation", "shared"):
        raise ValueError("processes is 'per-conversation' or 'shared'")
    credentials = ProcessEnv(process_env)
    if credentials.sources and processes == "shared":
        raise ValueError("--process-env gives each conversation's process its own values: not with one shared")
    if max_processes < 1:
        raise ValueError("max_processes must be at least 1")
    config = copy.copy(SessionsConfig.from_env() if config is None else config)
    if trusted := trusted_proxies(forwarded_allow_ips):  # a replica: host conversations from its front alone
        fronted = FrontedConversations.from_context
        config.sources = tuple(fronted if s == HostConversationSource.from_context else s for s in config.sources)
    if config.subscriptions is None:  # a conversation's listen streams get its child's changes: the bus's
        config.subscriptions = SessionSubscriptionBus()
    idle = process_idle if process_idle is not None else config.idle_ttl or DEFAULT_PROCESS_IDLE
    if not idle > 0:
        raise ValueError("process_idle must be a positive number of seconds")
    children = Children(
        command,
        config=config,
        processes=processes,
        idle=idle,
        max_processes=max_processes,
        environ={k: v for k, v in (os.environ if environ is None else environ).items() if k not in credentials.sources},
        bus=config.subscriptions,
        process_env=credentials,
    )
    server = StdioServer(children)
    # The gateway's own Host and Origin check (as in front of an HTTP upstream), in front of the sessions.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(transport_security=security)
    config.on_create = children.created  # a conversation's child starts at its sessions/create
    sessions = MCPSessionMiddleware(app, config=config)
    users = credentials.wrap(sessions)
    checked = _HostChecked(users if auth is None else auth.wrap(users), HostCheck(allowed_hosts, allowed_origins))
    return GatewayFront(checked, trusted=trusted)


class _HostChecked:
    """The gateway's DNS-rebinding protection (:class:`HostCheck`) in front of ``app``."""

    def __init__(self, app: ASGIApp, check: HostCheck) -> None:
        self.app, self.check = app, check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (refused := self.check.check(scope["headers"])) is not None:
            return await refused.send(send)
        await self.app(scope, receive, send)


def _passed_on(key: str) -> bool:
    """Whether a ``_meta`` key of the client's goes to the child: not the envelope, the session, or the progress
    token (the child gets the link's own, and its progress goes back under the client's)."""
    return not key.startswith(_MINTED_META) and key != "progressToken"


__all__ = ["stdio_gateway_app"]

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

import contextlib
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
from typing import Any, Final, Literal, NamedTuple, cast

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
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._asgi import header, send_json
from .._config import SessionsConfig
from .._middleware import MCPSessionMiddleware
from .._session import SCOPE_KEY, Session
from .._tokens import SessionClaims
from .._wire import Refusal, jsonrpc
from .._wire.protocol import RATE_LIMITED
from .._wire.text import printable
from ..stores import SessionStatus, SessionStoreUnavailable
from ..subscriptions import SessionSubscriptionBus
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
MAX_ASKED: Final = 16
"""How many of a call's requests of the child's may wait for the client at once."""
MAX_QUEUED: Final = 64
"""How many notifications may wait for a slow client, a call's (its progress too) or a conversation's tied to no call;
more are dropped, and counted, until it catches up. A request of the child's or its answer is never dropped."""
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
_ROUNDS: Final = ("resultType", "inputRequests", "requestState")  # 2026-07-28's rounds: the gateway's, not the child's


class Ask(NamedTuple):
    """A request of the child's for a 2026-07-28 client, and the key its answer comes back under."""

    key: str
    request: dict[str, Any]


class Call:
    """A client's request relayed to the child; ``ctx`` is the client's request that carries it now (on
    2026-07-28, each retry that brings the client's input takes over).

    What the child sends for the client comes in one stream, in the order the child sent it: its notifications
    (its progress under the client's own token; at most ``MAX_QUEUED`` wait for a slow client, more are dropped and
    counted) and its requests to a 2026-07-28 client (:class:`Ask`); the stream's end is its answer (``result``),
    never dropped.
    """

    def __init__(self, ctx: ServerRequestContext[Any, Any], label: str, progress_token: object = None) -> None:
        self.ctx, self.label = ctx, label
        self.progress_token = progress_token  # the client's, under which the child's progress reaches it
        self.in_rounds = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and ctx.method in INPUT_REQUIRED_METHODS
        self._events, self._next = anyio.create_memory_object_stream[types.ServerNotification | Ask](MAX_QUEUED)
        self.result: dict[str, Any] | MCPError | None = None  # the child's answer; none if the call was abandoned
        self.dropped = 0
        self.waiting: dict[str, tuple[anyio.Event, list[dict[str, Any]]]] = {}  # the child's requests, by key
        self.shown: set[str] = set()  # the keys of those the client has been asked (in an input_required result)
        self.scope = anyio.CancelScope()

    async def run(self, send: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        """The child's answer (or error), which ends the call's events."""
        with self._events, self.scope:
            try:
                self.result = _childs(await send())
            except MCPError as exc:
                self.result = exc

    def tell(self, notification: types.ServerNotification) -> None:
        """A notification for the client; dropped, and counted, while ``MAX_QUEUED`` wait, or once the call is over."""
        try:
            self._events.send_nowait(notification)
        except anyio.WouldBlock:
            self.dropped += 1
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the call is over

    def end(self) -> None:
        """The call is over for its client: the child's call ends (and is cancelled), what it still sends is dropped."""
        self.scope.cancel()
        self._events.close()  # closed by run too, unless it never started
        self._next.close()
        self.dropped = _report_dropped(self.label, self.dropped)  # once a call

    async def ask(self, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """The client's answer to a request of the child's: a 2025 client is asked on the stream of its request;
        a 2026-07-28 client gets it in an ``input_required`` result, and answers in its retry."""
        request = {"method": method, "params": params}
        if len(self.waiting) >= MAX_ASKED:
            raise MCPError(types.INVALID_REQUEST, f"at most {MAX_ASKED} requests may wait for the client at once")
        if not self.in_rounds and self.ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            raise MCPError(types.INVALID_REQUEST, f"a 2026-07-28 client cannot be asked this during {self.ctx.method}")
        key, answered, answer = secrets.token_hex(4), anyio.Event(), list[dict[str, Any]]()
        self.waiting[key] = (answered, answer)
        try:
            if not self.in_rounds:
                metadata = ServerMessageMetadata(related_request_id=self.ctx.request_id)
                typed = types.server_request_adapter.validate_python(request, by_name=False)
                result = await self.ctx.session.send_request(typed, _CLIENT_RESULTS[method], metadata=metadata)
                return result.model_dump(by_alias=True, mode="json", exclude_none=True)
            with anyio.move_on_after(ANSWER_WITHIN):
                await self._events.send(Ask(key, request))
                await answered.wait()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the call ended before its client could be asked
        finally:
            self.waiting.pop(key, None)
            self.shown.discard(key)
            if self.in_rounds and not answered.is_set():  # the client did not come back: its call is abandoned
                self.end()
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

    async def outcome(self) -> dict[str, Any]:
        """The child's answer, its notifications sent to the client first; or, on 2026-07-28, the child's requests
        to the client as an ``input_required`` result."""
        try:
            while not isinstance(event := await self._next.receive(), Ask):
                await self._notify(event)
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            if isinstance(self.result, dict):
                return self.result
            abandoned = MCPError(types.INVALID_REQUEST, "this request was abandoned: its input came too late")
            raise self.result or abandoned from None
        asked = {event.key: event.request}
        with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            while True:  # more of the child's requests at once: in one result
                match self._next.receive_nowait():
                    case Ask(key, request):
                        asked[key] = request
                    case notification:
                        await self._notify(notification)
        self.shown.update(asked)
        return {"resultType": "input_required", "inputRequests": asked}

    async def _notify(self, notification: types.ServerNotification) -> None:
        try:
            await self.ctx.session.send_notification(notification, self.ctx.request_id)
        except Exception:  # the client's stream may be gone: the answer is still awaited
            logger.debug("a notification could not be relayed", exc_info=True)


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
        self.backlog: deque[Callable[[], Awaitable[None]]] = deque()  # notifications tied to no call, being sent
        self.dropped = 0
        self.latest: ServerRequestContext[Any, Any] | None = None
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
            call = Call(ctx, self.child.label, given.get("progressToken"))
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
                call.end()  # answered, or the client went away
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

    def on_notification(self, method: str, params: Mapping[str, Any] | None) -> bool:
        """Every notification of the child's, as it arrives (the link's receive-order intercept; none is left to a
        task of its own): a progress notification to its call's client, under the client's token; any other to the
        latest call in flight, before the answer that follows it, else to the GET stream of the 2025 transport
        session the conversation's latest request came through. A change (a list's, a resource's) goes to the
        conversation's 2026-07-28 listen streams, and to no 2026-07-28 request. The shared child's reach no one:
        they would go to whichever client spoke last."""
        if method == "notifications/progress":
            token = params.get("progressToken") if isinstance(params, Mapping) else None
            if isinstance(token, str) and (call := self.progressing.get(token)) is not None:
                progress = _notification(method, {**(params or {}), "progressToken": call.progress_token})
                if progress is not None:
                    call.tell(progress)
            return True
        if self.sid is None:
            return True
        if (event := event_from_wire(method, params)) is not None:
            self._later(partial(self.bus.publish_to_session, self.sid, event))
        target = self.calls[-1].ctx if self.calls else self.latest
        if target is None or (event is not None and target.protocol_version in MODERN_PROTOCOL_VERSIONS):
            return True
        if (notification := _notification(method, params)) is None:
            label, text = self.child.label, printable(method[:100])
            logger.warning("%s: dropped a notification that is not MCP's (%s)", label, text)
        elif self.calls:
            self.calls[-1].tell(notification)
        else:  # the standalone stream of the connection the conversation's latest request came through
            self._later(partial(target.session.send_notification, notification))
        return True

    def _later(self, send: Callable[[], Awaitable[None]]) -> None:
        """``send`` after what waits before it, in one task at a time: at most ``MAX_QUEUED`` wait for a slow
        client; more are dropped, and counted."""
        if len(self.backlog) >= MAX_QUEUED:
            self.dropped += 1
            return
        self.backlog.append(send)
        if len(self.backlog) == 1:  # none was waiting, so none is being sent: a task sends them
            self.tasks.start_soon(self._send_backlog)

    async def _send_backlog(self) -> None:
        while self.backlog:
            try:
                await self.backlog[0]()
            except Exception:  # the client's stream may be gone
                logger.debug("a notification could not be relayed", exc_info=True)
            finally:
                self.backlog.popleft()
        self.dropped = _report_dropped(self.child.label, self.dropped)  # once it caught up


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
    ) -> None:
        self.command, self.config, self.processes, self.bus = list(command), config, processes, bus
        self.idle, self.max_processes = idle, max_processes
        passed = (key for key in environ if not key.startswith("MCP_SESSIONS_") and key != "MCP_SESSION_ID")
        self.environ = {key: environ[key] for key in passed}  # no key material; MCP_SESSION_ID is the gateway's to give
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
        conversation = Conversation(sid, expires_at, self._tasks, self.bus)
        environ = self.environ if sid is None else {**self.environ, "MCP_SESSION_ID": sid}
        conversation.child = Child(
            self.command,
            label="shared" if sid is None else f"session {sid}",
            environ=environ,
            max_line=self.config.max_response_size,
            on_request=conversation.on_request,
            on_notify=_unreached,
            on_progress=conversation.on_notification,
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
            conversation = await self.children.conversation_for(session.id, session.token_expires_at)
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
) -> GatewayFront:
    """Sessions for a stdio MCP server: the ASGI app ``mcp-sessions gateway --stdio`` serves (see the module).

    ``command`` is the server's program and its arguments (run without a shell). ``processes``: a child per
    conversation (the default), or one ``"shared"`` by everyone. ``process_idle``: how long a conversation's
    child lives without a request (default: the sessions' ``idle_ttl``, else 600 s). ``max_processes``: how
    many conversations' children may run at once. ``environ`` (default ``os.environ``) is what the children
    get, without any ``MCP_SESSIONS_*`` variable, and with ``MCP_SESSION_ID``, the conversation's stable id (none
    in the shared child).
    The other arguments are :func:`gateway_app`'s. Serve it with lifespan on: it starts and stops the children.
    """
    if not command:
        raise ValueError("--stdio needs a command")
    if processes not in ("per-conversation", "shared"):
        raise ValueError("processes is 'per-conversation' or 'shared'")
    if max_processes < 1:
        raise ValueError("max_processes must be at least 1")
    config = copy.copy(SessionsConfig.from_env() if config is None else config)
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
        environ=os.environ if environ is None else environ,
        bus=config.subscriptions,
    )
    server = StdioServer(children)
    # The gateway's own Host and Origin check (as in front of an HTTP upstream), in front of the sessions.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(transport_security=security)
    config.on_create = children.created  # a conversation's child starts at its sessions/create
    config.fronts_upstream = True  # no wire's session member reaches a child, as none reaches an HTTP upstream
    sessions = MCPSessionMiddleware(_OneIdInFlight(app), config=config)
    checked = _HostChecked(sessions, HostCheck(allowed_hosts, allowed_origins))
    return GatewayFront(checked, trusted=trusted_proxies(forwarded_allow_ips))


class _HostChecked:
    """The gateway's DNS-rebinding protection (:class:`HostCheck`) in front of ``app``."""

    def __init__(self, app: ASGIApp, check: HostCheck) -> None:
        self.app, self.check = app, check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (refused := self.check.check(scope["headers"])) is not None:
            return await refused.send(send)
        await self.app(scope, receive, send)


class _OneIdInFlight:
    """The ``mcp`` SDK's transport keys a 2025 transport session's requests in flight by ``str(id)``, so that ``7``
    and ``"7"`` would share one stream and cross, or hang: a request whose id reads as one in flight in its
    transport session gets a JSON-RPC error instead, until the first is answered. It sees the body the middleware
    read whole, and parsed: a JSON POST's."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.in_flight: set[tuple[bytes, str]] = set()  # (transport session id, request id as the SDK keys it)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        transport = header(scope["headers"], b"mcp-session-id") if scope["type"] == "http" else None
        if transport is None or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        message = await receive()
        whole = message["type"] == "http.request" and not message.get("more_body", False)
        parsed = jsonrpc.loads(message.get("body", b"")) if whole else None
        request = jsonrpc.is_request_or_notification(parsed)
        request_id = jsonrpc.echoable_id(jsonrpc.request_id_of(parsed)) if request else None
        key = (transport, str(request_id))
        if request_id is not None and key in self.in_flight:
            refusal = jsonrpc.invalid_request(request_id, "a request with this id is in progress in this session")
            return await send_json(send, 200, refusal, b"")
        if request_id is not None:
            self.in_flight.add(key)
        try:
            await self.app(scope, _replayed(message, receive), send)
        finally:
            if request_id is not None:
                self.in_flight.discard(key)


def _replayed(first: Message, receive: Receive) -> Receive:
    """``receive`` that gives ``first`` again, then what comes after it."""
    given = False

    async def again() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return first

    return again


def _childs(result: dict[str, Any]) -> dict[str, Any]:
    """A child's result without what only the gateway writes: 2026-07-28's round members (its rounds are the
    gateway's; a 2025-11-25 child has none) and ``_meta``'s ``io.modelcontextprotocol/`` keys (the envelope, the
    session's echo)."""
    for member in _ROUNDS:
        result.pop(member, None)
    if isinstance(meta := result.get("_meta"), dict):
        result["_meta"] = {key: value for key, value in meta.items() if _passed_on(key)}
    return result


def _report_dropped(label: str, count: int) -> int:
    """Log that ``count`` notifications were dropped (one line for them all, never a line each); the count after."""
    if count:
        logger.warning("%s: %d notifications dropped: the client did not take them", label, count)
    return 0


def _notification(method: str, params: Mapping[str, Any] | None) -> types.ServerNotification | None:
    try:
        return types.server_notification_adapter.validate_python({"method": method, "params": params}, by_name=False)
    except ValueError:
        return None


async def _unreached(dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None) -> None:
    """The link's ``on_notify``: ``Conversation.on_notification`` takes every notification first."""


def _passed_on(key: str) -> bool:
    """Whether a ``_meta`` key of the client's goes to the child: not the envelope, the session, or the progress
    token (the child gets the link's own, and its progress goes back under the client's)."""
    return not key.startswith(_MINTED_META) and key != "progressToken"


__all__ = ["stdio_gateway_app"]

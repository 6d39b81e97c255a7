"""``mcp-sessions gateway --stdio CMD``: sessions for a stdio MCP server, a process per conversation.

Where the HTTP gateway has its proxy, this one has an MCP server of the ``mcp`` SDK (a low-level
``Server``): the SDK speaks both eras to clients (the 2025-11-25 handshake and transport sessions, the
2026-07-28 envelope and ``server/discover``), and each of its handlers relays the request to the child that
holds the request's conversation, as an MCP client (``_stdio_child``). The session middleware sits at its
endpoint, as in any ``MCPServer`` app, and tells each request's conversation (:data:`SCOPE_KEY`).

The first child, started with the gateway, is the shared one (requests that name no conversation with
``sessionless="shared"``, or every request with ``processes="shared"``); clients' ``initialize`` and
``server/discover`` are answered from its own ``initialize`` answer, and only the methods it advertises are
relayed (any other is the SDK's "Method not found"). Every other child is a conversation's, in one table
(:class:`Children`), whatever names it: a 2025 transport session (the middleware adopts it; its child starts as
its ``initialize`` is answered), a data-layer session (at its ``sessions/create``, the sessions' ``on_create``),
a host's conversation id (at its first request, bound to its caller), a 2026-07-28 request that names none
(``sessionless="per-request"``: a child started ahead, ended once the request is answered, or kept for the retry
that brings the input it asked for). They are bounded overall (``max_processes``) and per caller
(``max_processes_per_principal``). A child ends with its session (its end published on the subscription bus,
from any replica), after ``idle`` seconds without a request, or at shutdown; whatever ended it, its conversation
is over: its later requests get the error of their kind ("Session not found", a transport session's 404, or an
ended host conversation's error), never another process.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
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
from .._bounded import BoundedDict
from .._config import SessionsConfig
from .._middleware import MCPSessionMiddleware
from .._session import PRINCIPAL_CLAIM, SCOPE_KEY, Session, caller_of, principal_digest
from .._tokens import IdDigests, SessionClaims
from .._wire import Refusal, jsonrpc
from .._wire.protocol import MCP_SESSION_ID_HEADER, RATE_LIMITED
from .._wire.text import printable
from ..sources import HostConversationSource
from ..stores import SessionStoreUnavailable
from ..subscriptions import SessionSubscriptionBus
from ._auth import REQUEST, FrontedConversations, GatewayAuth, ProcessEnv
from ._front import GatewayFront, HostCheck, trusted_proxies
from ._stdio_child import Child, ProcessOptions, inherited

logger = logging.getLogger("mcp_sessions.gateway")

DEFAULT_PROCESS_IDLE: Final = 600.0
DEFAULT_MAX_PROCESSES: Final = 16
DEFAULT_WARM: Final = 2
"""Children started ahead for requests that name no conversation."""
DEFAULT_MAX_PROCESSES_PER_CALLER: Final = 4
"""A caller's processes at once: a person runs a few conversations at a time, and one caller cannot take every
slot of the default ``max_processes``."""
MAX_ENDED: Final = 100_000
"""Ended conversations remembered (each answered with the error of its kind, never a new process); oldest first."""
RETRY_LATER: Final = {"retryAfter": 1}  # in a refusal answered in-band (HTTP 200): when to try again, in seconds
_BOUND: Final = "hc-"  # the key of a host conversation bound to its caller
_REQUEST: Final = "rq-"  # the key of a request's own child
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
        self.credentials = b""  # the digest of its process's --process-env values
        self.last_request = time.monotonic()
        self.caller = ""  # whom the per-caller limit counts it for
        self.transport: bytes | None = None  # its 2025 transport session's id, which ends with it
        self.why: str | None = None  # why the gateway ended it (idle, its session ended, shutdown): not a crash
        self.rounds = 0  # a request's own child: how many times it was retained for its client's input
        self.named = anyio.Event()  # it serves a conversation (a warm child waits for one; the shared child never)
        if sid is not None:
            self.named.set()
        self.child: Child

    def end(self, why: str) -> None:
        """End the conversation's child, for ``why``."""
        self.why = self.why or why
        self.child.stop(why)

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
        (nor answer for it). A ``roots/list`` no client can answer (none declared ``roots``, or no call is in
        flight) is answered here: no roots."""
        if method == "ping":
            return {}
        if method not in _CLIENT_RESULTS:
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found")
        declared = self.calls[-1].ctx.session.client_capabilities if self.calls and self.sid is not None else None
        if method == "roots/list" and (declared is None or declared.roots is None):
            return {"roots": []}  # a process started ahead was told its client has roots: none, then
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
        self.command, self.config, self.processes, self.bus = list(command), config, processes, bus
        self.process_env = ProcessEnv() if process_env is None else process_env
        self.per_request, self.warm_count = processes == "per-conversation" and sessionless == "per-request", warm
        self.warm: deque[Conversation] = deque()  # started and initialized ahead, for requests that name nothing
        self.retained: dict[str, Conversation] = {}  # a request's child waiting for its retry, by its requestState
        self.idle, self.max_processes, self.per_caller = idle, max_processes, per_caller
        self.environ = {key: value for key, value in environ.items() if inherited(key)}
        self.digests = IdDigests(config.keys)  # the middleware's: a transport session's key is its adopted session's
        self.options = options
        self.shared: Conversation | None = None
        self.conversations: dict[str, Conversation] = {}
        self.ended: BoundedDict[str, tuple[float, str]] = BoundedDict(MAX_ENDED)  # tombstones: until when, and why
        self.end_transport: Callable[[bytes], Awaitable[None]] | None = None  # a DELETE through the sessions
        self._tasks: anyio.abc.TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[types.InitializeResult]:
        """Start the shared child; at the end, stop every child. Yields the shared child's answer."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                try:
                    shared = await self.shared_conversation()
                except MCPError as exc:
                    raise RuntimeError(f"{' '.join(self.command)}: {exc.error.message}") from None
                assert shared.child.initialized is not None
                self._fill()
                yield shared.child.initialized
            finally:
                self._tasks = None
                for conversation in self.conversations.values():
                    conversation.why = "shutdown"
                tasks.cancel_scope.cancel()  # each child stops its process group, shielded (_stdio_child.stop_group)

    async def created(self, claims: SessionClaims) -> None:
        """The sessions' ``on_create``: a new conversation's child, started and initialized before its session is
        handed out; beyond the limits (or when the child fails to start), the create is refused."""
        if self.processes == "shared":
            return
        caller = caller_of(REQUEST.get() or {}, claims.extra.get(PRINCIPAL_CLAIM))
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
        """The conversation a request names, the most specific name first: its data-layer session's (in a 2025
        transport session too: a client may open several), its 2025 transport session's, its host conversation's
        (bound to its caller); else, with ``sessionless="per-request"``, a child of the request's own (the one that
        asked, for a retry that brings its input: ``state``, its ``requestState``), or the shared one."""
        session: Session | None = scope.get(SCOPE_KEY)
        if self.processes == "shared":
            return await self.shared_conversation()
        if session is not None and session.source == "data-layer":
            return await self.open(session.id, await self.caller(scope), expires_at=session.token_expires_at)
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
        return await self.open(_bound(session.id, caller), caller)  # a host's conversation: its name is no secret

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
        except (TimeoutError, MCPError):
            return {}
        tools = listed.get("tools")
        return {
            tool["name"]: tool["inputSchema"]
            for tool in (tools if isinstance(tools, list) else [])
            if isinstance(tool, dict)
            and isinstance(tool.get("name"), str)
            and isinstance(tool.get("inputSchema"), dict)
        }

    async def shared_conversation(self) -> Conversation:
        if self.shared is None or (self.shared.child.done.is_set() and self.shared.child.ready.is_set()):
            self.shared = self._start(None, "shared", math.inf)  # it serves no conversation: a new one is as good
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
            raise MCPError(
                RATE_LIMITED,
                f"Too many server processes for this caller: each caller may have at most {self.per_caller} "
                "conversations' processes at once (--max-processes-per-principal); end one or retry later",
                RETRY_LATER,
            )
        if len(live) >= self.max_processes:
            raise MCPError(
                RATE_LIMITED,
                f"Too many server processes: the gateway runs at most {self.max_processes} conversations' "
                "processes at once (--max-processes); end one (sessions/delete) or retry later",
                RETRY_LATER,
            )
        if key.startswith(_REQUEST) and self.warm:
            conversation = self.warm.popleft()
            conversation.sid, conversation.caller, conversation.child.label = key, caller, f"request {key}"
            conversation.named.set()
            self.conversations[key] = conversation
        else:
            conversation = self.conversations[key] = self._start(key, caller, expires_at)
        self._fill()
        conversation.transport = transport
        return conversation if transport is not None else await self._ready(conversation)

    def _fill(self) -> None:
        """Start children ahead, up to ``warm`` of them, for requests that name no conversation."""
        while self.per_request and self._tasks is not None and len(self.warm) < self.warm_count:
            self.warm.append(self._start(None, "", math.inf, label="warm"))

    def answered(self, conversation: Conversation) -> None:
        """A request's own child, once its answer is sent: ended, or retained for the retry that brings the input it
        asked for (until that retry, or ``ANSWER_WITHIN``)."""
        if not conversation.parked:
            return self._close_soon(conversation, "answered")
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

    def _start(self, key: str | None, caller: str, expires_at: float, label: str = "shared") -> Conversation:
        if self._tasks is None:
            raise MCPError(CHILD_EXITED, "the gateway is shutting down")
        values = self.process_env.values() if key is not None else {}  # this user's, from the request that starts it
        environ = {**self.environ, **values}
        if key is not None and not key.startswith(_REQUEST):  # a conversation's stable id; a request's own has none
            environ["MCP_SESSION_ID"] = key
        conversation = Conversation(key, expires_at, self._tasks, self.bus)
        conversation.caller, conversation.credentials = caller, self.process_env.digest(values)
        conversation.child = Child(
            self.command,
            label=label if key is None else f"session {key}",
            environ=environ,
            max_line=self.config.max_response_size,
            on_request=conversation.on_request,
            on_notify=_unreached,
            on_progress=conversation.on_notification,
            options=self.options,
        )
        self._tasks.start_soon(self._serve, conversation)
        return conversation

    async def _serve(self, conversation: Conversation) -> None:
        """Run a child to its end: its session's end (on any replica), its idle time or its expiry end it; its end
        ends the conversation, which then gets the error of its kind (a crash as any other end)."""
        child, key = conversation.child, conversation.sid
        unwatch = (
            None
            if key is None or key.startswith((_BOUND, _REQUEST))
            else self.bus.watch(key, partial(conversation.end, "its session ended"))
        )
        try:
            async with anyio.create_task_group() as timers:
                timers.start_soon(self._expire, conversation)
                await child.run()
                timers.cancel_scope.cancel()
        finally:
            if unwatch is not None:
                unwatch()
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
            await self.end_transport(conversation.transport)
        elif key is not None and not key.startswith((_BOUND, _REQUEST)):
            try:
                await self.config.store.revoke(key, expires_at=conversation.expires_at)
            except SessionStoreUnavailable:
                logger.warning("%s: the session could not be ended in the store", conversation.child.label)

    async def _expire(self, conversation: Conversation) -> None:
        """End a conversation's child once it has been idle for ``idle`` seconds, or its session has expired."""
        await conversation.named.wait()  # a warm child idles from when it is taken
        await conversation.child.ready.wait()
        conversation.last_request = time.monotonic()  # idle from its start, however long the start took
        while True:
            left = min(conversation.last_request + self.idle - time.monotonic(), conversation.expires_at - time.time())
            if left <= 0 and (not conversation.calls or conversation.expires_at <= time.time()):
                return await self.close(conversation, "idle" if conversation.expires_at > time.time() else "expired")
            await anyio.sleep(left if left > 0 else self.idle)


class StdioServer(Server[Any]):
    """The MCP server clients see: the shared child's identity and capabilities, each request relayed."""

    def __init__(self, children: Children) -> None:
        super().__init__(
            "mcp-sessions-stdio",
            lifespan=self._running,
            on_subscriptions_listen=ListenHandler(children.bus),  # scoped to the request's session by the bus
            cache_hints=dict.fromkeys(cast("frozenset[CacheableMethod]", CACHEABLE_METHODS), CacheHint()),
            get_tool_input_schema=lambda name: self.input_schemas.get(name),
        )
        self.children = children
        self.input_schemas: dict[str, Mapping[str, Any]] = {}  # for the SDK's Mcp-Param check (see tool_schemas)
        self.child_capabilities = types.ServerCapabilities()

    @asynccontextmanager
    async def _running(self, _: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        async with self.children.running() as answer:
            info = answer.server_info
            self.name, self.version, self.title = info.name, info.version, info.title
            self.description, self.website_url, self.icons = info.description, info.website_url, info.icons
            self.instructions, self.child_capabilities = answer.instructions, answer.capabilities
            if answer.capabilities.tools is not None:
                self.input_schemas = await self.children.tool_schemas()
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
        conversation = await self.children.conversation_for(scope, (ctx.params or {}).get("requestState"))
        try:
            if (
                conversation.sid is not None
            ):  # its process has the --process-env values it started with: this request's?
                self.children.process_env.check(conversation.credentials)
            return await conversation.relay(ctx)
        finally:
            if conversation.sid is not None and conversation.sid.startswith(_REQUEST):
                self.children.answered(conversation)


def stdio_gateway_app(
    command: Sequence[str],
    *,
    config: SessionsConfig | None = None,
    processes: Literal["per-conversation", "shared"] = "per-conversation",
    process_idle: float | None = None,
    max_processes: int = DEFAULT_MAX_PROCESSES,
    max_processes_per_principal: int | None = None,
    sessionless: Literal["per-request", "shared"] = "per-request",
    warm: int = DEFAULT_WARM,
    allowed_hosts: Collection[str] | None = None,
    allowed_origins: Collection[str] | None = None,
    forwarded_allow_ips: str | Collection[str] | None = None,
    environ: Mapping[str, str] | None = None,
    process_options: ProcessOptions | None = None,
    auth: GatewayAuth | None = None,
    process_env: Collection[str] = (),
) -> GatewayFront:
    """Sessions for a stdio MCP server: the ASGI app ``mcp-sessions gateway --stdio`` serves (see the module).

    ``command`` is the server's program and its arguments (run without a shell). ``processes``: a child per
    conversation (the default: each 2025 transport session, data-layer session and host conversation), or one
    ``"shared"`` by everyone. ``process_idle``: how long a conversation's child (and a 2025 transport session)
    lives without a request (default: the sessions' ``idle_ttl``, else 600 s). ``max_processes``: how many
    conversations' children may run at once; ``max_processes_per_principal``: how many of them one caller (its
    principal, else its client address) may have. ``sessionless``: a request that names no conversation gets a
    child of its own (``"per-request"``, the default: one of ``warm`` started ahead, ended once it is answered,
    or retained for the retry that brings the input it asked for), or the ``"shared"`` one. ``environ`` (default
    ``os.environ``) is what the children get, without any ``MCP_SESSIONS_*`` variable, and with
    ``MCP_SESSION_ID``, the conversation's stable id (none in the shared child, nor in a request's own).
    ``process_options``: how each child runs and is contained (``mcp-sessions gateway``'s ``--process-*``).
    ``process_env`` (``NAME=claim:CLAIM``, ``NAME=header:HEADER-NAME``) sets each conversation's own values of
    those variables, from the request that starts it (``_auth.ProcessEnv``; no child is started ahead then, as
    it could not know them); the gateway's own never reach a process. ``auth`` (:class:`GatewayAuth`): who is
    asking. The other arguments are :func:`gateway_app`'s. Serve it with lifespan on: it starts and stops the
    children.
    """
    if not command:
        raise ValueError("--stdio needs a command")
    if processes not in ("per-conversation", "shared"):
        raise ValueError("processes is 'per-conversation' or 'shared'")
    if max_processes_per_principal is None:
        max_processes_per_principal = DEFAULT_MAX_PROCESSES_PER_CALLER
    if max_processes < 1 or max_processes_per_principal < 1:
        raise ValueError("max_processes and max_processes_per_principal must be at least 1")
    if sessionless not in ("per-request", "shared") or warm < 0:
        raise ValueError("sessionless is 'per-request' or 'shared', and warm is 0 or more")
    credentials = ProcessEnv(process_env)
    if credentials.sources and processes == "shared":
        raise ValueError("--process-env gives each conversation's process its own values: not with one shared")
    config = copy.copy(SessionsConfig.from_env() if config is None else config)
    if processes == "per-conversation":  # every client's conversation, however it names it, gets its process
        config.adopt_transport_sessions = True
        if config.conversation_data == "off":
            config.conversation_data = "anonymous"  # bound to the caller here: see Children.conversation_for
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
        per_caller=max_processes_per_principal,
        sessionless=sessionless,
        warm=0 if credentials.sources else warm,  # a child started ahead cannot know its user's values
        environ={k: v for k, v in (os.environ if environ is None else environ).items() if k not in credentials.sources},
        bus=config.subscriptions,
        options=process_options,
        process_env=credentials,
    )
    server = StdioServer(children)
    # The gateway's own Host and Origin check (as in front of an HTTP upstream), in front of the sessions.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(transport_security=security, session_idle_timeout=idle)
    config.on_create = children.created  # a conversation's child starts at its sessions/create
    config.fronts_upstream = True  # no wire's session member reaches a child, as none reaches an HTTP upstream
    sessions = MCPSessionMiddleware(_Opening(_OneIdInFlight(app), children), config=config)
    children.end_transport = partial(_end_transport, sessions)
    guarded = sessions if auth is None else auth.wrap(sessions)
    return GatewayFront(_HostChecked(guarded, HostCheck(allowed_hosts, allowed_origins)), trusted=trusted)


class _Opening:
    """Between the sessions and the SDK's app: each request's scope, for the sessions' ``on_create``; and a 2025
    transport session's process, started as its ``initialize`` is answered (a caller at its limit gets 429)."""

    def __init__(self, app: ASGIApp, children: Children) -> None:
        self.app, self.children = app, children

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        token = REQUEST.set(scope)
        try:
            opens = self.children.processes == "per-conversation" and scope["method"] == "POST"
            if opens and header(scope["headers"], MCP_SESSION_ID_HEADER) is None:
                send = await self._opening(scope, send)
            await self.app(scope, receive, send)
        finally:
            REQUEST.reset(token)

    async def _opening(self, scope: Scope, send: Send) -> Send:
        caller, refused = await self.children.caller(scope), list[bytes]()

        async def opening(message: Message) -> None:
            if refused:
                return  # the SDK's answer to a refused initialize
            raw = header(message.get("headers", ()), MCP_SESSION_ID_HEADER)
            if message["type"] == "http.response.start" and message["status"] == 200 and raw is not None:
                try:
                    await self.children.open(self.children.digests.transport(raw), caller, transport=raw)
                except MCPError as exc:
                    refused.append(raw)
                    status = 429 if exc.error.code == RATE_LIMITED else 400  # a limit, or a --process-env value missing
                    await send_json(
                        send, status, jsonrpc.error(None, exc.error.code, exc.error.message, exc.error.data), b"1"
                    )
                    await _end_transport(self.app, raw)
                    return
            await send(message)

        return opening


async def _end_transport(app: ASGIApp, transport: bytes) -> None:
    """End a 2025 transport session as its client would, with a ``DELETE`` (its later requests get 404)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "DELETE",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": [(MCP_SESSION_ID_HEADER, transport)],
        "client": None,
        "server": None,
        "state": {},
    }

    async def ignore(message: Message) -> None:
        pass

    await app(scope, _nothing, ignore)


async def _nothing() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


def _bound(sid: str, caller: str) -> str:
    """A host conversation's key: its id and its caller's digest, so that another caller naming it gets its own."""
    return _BOUND + hashlib.sha256(f"{sid}\0{caller}".encode()).hexdigest()[:32]


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

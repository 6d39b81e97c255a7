"""The relay of one conversation's requests: what a stdio server process's messages do for its client.

A client's request goes to the conversation's process as a :class:`Call`; the process's answer, its progress under
the client's own token, its other notifications and its requests to the client (a 2025 client is asked on the
stream of its request, a 2026-07-28 client in an ``input_required`` result it answers in its retry) come back
through the :class:`Conversation` that holds the process. Which process a request reaches is ``_table``'s.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Final, NamedTuple

import anyio
import anyio.abc
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.dispatcher import DispatchContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.subscriptions import event_from_wire
from mcp_types.methods import INPUT_REQUIRED_METHODS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..._bounded import BoundedDict
from ..._wire import jsonrpc, printable
from ...profiles import SESSION_META_KEY
from ...subscriptions import SessionSubscriptionBus
from ._child import ChildProcess
from ._models import Caller, EndReason, Key, ProcessView, key_digest

logger = logging.getLogger("mcp_sessions.gateway")

CHILD_EXITED: Final = -32603
JUDGED_WITHIN: Final = 10.0
"""How long a request its process's end cut short waits to learn why it ended (its group stopped, its bounds read)."""
ANSWER_WITHIN: Final = 300.0
"""How long a child's request waits for a 2026-07-28 client's retry that answers it."""
MAX_PARKED: Final = 16
"""How many of a conversation's 2026-07-28 calls may wait for the client's input at once."""
MAX_ASKED: Final = 16
"""How many of a call's requests of the child's may wait for the client at once."""
MAX_RIDERS: Final = 100_000
"""How many conversations a caller's process keeps the names of (each ends with it); the oldest is forgotten first,
and then answered as one that names nothing."""
MAX_QUEUED: Final = 64
"""How many notifications may wait for a slow client, a call's (its progress too) or a conversation's tied to no call;
more are dropped, and counted, until it catches up. A request of the child's or its answer is never dropped."""
_CLIENT_RESULTS: Final[dict[str, type[types.Result]]] = {
    "sampling/createMessage": types.CreateMessageResult,
    "elicitation/create": types.ElicitResult,
    "roots/list": types.ListRootsResult,
}
# the envelope and the session: the gateway's, not the child's
_MINTED_META: Final = "io.modelcontextprotocol/"
# 2026-07-28's rounds: the gateway's, not the child's
_ROUNDS: Final = ("resultType", "inputRequests", "requestState")


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

    A call that may outlive its client's request (``in_rounds``: a 2026-07-28 call whose process may ask its client,
    who brings the input in a retry; a process of many asks none, ``asks``) runs in its conversation's tasks, and the
    request's task reads the stream (:meth:`outcome`); any other is awaited in the request's own task, as the SDK's
    handler awaits any call, and the stream is read by a task started for its first notification, read whole before
    the answer is returned.
    """

    def __init__(
        self, ctx: ServerRequestContext[Any, Any], label: str, progress_token: object = None, *, asks: bool = True
    ) -> None:
        self.ctx = ctx
        self.label = label
        # the client's, under which the child's progress reaches it
        self.progress_token = progress_token
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        self.in_rounds = asks and modern and ctx.method in INPUT_REQUIRED_METHODS
        self._events, self._next = anyio.create_memory_object_stream[types.ServerNotification | Ask](MAX_QUEUED)
        # the child's answer; none if the call was abandoned
        self.result: dict[str, Any] | MCPError | None = None
        self.dropped = 0
        # the child's requests, by key
        self.waiting: dict[str, tuple[anyio.Event, list[dict[str, Any]]]] = {}
        # the keys of those the client has been asked (in an input_required result)
        self.shown: set[str] = set()
        self.scope = anyio.CancelScope()
        self.ended = False
        self._send: Callable[[], Awaitable[dict[str, Any]]] | None = None  # awaited in the request's task
        self._tasks: anyio.abc.TaskGroup | None = None  # where its notifications are read, if it has any
        self._told: anyio.Event | None = None  # set once they are read, from the first one's

    def begin(self, send: Callable[[], Awaitable[dict[str, Any]]], tasks: anyio.abc.TaskGroup) -> None:
        """The child's call (``send``): in its conversation's ``tasks`` if it may outlive the client's request
        (``in_rounds``), else awaited by :meth:`outcome`, in the request's own task."""
        self._tasks = tasks
        if self.in_rounds:
            tasks.start_soon(self.run, send)
        else:
            self._send = send

    async def run(self, send: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        """The child's answer (or error), which ends the call's events."""
        with self._events, self.scope:
            try:
                self.result = _childs(await send())
            except MCPError as exc:
                self.result = exc

    def tell(self, notification: types.ServerNotification) -> bool:
        """A notification for the client, before the answer; dropped, and counted, while ``MAX_QUEUED`` wait. False
        once the answer is on its way (the child's next line can come before the call leaves the conversation's)."""
        try:
            self._events.send_nowait(notification)
        except anyio.WouldBlock:
            self.dropped += 1
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False
        if self._send is not None and self._told is None and self._tasks is not None:
            # awaited in the request's task: another reads its notifications, from the first
            self._told = anyio.Event()
            self._tasks.start_soon(self._tell_all, self._told)
        return True

    async def _tell_all(self, told: anyio.Event) -> None:
        try:
            async for event in self._next:
                if not isinstance(event, Ask):  # none but a call in rounds asks in its stream
                    await self._notify(event)
        except anyio.ClosedResourceError:
            pass  # the call ended
        finally:
            told.set()

    def end(self) -> None:
        """The call is over for its client: the child's call ends (and is cancelled), what it still sends is dropped."""
        self.ended = True
        if self.result is None:  # not answered: still running, or never started
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
        key = secrets.token_hex(4)
        answered = anyio.Event()
        answer: list[dict[str, Any]] = []
        self.waiting[key] = (answered, answer)
        try:
            if not self.in_rounds:
                metadata = ServerMessageMetadata(related_request_id=self.ctx.request_id)
                typed = types.server_request_adapter.validate_python(request, by_name=False)
                result = await self.ctx.session.send_request(typed, _CLIENT_RESULTS[method], metadata=metadata)
                return result.model_dump(by_alias=True, mode="json", exclude_none=True)
            with anyio.move_on_after(ANSWER_WITHIN):
                # at once (send() checkpoints first), before the child's answer read after it ends the call
                try:
                    self._events.send_nowait(Ask(key, request))
                except anyio.WouldBlock:  # a slow client: it waits its turn
                    await self._events.send(Ask(key, request))
                await answered.wait()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the call ended before its client could be asked
        finally:
            self.waiting.pop(key, None)
            self.shown.discard(key)
            # the client did not come back: its call is abandoned
            if self.in_rounds and not answered.is_set():
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
        if self._send is not None:
            await self.run(self._send)
            if self._told is not None:
                await self._told.wait()
            return self._answer()
        try:
            while not isinstance(event := await self._next.receive(), Ask):
                await self._notify(event)
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return self._answer()
        asked = {event.key: event.request}
        with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            # more of the child's requests at once: in one result
            while True:
                match self._next.receive_nowait():
                    case Ask(key, request):
                        asked[key] = request
                    case notification:
                        await self._notify(notification)
        self.shown.update(asked)
        return {"resultType": "input_required", "inputRequests": asked}

    def _answer(self) -> dict[str, Any]:
        if isinstance(self.result, dict):
            return self.result
        abandoned = MCPError(types.INVALID_REQUEST, "this request was abandoned: its input came too late")
        raise self.result or abandoned from None

    async def _notify(self, notification: types.ServerNotification) -> None:
        try:
            await self.ctx.session.send_notification(notification, self.ctx.request_id)
        except Exception:  # the client's stream may be gone: the answer is still awaited
            logger.debug("a notification could not be relayed", exc_info=True)


class Conversation:
    """A child and what its conversation's requests need of it: whose it is, the calls in flight, the last one's
    time (on anyio's clock, as its deadline)."""

    def __init__(
        self,
        key: Key,
        child: ChildProcess,
        *,
        owner: Caller | None,
        bus: SessionSubscriptionBus,
        credentials: bytes = b"",
        expires_at: float = math.inf,
        transport: bytes | None = None,
        user: object = None,
    ) -> None:
        self.key = key
        self.child = child
        self.owner = owner  # None for the shared one
        # the authenticated user who opened it (scope["user"]): who may end its transport session
        self.user = user
        # its session token's expiry, in the store's time (for its revocation)
        self.expires_at = expires_at
        # the same, on anyio's clock
        self.deadline = anyio.current_time() + (expires_at - time.time())
        self.credentials = credentials  # the digest of its process's --process-env values
        self.masked: str | None = None  # its process's proxy token, with --process-env-mask (Process.take)
        self.transport = transport  # its 2025 transport session's id, which ends with it
        self.holds_sessions = False  # whether a data-layer session was opened in that transport session
        self.unwatch: Callable[[], None] | None = None  # stops watching its session's end (_table.open)
        self.bus = bus  # its 2026-07-28 listen streams
        # where its calls run (a 2026-07-28 call outlives the client's request): given once its process is launched
        self.tasks: anyio.abc.TaskGroup | None = None
        self.calls: list[Call] = []  # in flight, oldest first
        # calls whose client asked for progress, by the child's token
        self.progressing: dict[str, Call] = {}
        self._tokens = itertools.count(1)
        # 2026-07-28 calls waiting for the client's input, by requestState
        self.parked: dict[str, Call] = {}
        # notifications tied to no call, being sent
        self.backlog: deque[Callable[[], Awaitable[None]]] = deque()
        self.dropped = 0
        self.latest: ServerRequestContext[Any, Any] | None = None
        self.last_request = anyio.current_time()
        self.requests = 0  # how many it has served
        # a request's own child: how many times it was retained for its client's input
        self.rounds = 0
        self.roots_told = False  # whether its child was told its client's roots changed (see relay)
        # a caller's process: the conversations it serves (named in _meta), which end with it
        self.riders: BoundedDict[Key, Conversation] = BoundedDict(MAX_RIDERS)

    @property
    def shared(self) -> bool:
        return self.key.kind == "shared"

    @property
    def pooled(self) -> bool:
        """Whether its process serves many conversations (the shared one, a caller's own): each request names its
        own in ``_meta``, and the process asks no client and tells none."""
        return self.key.kind in ("shared", "caller")

    def end(self, why: EndReason) -> None:
        """End the conversation's child, for ``why`` (unless it ended already: its end is its child's, set once)."""
        self.child.stop(why)

    async def relay(self, ctx: ServerRequestContext[Any, Any], conversation: str | None = None) -> dict[str, Any]:
        """The child's answer to a client's request; the client's own progress token gets the child's progress.
        ``conversation``: the request's, for a process of many (``Table.named``), named as the draft names a
        session in ``_meta``."""
        params = dict(ctx.params or {})
        given = jsonrpc.meta(params) or {}
        params.pop("_meta", None)
        meta = {key: value for key, value in given.items() if _passed_on(key)}
        if conversation is not None:
            meta[SESSION_META_KEY] = {"sessionId": conversation}
        if meta:
            params["_meta"] = meta
        state = params.pop("requestState", None)
        responses = params.pop("inputResponses", None)
        # a 2026-07-28 retry: the answers for the child, then its call goes on
        if state is not None:
            call = self.parked.pop(state, None) if isinstance(state, str) else None
            if call is None or call.ctx.method != ctx.method:
                raise MCPError(types.INVALID_PARAMS, "requestState names no request waiting for input here")
            call.ctx = ctx
            call.answer(responses if isinstance(responses, dict) else {})
        else:
            assert self.child.link is not None
            declared = ctx.session.client_capabilities
            # a process that outlives the request and asks its client: not a request's own, nor one of many
            lasting = self.key.kind != "request" and not self.pooled
            if lasting and not self.roots_told and declared is not None and declared.roots is not None:
                # the child got no roots before its client was known: it may ask them now
                self.roots_told = True
                await self.child.link.notify("notifications/roots/list_changed", None)
            call = Call(ctx, self.child.label, given.get("progressToken"), asks=not self.pooled)
            # the child reports under a token of the link's
            if call.progress_token is not None:
                self.progressing = {key: held for key, held in self.progressing.items() if not held.ended}
                key = str(next(self._tokens))
                params["_meta"] = {**(jsonrpc.meta(params) or {}), "progressToken": key}
                self.progressing[key] = call
            assert self.tasks is not None  # its process was launched before it was ready (Table.perform)
            call.begin(partial(self.child.link.send_raw_request, ctx.method, params), self.tasks)
        self.calls.append(call)
        self.latest = ctx
        self.requests += 1
        parked = False
        try:
            result = await call.outcome()
            if result.get("resultType") == "input_required":
                self.parked = {key: held for key, held in self.parked.items() if not held.ended}
                if len(self.parked) >= MAX_PARKED:
                    raise MCPError(types.INVALID_REQUEST, f"at most {MAX_PARKED} requests may wait for input at once")
                result["requestState"] = state = secrets.token_urlsafe(16)
                self.parked[state] = call
                parked = True
        except MCPError as exc:
            # ended under the request: say why (a bound it reached says which), not the link's "Connection closed"
            if self.child.done.is_set():
                with anyio.move_on_after(JUDGED_WITHIN):
                    await self.child.judged.wait()
                why = exc.message if self.child.end is None else self.child.end
                raise MCPError(CHILD_EXITED, f"the server process of this conversation exited ({why})") from None
            raise
        finally:
            self.calls.remove(call)
            self.last_request = anyio.current_time()
            if not parked:
                call.end()  # answered, or the client went away
        # a 2025 child's result, complete as it is
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
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
        declared = self.calls[-1].ctx.session.client_capabilities if self.calls and not self.pooled else None
        if method == "roots/list" and (declared is None or declared.roots is None):
            # a process started ahead was told its client has roots: none, then
            return {"roots": []}
        if self.pooled:
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
        if self.pooled:
            return True
        if (event := event_from_wire(method, params)) is not None:
            self._later(partial(self.bus.publish_to_session, self.key.id, event))
        target = self.calls[-1].ctx if self.calls else self.latest
        if target is None or (event is not None and target.protocol_version in MODERN_PROTOCOL_VERSIONS):
            return True
        if (notification := _notification(method, params)) is None:
            label = self.child.label
            text = printable(method[:100])
            logger.warning("%s: dropped a notification that is not MCP's (%s)", label, text)
        # else the standalone stream of the connection the conversation's latest request came through
        elif not (self.calls and self.calls[-1].tell(notification)):
            self._later(partial(target.session.send_notification, notification))
        return True

    def _later(self, send: Callable[[], Awaitable[None]]) -> None:
        """``send`` after what waits before it, in one task at a time: at most ``MAX_QUEUED`` wait for a slow
        client; more are dropped, and counted."""
        if len(self.backlog) >= MAX_QUEUED:
            self.dropped += 1
            return
        self.backlog.append(send)
        # none was waiting, so none is being sent: a task sends them
        if len(self.backlog) == 1 and self.tasks is not None:  # a child that speaks runs: it was launched
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


class Process:
    """A child and the conversation it serves: none yet for one started ahead (what it asks then is answered as
    for no client: no roots), then the one that takes it, for good. Made by a decision of the table's, it runs once
    launched (``Pool.launch``), in the task group it is given then, which its conversation's calls run in too."""

    def __init__(self, credentials: bytes) -> None:
        self.credentials = credentials  # the digest of its --process-env values
        self.tasks: anyio.abc.TaskGroup | None = None  # once launched
        self.started = anyio.current_time()
        self.conversation: Conversation | None = None
        self.taken = anyio.Event()
        self.gone = anyio.Event()  # it has ended and left the pool (Pool.ended)
        self.child: ChildProcess
        self.masked: str | None = None  # its proxy token, with --process-env-mask

    def launch(self, tasks: anyio.abc.TaskGroup) -> None:
        """Its task group, its conversation's too (if one took it before it was launched)."""
        self.tasks = tasks
        if self.conversation is not None:
            self.conversation.tasks = tasks

    def take(self, conversation: Conversation) -> Conversation:
        self.conversation = conversation
        conversation.masked = self.masked
        conversation.tasks = self.tasks  # None until it is launched (launch gives it then)
        self.taken.set()
        return conversation

    async def on_request(self, dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None) -> Any:
        if self.conversation is not None:
            return await self.conversation.on_request(dctx, method, params)
        if method in ("ping", "roots/list"):
            return {} if method == "ping" else {"roots": []}
        raise MCPError(types.INVALID_REQUEST, "no client is in this conversation yet")

    def on_notification(self, method: str, params: Mapping[str, Any] | None) -> bool:
        return self.conversation is None or self.conversation.on_notification(method, params)

    @property
    def kind(self) -> str:
        return "warm" if self.conversation is None else self.conversation.key.kind

    def view(self, now: float) -> ProcessView:
        conversation = self.conversation
        pid = self.child.pid
        age = now - self.started
        if conversation is None:
            return ProcessView(self.kind, None, None, pid, age, age, 0)
        idle = now - conversation.last_request
        served = conversation.requests
        if conversation.owner is None:
            return ProcessView(conversation.key.kind, None, None, pid, age, idle, served)
        name = conversation.owner.name
        digest = key_digest(conversation.key)
        return ProcessView(conversation.key.kind, name, digest, pid, age, idle, served)


def _childs(result: dict[str, Any]) -> dict[str, Any]:
    """A child's result without what only the gateway writes: 2026-07-28's round members (its rounds are the
    gateway's; a 2025-11-25 child has none) and ``_meta``'s ``io.modelcontextprotocol/`` keys (the envelope, the
    session's echo)."""
    for member in _ROUNDS:
        result.pop(member, None)
    if (meta := jsonrpc.meta(result)) is not None:
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


def _passed_on(key: str) -> bool:
    """Whether a ``_meta`` key of the client's goes to the child: not the envelope, the session, or the progress
    token (the child gets the link's own, and its progress goes back under the client's)."""
    return not key.startswith(_MINTED_META) and key != "progressToken"

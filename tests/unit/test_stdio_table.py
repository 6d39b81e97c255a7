"""The stdio gateway's process table through its process factory, with processes in memory (issue 78): which
process a request reaches, admission, eviction, ends and races, in milliseconds each. The e2e files
(``test_gateway_stdio_*``) run the same table with real processes, through the real SDK client."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage
from mcp_types.version import LATEST_MODERN_VERSION

from conftest import SECRET
from mcp_sessions import SessionsConfig
from mcp_sessions._gateway._front import StartupFailed
from mcp_sessions._gateway.stdio import _admission
from mcp_sessions._gateway.stdio._child import _ignored, _no_client
from mcp_sessions._gateway.stdio._models import AFTER_ANSWER, Asking, Caller, End, EndReason, Key, Owner, asking
from mcp_sessions._gateway.stdio._relay import Conversation
from mcp_sessions._gateway.stdio._table import NOTHING, Actions, Table
from mcp_sessions._session import SCOPE_KEY
from mcp_sessions._tokens import SessionClaims
from mcp_sessions._wire import Refusal
from mcp_sessions.profiles import RATE_LIMITED, SESSION_NOT_FOUND
from mcp_sessions.subscriptions import SessionSubscriptionBus

pytestmark = pytest.mark.anyio

INITIALIZED = types.InitializeResult.model_validate(
    {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "memory", "version": "1"}}
)


class MemoryChild:
    """A process in memory: ready once ``started`` is set (at once by default), ended by ``stop`` or ``crash``; asked
    its revisions (``discover``), it answers ``revisions`` and ends."""

    def __init__(self, command: Sequence[str], *, label: str, discover: bool = False, **_: Any) -> None:
        self.label, self.discover, self.revisions = label, discover, list[str]()
        self.ready, self.done, self.started, self.judged = anyio.Event(), anyio.Event(), anyio.Event(), anyio.Event()
        self.initialized: types.InitializeResult | None = INITIALIZED
        self.pid: int | None = None
        self.link: JSONRPCDispatcher[Any] | None = None
        self.end: End | None = None
        self.last_words: str | None = None
        self.stderr_ended = anyio.Event()

    async def run(self) -> None:
        await self.started.wait()
        self.ready.set()
        if not self.discover:
            await self.done.wait()

    def stop(self, reason: EndReason, detail: str = "") -> None:
        self.end = self.end or End(reason, detail)
        self.done.set()

    def crash(self) -> None:
        self.stop(EndReason.CRASH, "crash: it exited")


class Made(list[MemoryChild]):
    """The processes a table made, in order; ``second`` is set as the second one is made."""

    def __init__(self) -> None:
        super().__init__()
        self.second = anyio.Event()


@asynccontextmanager
async def table(
    *, gated: bool = False, speaks: Sequence[str] = (), config: SessionsConfig | None = None, **options: Any
) -> AsyncIterator[tuple[Table, Made]]:
    """A running table whose processes are :class:`MemoryChild` (``gated``: each but the first waits for its
    ``started``; a revision probe is answered ``speaks``), and the processes it made, in order."""
    made = Made()

    def factory(command: Sequence[str], **arguments: Any) -> MemoryChild:
        child = MemoryChild(command, **arguments)
        child.revisions = list(speaks)
        if not gated or not made:
            child.started.set()
        made.append(child)
        if len(made) == 2:
            made.second.set()
        return child

    settings: dict[str, Any] = {"processes": "per-conversation", "idle": 600.0, "max_processes": 16, "per_caller": 4}
    settings |= {"sessionless": "per-caller", "warm": 0, "environ": {}, **options}
    config = config or SessionsConfig(secret=SECRET)
    children = Table(["server"], config=config, bus=SessionSubscriptionBus(), factory=factory, **settings)
    if children.mode == "auto":
        await children.choose()
    async with children.running():
        yield children, made


def scope(address: str = "10.0.0.1", session: object = None, transport: bytes | None = None) -> dict[str, Any]:
    """A request's scope as the table sees it: its client address, its session, its 2025 transport session."""
    headers = [] if transport is None else [(b"mcp-session-id", transport), (b"mcp-protocol-version", b"2025-11-25")]
    return {"type": "http", "client": (address, 1), "headers": headers, SCOPE_KEY: session}


async def reach(children: Table, request: dict[str, Any], method: str, state: object = None) -> Conversation:
    """The conversation ``request`` reaches, as ``Table.relay`` walks it: read once at its edge (``asking``),
    decided (``conversation_for``), what the decision returned done and its process awaited (``reach``)."""
    asked = await asking(request, children.config, children.process_env)
    return await children.reach(children.conversation_for(asked, method, state), asked.later)


def data_layer(session_id: str) -> SimpleNamespace:
    return SimpleNamespace(source="data-layer", id=session_id)


async def create(children: Table, session_id: str, address: str = "10.0.0.1") -> None:
    """A ``sessions/create`` from ``address``, as the sessions' ``on_create`` is called: given its request's scope."""
    now = int(time.time())
    claims = SessionClaims(session_id=session_id, issued_at=now, expires_at=now + 600, extra={})
    await children.created(claims, scope=scope(address))


def idle_table(factory: Any = MemoryChild, **options: Any) -> Table:
    """A table that is not running (no task group: nothing it decides can start), ``per-request`` by default."""
    settings: dict[str, Any] = {"processes": "per-conversation", "idle": 600.0, "max_processes": 16, "per_caller": 4}
    settings |= {"sessionless": "per-request", "warm": 0, "environ": {}, **options}
    return Table(
        ["server"], config=SessionsConfig(secret=SECRET), bus=SessionSubscriptionBus(), factory=factory, **settings
    )


ALICE = Caller("10.0.0.1", Owner("10.0.0.1", ("address", "10.0.0.1")))


def test_route_decides_from_what_it_is_given_with_no_task_group() -> None:
    """The table's decision is synchronous and reads no context: the caller, the drain, the request's names are
    its arguments; a retry names no request waiting; a drain opens no new conversation; another caller's name
    names none. None of these starts a process, so no task group runs."""
    children, alice = idle_table(), ALICE

    with pytest.raises(MCPError) as no_state:
        children.route(Asking(alice, None, None), "tools/call", "a-state-no-one-was-given")
    with pytest.raises(MCPError) as draining:
        children.route(Asking(alice, None, None, draining=True), "tools/call", None)
    with pytest.raises(MCPError) as not_hers:
        children.route(Asking(alice, data_layer("bob's"), None), "tools/call", None)  # type: ignore[arg-type]

    assert no_state.value.error.code == types.INVALID_PARAMS
    assert draining.value.error.message.startswith("The gateway is restarting")
    assert not_hers.value.error.code == SESSION_NOT_FOUND
    assert not children.pool.live  # no process was started


async def test_route_returns_what_to_start_and_end_and_perform_does_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decision that opens a conversation makes its process and returns it to start, and one that evicts returns
    the evicted one to end: it starts and ends nothing itself, and no task group runs while it decides (the event
    loop only gives the clock). ``perform`` then launches and ends what it was given, in one place."""
    monkeypatch.setattr(_admission, "EVICT_AFTER", 0.0)
    made: list[MemoryChild] = []

    def factory(command: Sequence[str], **arguments: Any) -> MemoryChild:
        made.append(child := MemoryChild(command, **arguments))
        child.started.set()
        return child

    children = idle_table(factory, per_caller=1)

    first = children.route(Asking(ALICE, None, None), "tools/call", None)
    second = children.route(Asking(ALICE, None, None), "tools/call", None)  # her limit is one: the first is evicted

    [one, two] = sorted(children.pool.live, key=lambda process: process.child is made[1])
    assert first.actions == Actions(start=(one,), refill=True)
    assert second.actions == Actions(start=(two,), end=((first.conversation, EndReason.EVICTED),), refill=True)
    assert [first.conversation.key.kind, second.conversation.key.kind] == ["request", "request"]
    assert [one.tasks, two.tasks] == [None, None]  # made, counted live, and not launched
    assert [child.end for child in made] == [None, None]  # nor ended: the decision returned it
    assert not any(child.ready.is_set() for child in made)
    async with children.pool.running():
        children.perform(second.actions)
        assert made[0].end == End(EndReason.EVICTED)  # at once: its next request is refused
        with anyio.fail_after(5):
            await made[1].ready.wait()
        assert second.conversation.tasks is children.pool.tasks


async def test_answered_returns_its_end_or_its_retention_with_no_task_group() -> None:
    """Once a request's own process has answered, the decision says to end it once the answer is sent, or to keep
    it for the retry that brings the input it asked for (which then reaches it, and is taken); a conversation's
    process, or the shared one, serves on: nothing to do. No task group runs (the event loop only gives the
    clock)."""
    children = idle_table()
    asked = children.route(Asking(ALICE, None, None), "tools/call", None).conversation
    answered = children.route(Asking(ALICE, None, None), "tools/call", None).conversation
    asked.parked["a-state"] = None  # type: ignore[assignment]  # a call of it waits for the client's input
    shared = children.shared_conversation()

    retained, released = children.answered(asked), children.answered(answered)
    retry = children.route(Asking(ALICE, None, None), "tools/call", "a-state")

    assert retained == Actions(retain=(asked,))
    assert released == Actions(release=(answered,))
    assert [process.child.end for process in children.pool.live] == [None] * 3  # ended by none of it
    assert retry == (asked, NOTHING)
    [made_shared] = [process for process in children.pool.live if process.conversation is shared.conversation]
    assert shared.actions == Actions(start=(made_shared,))  # none yet: the shared one is made too
    assert children.answered(shared.conversation) is NOTHING
    with pytest.raises(MCPError):  # taken once
        children.route(Asking(ALICE, None, None), "tools/call", "a-state")


async def test_process_ended_returns_the_conversations_whose_sessions_end_with_it() -> None:
    """A process's end is a decision too: it leaves the pool and the table, its conversation remembered as ended;
    a crash's conversation is returned, for the lifetimes to end its session with it, and an end the gateway
    asked for (idle) returns none (that end ended it). No task group runs."""
    children = idle_table()
    opened = [children.open(Asking(ALICE, None, None), Key("data-layer-session", sid)) for sid in ("s1", "s2")]
    [crashed], [idled] = [reached.actions.start for reached in opened]
    crashed.child.crash()  # type: ignore[attr-defined]
    idled.child.stop(EndReason.IDLE)

    assert children.process_ended(crashed) == [opened[0].conversation]
    assert children.process_ended(idled) == []
    assert not children.pool.live
    assert crashed.gone.is_set() and idled.gone.is_set()
    assert "(crash: it exited)" in children.gone(Key("data-layer-session", "s1")).error.message


async def test_perform_ends_an_answered_process_once_the_answer_is_sent() -> None:
    """What a request leaves for after its answer (its own process's end, the refill) waits in its scope's
    ``AFTER_ANSWER`` until the answer is sent (``_server._Opening`` runs it); with no request, it is done at once."""
    async with table(sessionless="per-request") as (children, _):
        request = scope() | {AFTER_ANSWER: []}
        reached = await reach(children, request, "tools/call")
        children.perform(children.answered(reached), request[AFTER_ANSWER])

        assert not reached.child.done.is_set()
        assert len(request[AFTER_ANSWER]) == 2  # the refill its start asked for, and its end
        for action in request[AFTER_ANSWER]:
            action()
        assert reached.child.end == End(EndReason.ANSWERED)


async def test_a_callers_requests_that_name_nothing_are_one_conversation_of_hers() -> None:
    async with table() as (children, made):
        hers = [await reach(children, scope(), "tools/call") for _ in range(2)]
        his = await reach(children, scope("10.0.0.2"), "tools/call")
        listed = await reach(children, scope(), "tools/list")

    assert hers[0] is hers[1]
    assert his is not hers[0]
    assert listed.shared
    assert [conversation.key.kind for conversation in (hers[0], his)] == ["sessionless"] * 2
    assert len(made) == 3  # the shared one, and one each


async def test_per_request_each_request_has_a_process_ended_once_answered() -> None:
    async with table(sessionless="per-request") as (children, made):
        first = await reach(children, scope(), "tools/call")
        actions = children.answered(first)
        assert not first.child.done.is_set()  # answered decides; perform ends it
        children.perform(actions)
        with anyio.fail_after(5):
            await first.child.done.wait()
        second = await reach(children, scope(), "tools/call")

    assert first is not second
    assert len(made) == 3


async def test_a_caller_at_her_limit_is_refused_and_another_is_not() -> None:
    async with table(per_caller=1) as (children, made):
        await create(children, "s1")
        with pytest.raises(Refusal) as refused:
            await create(children, "s2")
        theirs = await reach(children, scope("10.0.0.2"), "tools/call")

    assert refused.value.code == RATE_LIMITED
    assert "--max-processes-per-principal" in str(refused.value)
    assert theirs.key.kind == "sessionless"
    assert len(made) == 3


async def test_her_idle_conversation_makes_room_and_is_then_not_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_admission, "EVICT_AFTER", 0.0)
    async with table(per_caller=1) as (children, made):
        await create(children, "s1")
        await create(children, "s2")  # s1, idle, ends for it
        with pytest.raises(MCPError) as gone:
            await reach(children, scope(session=data_layer("s1")), "tools/call")
        kept = await reach(children, scope(session=data_layer("s2")), "tools/call")

    assert gone.value.error.code == SESSION_NOT_FOUND
    assert kept.key.id == "s2"
    assert made[1].end == End(EndReason.EVICTED)


async def test_a_full_table_ends_the_conversation_idle_longest_for_a_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 101, item 3: at ``--max-processes``, a new conversation was refused however long the others had been
    idle (until ``--process-idle``: a team's scripts that end none filled it for ten minutes). Now the one idle
    longest, anyone's, ends for it, once idle ``EVICT_AFTER`` seconds; before that, the refusal names the limit, its
    flag, key and value."""
    async with table(max_processes=2) as (children, made):
        await create(children, "hers", "10.0.0.1")
        await create(children, "his", "10.0.0.2")
        with pytest.raises(Refusal) as refused:  # both idle less than EVICT_AFTER
            await create(children, "theirs", "10.0.0.3")
        monkeypatch.setattr(_admission, "EVICT_AFTER", 0.0)
        await create(children, "theirs", "10.0.0.3")  # hers, idle longest, ends for it
        with pytest.raises(MCPError) as gone:
            await reach(children, scope(session=data_layer("hers")), "tools/call")
        kept = await reach(children, scope("10.0.0.2", session=data_layer("his")), "tools/call")
        ends = [child.end for child in made[1:]]

    assert refused.value.code == RATE_LIMITED
    assert "at most 2 conversations' processes" in str(refused.value), refused.value
    assert "max_processes: --max-processes 2, key max-processes = 2)" in str(refused.value), refused.value
    assert gone.value.error.code == SESSION_NOT_FOUND
    assert kept.key.id == "his"
    assert ends == [End(EndReason.EVICTED), None, None]


async def test_another_callers_session_is_not_found() -> None:
    async with table() as (children, _):
        await create(children, "hers")
        with pytest.raises(MCPError) as refused:
            await reach(children, scope("10.0.0.2", session=data_layer("hers")), "tools/call")

    assert refused.value.error.code == SESSION_NOT_FOUND


async def test_a_crashed_conversation_stays_ended_and_a_callers_own_is_told_once() -> None:
    """A crashed conversation is ended for good; a caller's own process (her requests that name none) is told to
    her next such request once, and the one after gets a new process: never an empty one in silence."""
    async with table() as (children, made):
        transport = await reach(children, scope(transport=b"t1"), "tools/call")
        sessionless = await reach(children, scope(), "tools/call")
        for conversation in (transport, sessionless):
            [process] = [process for process in children.pool.live if process.conversation is conversation]
            conversation.child.crash()  # type: ignore[attr-defined]
            with anyio.fail_after(5):
                await process.gone.wait()  # its end handled: it has left the pool, and the table
        with pytest.raises(MCPError) as ended:
            await reach(children, scope(transport=b"t1"), "tools/call")
        with pytest.raises(MCPError) as told:
            await reach(children, scope(), "tools/call")
        again = await reach(children, scope(), "tools/call")

    for refused in (ended, told):
        assert "conversation has ended (crash: it exited)" in refused.value.error.message
    assert again is not sessionless
    assert len(made) == 4


@pytest.mark.parametrize("state", ["process", "disk"])
async def test_a_conversation_this_table_never_served_gets_a_process_only_where_its_state_is_on_disk(
    state: str,
) -> None:
    """Issue 101, item 2: a data-layer session whose process ran before the gateway's restart (or on another replica)
    is "not found" where the state was in the process; on disk, its next call gets a new process, the caller's alone,
    which its later calls reach. One that ended here stays ended, on disk too: its end is told (a crash ends its
    session as well)."""
    session = SimpleNamespace(source="data-layer", id="before-the-restart", expires_at_timestamp=time.time() + 600)
    async with table(state=state) as (children, made):
        if state == "process":
            with pytest.raises(MCPError) as refused:
                await reach(children, scope(session=session), "tools/call")
            assert refused.value.error.code == SESSION_NOT_FOUND
            assert len(made) == 1  # the shared one alone
            return
        resumed = await reach(children, scope(session=session), "tools/call")
        assert resumed.key == Key("data-layer-session", "before-the-restart")
        assert await reach(children, scope(session=session), "tools/call") is resumed
        with pytest.raises(MCPError) as another:
            await reach(children, scope("10.0.0.2", session=session), "tools/call")
        assert another.value.error.code == SESSION_NOT_FOUND
        [process] = [process for process in children.pool.live if process.conversation is resumed]
        resumed.child.crash()  # type: ignore[attr-defined]
        with anyio.fail_after(5):
            await process.gone.wait()
        with pytest.raises(MCPError) as ended:
            await reach(children, scope(session=session), "tools/call")
    assert ended.value.error.code == SESSION_NOT_FOUND
    assert len(made) == 2


async def test_a_sessions_end_while_its_process_starts_ends_it() -> None:
    async with table(gated=True) as (children, made), anyio.create_task_group() as tasks:
        reached: list[Any] = []

        async def first_call() -> None:
            try:
                reached.append(await reach(children, scope(transport=b"t1"), "tools/call"))
            except MCPError as exc:
                reached.append(exc)

        tasks.start_soon(first_call)
        with anyio.fail_after(5):
            await made.second.wait()
        await children.bus.end_session(children.transport_key(b"t1").id)  # its DELETE, as the sessions publish it
        made[1].started.set()

    [answer] = reached
    assert isinstance(answer, MCPError), answer
    assert made[1].done.is_set(), answer


async def test_concurrent_first_requests_reach_one_process() -> None:
    async with table(gated=True) as (children, made), anyio.create_task_group() as tasks:
        reached: list[Any] = []

        async def call() -> None:
            reached.append(await reach(children, scope(), "tools/call"))

        tasks.start_soon(call)
        tasks.start_soon(call)
        with anyio.fail_after(5):
            await made.second.wait()
        made[1].started.set()

    assert len(reached) == 2
    assert reached[0] is reached[1]
    assert len(made) == 2


@pytest.mark.parametrize(("speaks", "chosen"), [([LATEST_MODERN_VERSION], "caller"), ([], "sessionless")])
async def test_auto_asks_the_server_through_the_factory_what_it_speaks(speaks: list[str], chosen: str) -> None:
    """``--processes auto``, the default: a process per caller for a server that speaks 2026-07-28, else a process
    per conversation; its probe is made by the factory, as every process is."""
    async with table(processes="auto", speaks=speaks) as (children, made):
        conversation = await reach(children, scope(), "tools/call")

    assert made[0].label == "the revision probe"
    assert conversation.key.kind == chosen


async def test_the_decision_returns_what_it_starts_and_reach_does_it() -> None:
    """``conversation_for`` decides from the request read once (an ``Asking``), and returns the process it made
    (``Actions.start``), launched by no one yet: ``reach`` does it, then waits for it."""
    async with table(sessionless="per-request") as (children, made):
        reached = children.conversation_for(Asking(ALICE, None, None), "tools/call")
        [process] = reached.actions.start
        assert process.tasks is None  # decided, not launched
        assert reached.actions.refill

        conversation = await children.reach(reached)

    assert conversation is reached.conversation
    assert process.tasks is not None
    assert conversation.child is made[-1]


async def test_a_relayed_request_is_read_once_at_its_edge(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Table.relay`` reads the request's scope once (who asks: the principal hook runs once), and the decision and
    the name a process of many is given for it (``Table.named``) both take that one value: the name is the
    request's session and its caller, the same for her next request."""
    asked_of: list[object] = []

    def principal(request: object) -> str:
        asked_of.append(request)
        return "alice"

    named: list[str | None] = []

    async def relay(self: Conversation, ctx: object, conversation: str | None = None) -> dict[str, Any]:
        named.append(conversation)
        return {}

    monkeypatch.setattr(Conversation, "relay", relay)
    config = SessionsConfig(secret=SECRET, principal=principal)
    request = scope(session=SimpleNamespace(source="host", id="c1", data=None)) | {AFTER_ANSWER: []}
    ctx = SimpleNamespace(request=SimpleNamespace(scope=request), params={}, method="tools/list")
    async with table(processes="shared", config=config) as (children, _):
        await children.relay(ctx)  # type: ignore[arg-type]
        await children.relay(ctx)  # type: ignore[arg-type]

    assert len(asked_of) == 2  # once a request
    assert named[0] is not None and named == [named[0]] * 2


class Recorded:
    """A conversation's task group that keeps what it is asked to start."""

    def __init__(self, tasks: anyio.abc.TaskGroup) -> None:
        self.tasks = tasks
        self.started: list[object] = []

    def start_soon(self, func: Any, *args: Any) -> None:
        self.started.append(func)
        self.tasks.start_soon(func, *args)


@pytest.mark.parametrize(
    ("kind", "revision", "started", "told"),
    [
        ("transport-session", "2025-11-25", (0, 1), ["notifications/message"]),  # a 2025 client's
        ("shared", LATEST_MODERN_VERSION, (0, 0), []),  # a process of many asks no client, and tells none
        ("request", LATEST_MODERN_VERSION, (1, 2), ["notifications/message"]),  # it may ask: in rounds
    ],
)
async def test_a_call_is_awaited_in_its_requests_own_task_unless_it_may_outlive_it(
    kind: str, revision: str, started: tuple[int, int], told: list[str]
) -> None:
    """A call that cannot outlive its client's request (a 2025 client's; one to a process of many, which asks no
    client) is awaited in that request's task: its conversation starts no task for it; one for its notifications,
    at the first, which reach the client before the answer. One whose process may ask a 2026-07-28 client runs in a
    task of its conversation's (its input comes in a retry). The child is the ``mcp`` SDK's dispatcher over memory
    streams, as ``_child.Pipe`` is over pipes."""
    to_child, child_reads = anyio.create_memory_object_stream[SessionMessage](4)
    child_writes, from_child = anyio.create_memory_object_stream[SessionMessage | Exception](4)
    link: JSONRPCDispatcher[Any] = JSONRPCDispatcher(from_child, to_child)

    async def child() -> None:  # answers each request, told first to say something
        async for message in child_reads:
            request = message.message
            assert isinstance(request, types.JSONRPCRequest) and request.params is not None
            if request.params["arguments"]["say"]:
                said = {"level": "info", "data": "working"}
                notification = types.JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params=said)
                await child_writes.send(SessionMessage(notification))
            answer = types.JSONRPCResponse(jsonrpc="2.0", id=request.id, result={"content": []})
            await child_writes.send(SessionMessage(answer))

    heard: list[str] = []

    async def send_notification(notification: types.ServerNotification, related_request_id: object) -> None:
        heard.append(notification.method)

    def ctx(say: bool) -> Any:
        session = SimpleNamespace(client_capabilities=None, send_notification=send_notification)
        params = {"name": "work", "arguments": {"say": say}}
        return SimpleNamespace(
            params=params, method="tools/call", protocol_version=revision, request_id=1, session=session
        )

    answer = {"content": []} if revision == "2025-11-25" else {"content": [], "resultType": "complete"}
    memory = SimpleNamespace(link=link, label="memory", done=anyio.Event())
    conversation = Conversation(Key(kind, "c"), memory, owner=None, bus=SessionSubscriptionBus())  # type: ignore[arg-type]
    with to_child, child_reads, child_writes, from_child:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(child)
            await tasks.start(link.run, _no_client, _ignored, conversation.on_notification)
            conversation.tasks = recorded = Recorded(tasks)  # type: ignore[assignment]
            assert await conversation.relay(ctx(say=False)) == answer
            assert (len(recorded.started), heard) == (started[0], [])
            assert await conversation.relay(ctx(say=True)) == answer
            assert (len(recorded.started), heard) == (started[1], told)
            tasks.cancel_scope.cancel()


async def test_one_process_starts_ahead_beside_the_shared_one_and_the_rest_once_it_has_answered() -> None:
    """The gateway is ready once its shared process has answered: beside it only a first conversation's process
    starts (``--warm``'s first), the rest once it has answered, so that they do not share the cores its start needs."""
    made = Made()

    def factory(command: Sequence[str], **arguments: Any) -> MemoryChild:
        made.append(child := MemoryChild(command, **arguments))
        if len(made) > 1:  # the shared one answers once the test says so
            child.started.set()
        return child

    children = idle_table(factory, sessionless="per-caller", warm=3)
    answered = anyio.Event()

    async def run() -> None:
        async with children.running():
            answered.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run)
            await anyio.wait_all_tasks_blocked()  # the table waits for the shared process's answer
            assert [child.label for child in made[:1]] == ["shared"]
            assert len(made) == 2
            made[0].started.set()
            await answered.wait()

    assert len(made) == 4


async def test_a_shared_process_that_fails_to_start_ends_the_start_and_starts_no_more() -> None:
    """The start still fails in one line where the shared process crashes, and the rest of ``--warm``, which waits
    for its answer, is never started: one process beside it, no more."""
    made = Made()

    def factory(command: Sequence[str], **arguments: Any) -> MemoryChild:
        made.append(child := MemoryChild(command, **arguments))
        if len(made) == 1:  # the shared one: it exits at once, said nothing
            child.crash()
            child.stderr_ended.set()
        child.started.set()
        return child

    children = idle_table(factory, sessionless="per-caller", warm=3)

    failed = pytest.RaisesExc(StartupFailed, match=r"^server: [^\n]*crash: it exited")
    with anyio.fail_after(5), pytest.RaisesGroup(failed, flatten_subgroups=True):
        async with children.running():
            pass

    assert len(made) == 2

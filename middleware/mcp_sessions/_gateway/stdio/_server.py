"""``mcp-sessions gateway --stdio CMD``: sessions for a stdio MCP server, a process per conversation.

Where the HTTP gateway has its proxy, this one has an MCP server of the ``mcp`` SDK (a low-level
``Server``): the SDK speaks both eras to clients (the 2025-11-25 handshake and transport sessions, the
2026-07-28 envelope and ``server/discover``), and each of its handlers relays the request to the child that
holds the request's conversation, as an MCP client (``_child``), the relay of its messages in
``_relay``. The session middleware sits at its
endpoint, as in any ``MCPServer`` app, and tells each request's conversation (:data:`~..._session.SCOPE_KEY`).

With ``processes="auto"`` (the default), a server that speaks 2026-07-28 gets a process per caller (its principal,
else its client address), as that revision says a stdio process outlives any conversation: each of the caller's
requests reaches it naming its conversation in ``_meta`` (``Table.choose`` asks what it speaks).
It runs, is contained and bounded as a conversation's process is, and is counted as one against the limits; a
bound or a crash that ends it ends that caller's conversations alone. One process for every caller is
``processes="shared"``, never chosen for the operator.
The first child, started with the gateway, is the shared one (the lists that name no conversation, requests that
name none with ``sessionless="shared"``, or every request with ``processes="shared"``); clients'
``initialize`` and ``server/discover`` are answered from its own ``initialize`` answer, and only the methods it
advertises are relayed (any other is the SDK's "Method not found"). Every other child is a conversation's (or a
caller's), in one table (``_table``), whatever names it: a 2025 transport session (the middleware adopts
it; its child is taken by its first request that needs one), a data-layer session (at its ``sessions/create``,
the sessions' ``on_create``), a host's conversation id (at its first request, bound to its caller), the
2026-07-28 requests of a caller that name none (``sessionless="per-caller"``, the default: one conversation of
that caller's; ``"per-request"``: each its own, ended once it is answered, or kept for the retry that brings the
input it asked for). Each takes a child started ahead (``warm``), else one starts. They are bounded
overall (``max_processes``) and per caller (``max_processes_per_principal``). A child ends with its session (its
end published on the subscription bus, from any replica), after ``idle`` seconds without a request, or at
shutdown; whatever ended it, its conversations are over: their later requests get the error of their kind
("Session not found", a transport session's 404, or an ended host conversation's error), never another process.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Final, cast

import anyio
import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
from mcp.server.caching import CacheableMethod, CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import ListenHandler
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types.methods import CACHEABLE_METHODS
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..._asgi import header, is_transport, send_json, sse_event
from ..._bounded import BoundedDict
from ..._config import SessionsConfig
from ..._middleware import MCPSessionMiddleware
from ..._pipeline import REQUEST_ID, unavailable
from ..._wire import jsonrpc
from ..._wire.protocol import MCP_PROTOCOL_VERSION_HEADER, MCP_SESSION_ID_HEADER
from ..._wire.sse import SSERewriter
from ...profiles import Era
from ...sources import HostConversationSource
from ...stores import SessionStoreUnavailable
from ...subscriptions import SessionSubscriptionBus
from .._config import DEFAULT_PROCESS_IDLE, GatewayConfig, StdioProcesses
from .._front import GatewayFront, HostCheck, trusted_proxies
from .._operator import OperatorStatus
from .._serving import REFUSING, RESTARTING, RETRY_AFTER, STOPPING
from ..auth._tools import ToolPolicy, guarded
from ..auth._users import FrontedConversations, GatewayAuth, ProcessEnv
from ..http._replicas import TransportIds
from ..sealed._sandbox import Sandbox, environment
from ._child import START_TIMEOUT
from ._first import FirstProcess
from ._models import AFTER_ANSWER
from ._status import OwnConversations, ProcessMetrics, processes
from ._table import MAX_ENDED, Table, cut

logger = logging.getLogger("mcp_sessions.gateway")

# Each relayed as it came: the SDK checks a spec method's params against its revision's schema before any handler
# (INVALID_PARAMS), so each is registered with the base params (its _meta), not parsed a second time for nothing.
_RELAYED: Final[dict[str, tuple[str, ...]]] = {
    "tools": ("tools/list", "tools/call"),
    "resources": ("resources/list", "resources/templates/list", "resources/read"),
    "prompts": ("prompts/list", "prompts/get"),
    "completions": ("completion/complete",),
    "logging": ("logging/setLevel",),
}
_SUBSCRIBE: Final = ("resources/subscribe", "resources/unsubscribe")


class StdioServer(Server[Any]):
    """The MCP server clients see: the shared child's identity and capabilities, each request relayed."""

    def __init__(self, children: Table) -> None:
        super().__init__(
            "mcp-sessions-stdio",
            lifespan=self._running,
            # scoped to the request's session by the bus
            on_subscriptions_listen=ListenHandler(children.bus),
            cache_hints=dict.fromkeys(cast("frozenset[CacheableMethod]", CACHEABLE_METHODS), CacheHint()),
            get_tool_input_schema=lambda name: self.input_schemas.get(name),
        )
        self.children = children
        # for the SDK's Mcp-Param check (see tool_schemas)
        self.input_schemas: dict[str, Mapping[str, Any]] = {}
        self.child_capabilities = types.ServerCapabilities()

    @asynccontextmanager
    async def _running(self, _: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        """The app's lifespan, the gateway's processes from its start to its end, in named steps (as uvicorn's
        ``Server`` has, and ``_lifecycle.Gateway``, which runs this as its app's start and stop).

        **Startup**, by one ``START_TIMEOUT`` (else ``StartupFailed``, said in one line, exit status 2):
        ``_choose`` (``processes="auto"``: a probe process of its own asked which revisions the server speaks);
        ``Table.running`` (the shared process started, those started ahead beside it, and the shared one's
        ``initialize`` answered); ``_serve_as`` (its identity and capabilities become the gateway's, the methods it
        advertises are relayed); ``_learn_schemas`` (its tools' input schemas, asked beside: not waited for).
        **Shutdown**, once uvicorn has stopped serving: ``_learn_schemas`` cancelled, then ``Table.running``'s end:
        every conversation ended (``shutdown``), every process stopped (``_child.stop_group``: its stdin closed,
        SIGTERM to its group, SIGKILL after ``TERM_GRACE``).

        What a signal does (``Gateway.handle_exit``), SIGTERM or SIGINT (Ctrl-C) alike:

        - **during the start**: the gateway cancels it where it is (the probe, or the wait for the shared
          process's answer), the processes started so far are stopped as at shutdown, and the gateway exits with
          status 0, never having listened;
        - **during the drain** (the first signal once started): nothing here: the gateway and its table refuse a new
          conversation, then a new call (``DRAINING``, ``REFUSING``), while the calls in flight end; the shutdown
          steps run once the drain is over (its calls answered, or ``--shutdown-timeout``);
        - **a second Ctrl-C** (or SIGTERM): the drain ends at once, its calls told ``-32014``, and the shutdown
          steps run as above: no process outlives the gateway (uvicorn's force quit, which would skip them, is
          never used).
        """
        start_deadline = anyio.current_time() + START_TIMEOUT
        await self._choose(start_deadline)
        async with self.children.running(start_deadline) as answer, anyio.create_task_group() as tasks:
            self._serve_as(answer)
            # they arrive when they arrive: the gateway listens meanwhile
            if answer.capabilities.tools is not None:
                tasks.start_soon(self._learn_schemas)
            try:
                yield {}
            finally:
                tasks.cancel_scope.cancel()

    async def _choose(self, start_deadline: float) -> None:
        """Startup: ``processes="auto"``'s choice (``Table.choose``), by the start's deadline."""
        if self.children.mode == "auto":
            await self.children.choose(start_deadline)

    def _serve_as(self, answer: types.InitializeResult) -> None:
        """Startup: the shared process's ``initialize`` answer made the gateway's: its identity and capabilities,
        and a handler relaying each method they advertise (any other is the SDK's "Method not found")."""
        info = answer.server_info
        self.name = info.name
        self.version = info.version
        self.title = info.title
        self.description = info.description
        self.website_url = info.website_url
        self.icons = info.icons
        self.instructions = answer.instructions
        self.child_capabilities = answer.capabilities
        for capability, methods in _RELAYED.items():
            if getattr(answer.capabilities, capability) is not None:
                for method in methods:
                    self.add_request_handler(method, types.RequestParams, self._relay)
        if answer.capabilities.resources is not None and answer.capabilities.resources.subscribe:
            for method in _SUBSCRIBE:
                self.add_request_handler(method, types.RequestParams, self._relay)

    async def _learn_schemas(self) -> None:
        self.input_schemas = await self.children.tool_schemas()

    def create_initialization_options(self, *args: Any, **kwargs: Any) -> InitializationOptions:
        """A 2025 client's ``initialize`` answer: the child's, its capabilities as it gave them."""
        options = super().create_initialization_options(*args, **kwargs)
        options.capabilities = self.child_capabilities
        return options

    async def _relay(self, ctx: ServerRequestContext[Any, Any], params: Any) -> dict[str, Any]:
        return await self.children.relay(ctx)


def stdio_gateway_app(
    config: GatewayConfig, *, sandbox: Sandbox | None = None, first: FirstProcess | None = None
) -> GatewayFront:
    """Sessions for a stdio MCP server: the ASGI app ``mcp-sessions gateway --stdio`` serves (see the module), as
    ``config`` says, whole (``config.serves``, the server's processes: :class:`StdioProcesses`). Serve it with
    lifespan on: it starts and stops the children. ``sandbox``: what the children run in, built from
    ``config.serves.sandbox`` (the policy) unless given; whoever builds it installs and closes it
    (``_cli``: its egress table before the gateway serves, the whole once every child has ended). ``first``: its
    shared process, started ahead in ``sandbox`` (``_first.FirstProcess``), which its shared child takes."""
    serves = config.serves
    if not isinstance(serves, StdioProcesses):
        raise TypeError("stdio_gateway_app serves a stdio server's processes: config.serves is a StdioProcesses")
    credentials = ProcessEnv(
        serves.process_env,
        exchange=config.exchange,
        exchange_scope=serves.exchange_scope,
        subject=config.id_tokens,
        grants=config.process_grants,
    )
    if credentials.sources and serves.processes == "shared":
        raise ValueError("--process-env gives each conversation's process its own values: not with one shared")
    trusted = trusted_proxies(config.forwarded_allow_ips)
    # a conversation's listen streams get its child's changes: the bus's
    bus = config.sessions.subscriptions or SessionSubscriptionBus()
    sessions = _sessions_config(config.sessions, bus, replica=bool(trusted))
    idle = serves.process_idle or sessions.idle_ttl or DEFAULT_PROCESS_IDLE
    passed = environment(serves.environ, serves.pass_env)  # by allow-list
    policy = serves.sandbox
    if sandbox is None and policy is not None:
        sandbox = Sandbox(policy)
    table = partial(
        Table,
        serves.command,
        config=sessions,
        processes=serves.processes,
        idle=idle,
        max_processes=serves.max_processes,
        per_caller=serves.max_processes_per_principal,
        sessionless=serves.sessionless,
        # a child started ahead cannot know its user's values, nor her directory
        warm=0 if credentials.sources or (policy is not None and policy.per_user) else serves.warm,
        environ={name: value for name, value in passed.items() if name not in credentials.sources},
        bus=bus,
        options=sandbox,
        process_env=credentials,
        fronted=bool(trusted),
        state=serves.state,
        metrics=partial(ProcessMetrics, meter_provider=sessions.meter_provider),
        first=first,
    )
    check = HostCheck(config.allowed_hosts, config.allowed_origins)
    status = (config.listening.status_port, config.listening.status_socket)
    return _layered(
        table,
        sessions,
        endpoint=serves.path,
        idle=idle,
        auth=config.auth,
        tools=config.tools,
        check=check,
        trusted=trusted,
        status=status,
    )


def _sessions_config(config: SessionsConfig, bus: SessionSubscriptionBus | None, *, replica: bool) -> SessionsConfig:
    """``config`` as the sessions in front of stdio processes need it, in one change: every conversation named,
    however its client names it (each gets its process, or in a process of many, the shared one too, its name, bound
    to its caller: see Table.conversation_for and Table.named), on a replica host conversations from its front alone,
    and the listen streams on ``bus``. At the sessions' layer alone (:func:`_layered`, once the table is made), what
    the table does at a ``sessions/create`` (``on_create``), and no wire's session member reaching a process."""
    fronted = FrontedConversations.from_context
    sources = [fronted if replica and s == HostConversationSource.from_context else s for s in config.sources]
    data = "anonymous" if config.conversation_data == "off" else config.conversation_data
    return config.replace(
        adopt_transport_sessions=True,
        conversation_data=data,
        sources=tuple(sources),
        subscriptions=bus,
    )


def _layered(
    table: Callable[..., Table],
    config: SessionsConfig,
    *,
    endpoint: str,
    idle: float,
    auth: GatewayAuth | None,
    tools: ToolPolicy | None,
    check: HostCheck,
    trusted: list[str],
    status: tuple[int | None, str | None],
) -> GatewayFront:
    """The SDK's app for :class:`StdioServer` at ``endpoint`` (the path its sessions are bound to), and the layers
    around it, outermost last: the guard of its transport's requests (:class:`_TransportRequests`, at it, where the
    sessions then place their work in front of it), the sessions, the gateway's auth and tool policy, its Host and
    Origin check (as in front of an HTTP upstream), its front door. The table (``table``, given how to end a 2025
    transport session) ends one through the sessions, which it sits in."""

    async def end_transport(transport: bytes, user: object) -> None:
        await _end_transport(sessions, endpoint, transport, user)

    children = table(end_transport=end_transport)
    server = StdioServer(children)
    # the gateway's own check instead
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    served = server.streamable_http_app(
        streamable_http_path=endpoint, transport_security=security, session_idle_timeout=idle
    )
    app: ASGIApp = _Opening(_under_sessions(served, children), children)
    if children.state == "disk":  # a transport session of a process gone is opened again, nothing lost
        declared = _Declared(children.config)
        server.add_notification_handler("notifications/initialized", types.NotificationParams, declared.initialized)
        app = _Reopened(app, children, declared, endpoint)
    # a conversation's child starts at its sessions/create; no wire's session member reaches a child, as none
    # reaches an HTTP upstream
    config = config.replace(on_create=children.created, fronts_upstream=True)
    sessions = MCPSessionMiddleware(app, config=config)
    exchanged = children.process_env.wrap(sessions)  # exchanges, once the user is known
    own: ASGIApp = sessions if auth is None else OwnConversations(exchanged, children, endpoint)
    signing_in = children.process_env.signing_in
    if signing_in is not None:  # her view of her grants behind the authentication (the sign-in's pages: below)
        own = signing_in.serving_grants(own)
    checked: ASGIApp = _HostChecked(guarded(own, auth, tools, config), check)
    if signing_in is not None:  # the sign-in's pages, for a browser with no bearer
        checked = signing_in.wrap(checked)
    # without a status port or socket too: a status request at the clients' port is told where it is
    verifier = None if auth is None else auth.verifier
    keys = None if verifier is None else verifier.state
    checked = OperatorStatus(checked, partial(processes, children), *status, keys=keys, signing_in=signing_in)
    return GatewayFront(checked, trusted=trusted)


class _Opening:
    """In front of the SDK's app (the sessions place their work at its endpoint, inside it): each 2025 transport
    session opened, for the table's count of those with no process (``Table.connected``); and, once the answer is
    sent, what the request left to do (:data:`AFTER_ANSWER`, in its scope: the table is handed it)."""

    def __init__(self, app: ASGIApp, children: Table) -> None:
        self.app = app
        self.children = children

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        scope[AFTER_ANSWER] = []
        try:
            opens = self.children.mode != "shared" and scope["method"] == "POST"
            if opens and header(scope["headers"], MCP_SESSION_ID_HEADER) is None:
                send = self._opening(scope, send)
            await self.app(scope, receive, send)
        finally:
            for action in scope.pop(AFTER_ANSWER):  # what comes later is done at once
                action()

    def _opening(self, scope: Scope, send: Send) -> Send:
        async def opening(message: Message) -> None:
            raw = header(message.get("headers", ()), MCP_SESSION_ID_HEADER)
            if message["type"] == "http.response.start" and message["status"] == 200 and raw is not None:
                await self.children.connected(raw, scope)
            await send(message)

        return opening


async def _end_transport(app: ASGIApp, endpoint: str, transport: bytes, user: object = None) -> None:
    """End a 2025 transport session as its client would, with a ``DELETE`` at ``endpoint`` (its later requests get
    404): as ``user``, who opened it (the SDK answers any other's ``DELETE`` "Session not found")."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "DELETE",
        "scheme": "http",
        "path": endpoint,
        "raw_path": endpoint.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(MCP_SESSION_ID_HEADER, transport)],
        "client": None,
        "server": None,
        "state": {},
        **({} if user is None else {"user": user}),
    }

    async def ignore(message: Message) -> None:
        pass

    await app(scope, _nothing, ignore)


async def _nothing() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


class _Reopened:
    """With ``state="disk"``: a 2025 transport session the ``mcp`` SDK's app does not have (its 404: the gateway
    minted it before its restart or its crash, or another replica did) is opened again for the client that holds
    it, under the id it holds, and its request is served in it: as its conversation's state is on disk, nothing it
    held is lost, and the SDK's client, which raises on a 404 ("Session terminated") and never initializes again,
    goes on. The SDK mints the ids (``uuid4``, its transport's); the client gets each signed by the gateway
    (:class:`~mcp_sessions._gateway.http._replicas.TransportIds`, as the HTTP gateway signs its upstreams' ids:
    every gateway with the same keys, after a restart too, and no one else can make one). A new one is opened here
    as a client would open it (``initialize``, then ``notifications/initialized``, as the caller who asks: the SDK's
    transport is hers, within the same limits, ``Table.connected``), and each of the client's requests naming its
    id is handed the new one, whose answers name hers again. The new one declares the capabilities the client
    declared at its own ``initialize`` (:class:`_Declared`), so that she is asked after the restart what she was
    asked before (her roots); where none were kept (a store that did not outlive the gateway), none. An id no
    gateway signed (made up, altered, another deployment's) is never opened: the SDK's 404 "Session not found",
    and no process. A ``DELETE`` ends the one it names."""

    def __init__(self, app: ASGIApp, children: Table, declared: _Declared, endpoint: str) -> None:
        self.app = app
        self.children = children
        self.declared = declared
        # (the id a client holds, its principal as the SDK's transport compares it): the id the SDK now knows it by
        self.opened: BoundedDict[tuple[bytes, tuple[object, ...]], bytes] = BoundedDict(MAX_ENDED)
        # a lock per client's id while it is opened again: its requests that all found it gone open one, and
        # other clients' reopenings (after a restart, every conversation's) do not wait behind it
        self.reopening: dict[tuple[bytes, tuple[object, ...]], anyio.Lock] = {}
        self.ids = TransportIds(children.config.keys, endpoint)  # its server's: refused at another's

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        held = header(scope["headers"], MCP_SESSION_ID_HEADER)
        if held is None:  # an initialize: the transport session it opens, signed for its client
            return await self.app(scope, receive, _renamed(send, self._signed))
        if _era(scope) is not Era.LEGACY:
            return await self.app(scope, receive, send)
        signed = self.ids.verify(held)
        minted = None if signed is None else signed[1]  # the SDK's id a gateway gave out; None: none did
        principal = _principal(scope)
        name = (held, principal)
        named = self.opened.get(name, minted or held)
        if scope["method"] not in ("POST", "GET"):  # a DELETE: of the one it names now, and what she declared
            if minted is not None:
                await self.declared.forget(minted, principal)
            return await self.app(_naming(scope, named), receive, _renamed(send, partial(_same, held)))
        kept = _Kept(receive)
        missing = _Missing(send)
        await self.app(_naming(scope, named), kept, _renamed(missing, partial(_same, held)))
        if not missing.refused or minted is None:  # an id no gateway gave out is opened nowhere: the SDK's 404
            return await missing.replay()
        lock = self.reopening.setdefault(name, anyio.Lock())
        try:
            async with lock:
                now = self.opened.get(name)
                if now is None or now == named:
                    now = await self._open(scope, await self.declared.of(minted, principal))
                    if now is None:
                        return await missing.replay()
                    self.opened[name] = now
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting:
                self.reopening.pop(name, None)
        await self.app(_naming(scope, now), kept.again(), _renamed(send, partial(_same, held)))

    def _signed(self, minted: bytes) -> bytes:
        """The id a client gets for the transport session the SDK minted as ``minted``."""
        return self.ids.sign(_TAG, minted) or minted

    async def _open(self, scope: Scope, capabilities: dict[str, Any]) -> bytes | None:
        """A new 2025 transport session of the request ``scope``'s caller, initialized declaring ``capabilities``,
        counted against the limits as any (``_Opening``): its id; ``None`` if the SDK's app did not open one in
        time."""
        version = header(scope["headers"], MCP_PROTOCOL_VERSION_HEADER) or b"2025-11-25"
        base = [(name, value) for name, value in scope["headers"] if name not in _OPENING_DROPS]
        headers = [*base, (b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream")]
        client = {"name": "mcp-sessions gateway", "version": "reopened"}
        version_named = version.decode("ascii", "replace")
        params = {"protocolVersion": version_named, "capabilities": capabilities, "clientInfo": client}
        initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
        with anyio.move_on_after(START_TIMEOUT):
            opening = _Missing(_discard)
            await self.app({**scope, "method": "POST", "headers": headers}, _once(jsonrpc.dumps(initialize)), opening)
            raw = opening.minted
            if raw is None:
                return None
            done = jsonrpc.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
            named = _naming({**scope, "method": "POST", "headers": headers, _REOPENING: True}, raw)
            await self.app(named, _once(done), _discard)
            logger.info("a 2025 transport session the gateway no longer had was opened again for its client")
            return raw
        return None


_TAG: Final = hashlib.sha256(b"stdio").hexdigest()[:8].encode()
"""The one server's tag in the transport session ids the gateway signs (``TransportIds``): a stdio server's
processes are one replica's."""
_OPENING_DROPS: Final = frozenset({MCP_SESSION_ID_HEADER, b"content-type", b"content-length", b"accept"})
_REOPENING: Final = "mcp_sessions.gateway.reopening"
"""The scope key of the ``notifications/initialized`` that ends a reopening's handshake: what it declares is kept
under the id the client holds, not under the SDK's new one."""
MAX_DECLARED: Final = 16 * 1024
"""The most of a 2025 client's declared capabilities kept (bytes of JSON): a client's are a few hundred."""


class _Declared:
    """What each 2025 client declared at its ``initialize`` (its capabilities), kept under ``--conversation-state
    disk`` for the reopening of its transport session (:class:`_Reopened`), so that the client is asked after a
    restart what it was asked before (its roots; sampling and elicitation as the server asks them).

    Kept in the sessions' store (``MCP_SESSIONS_STORE``), where what outlives a gateway is: through a restart with
    SQLite or Redis, and on another replica sharing one (memory keeps it for a transport session the gateway's SDK
    app ended while the gateway runs). Its record is named by a SHA-256 digest of the transport session's id and
    its principal as the SDK's transport compares them (the store names neither), kept for the sessions' ``ttl``
    or until her client ends it (``DELETE``).
    It is the client's own declaration, no secret; over :data:`MAX_DECLARED` bytes it is not kept, and a store
    that fails is logged and passed over: the reopening then declares none, as a client that declared none."""

    def __init__(self, config: SessionsConfig) -> None:
        self.store = config.store
        self.ttl = config.ttl

    async def initialized(self, ctx: ServerRequestContext[Any, Any], params: types.NotificationParams) -> None:
        """The SDK's handler of a 2025 client's ``notifications/initialized`` (its handshake done, its transport
        session's id in the request): its declared capabilities kept."""
        request = ctx.request
        declared = ctx.session.client_capabilities
        if not isinstance(request, Request) or declared is None or request.scope.get(_REOPENING):
            return
        raw = header(request.scope["headers"], MCP_SESSION_ID_HEADER)
        kept = declared.model_dump(by_alias=True, mode="json", exclude_none=True)
        if raw is None or len(jsonrpc.dumps(kept)) > MAX_DECLARED:
            return
        record = _record(raw, _principal(request.scope))
        try:
            await self.store.set(record, "capabilities", kept, expires_at=time.time() + self.ttl)
        except SessionStoreUnavailable:
            logger.warning("the store did not keep a 2025 client's capabilities: a reopening would declare none")

    async def of(self, raw: bytes, principal: tuple[object, ...]) -> dict[str, Any]:
        """What the client holding the transport session ``raw`` declared, as ``principal``: ``{}`` if nothing."""
        try:
            kept = await self.store.get(_record(raw, principal), "capabilities")
        except SessionStoreUnavailable:
            logger.warning("the store did not say a 2025 client's capabilities: its reopening declares none")
            return {}
        return kept if isinstance(kept, dict) else {}

    async def forget(self, raw: bytes, principal: tuple[object, ...]) -> None:
        """Her declaration forgotten as her client ends the transport session ``raw`` (its ``DELETE``)."""
        try:
            await self.store.delete(_record(raw, principal), "capabilities")
        except SessionStoreUnavailable:
            logger.warning("the store did not forget a 2025 client's capabilities: they expire with the sessions' ttl")


def _record(raw: bytes, principal: tuple[object, ...]) -> str:
    """The store's record of a transport session's declaration: a digest, so that the store names neither."""
    named = json.dumps([raw.decode("latin-1"), [str(part) for part in principal]])
    return "gateway-declared-" + hashlib.sha256(named.encode()).hexdigest()


def _principal(scope: Scope) -> tuple[object, ...]:
    """The request's principal as the SDK's transport compares it (``authorization_context``): none without auth."""
    user = scope.get("user")
    return tuple(authorization_context(user).values()) if isinstance(user, AuthenticatedUser) else ()


def _naming(scope: Scope, raw: bytes) -> Scope:
    """``scope`` naming the 2025 transport session ``raw`` (the SDK's id of it)."""
    headers = [(name, value) for name, value in scope["headers"] if name != MCP_SESSION_ID_HEADER]
    return {**scope, "headers": [*headers, (MCP_SESSION_ID_HEADER, raw)]}


def _renamed(send: Send, held: Callable[[bytes], bytes]) -> Send:
    """``send``, its response naming the transport session the SDK's app named as the client knows it: ``held`` of
    the SDK's id."""

    async def renamed(message: Message) -> None:
        if message["type"] == "http.response.start":
            named = message.get("headers", ())
            headers = [(name, held(value) if name == MCP_SESSION_ID_HEADER else value) for name, value in named]
            message = {**message, "headers": headers}
        await send(message)

    return renamed


def _same(held: bytes, minted: bytes) -> bytes:
    """``held``, whatever the SDK's app named (a session it opened again for the client that holds ``held``)."""
    return held


class _Missing:
    """A ``send`` that holds back a 404 (the SDK's app does not have the transport session named) for
    :meth:`replay`, and passes any other answer; what it opened, if it did (``minted``)."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.refused = False
        self.minted: bytes | None = None
        self.held: list[Message] = []

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.refused = message["status"] == 404
            if message["status"] == 200:
                self.minted = header(message.get("headers", ()), MCP_SESSION_ID_HEADER)
        if self.refused and message["type"].startswith("http.response."):
            self.held.append(message)
            return
        await self.send(message)

    async def replay(self) -> None:
        for message in self.held:
            await self.send(message)


class _Kept:
    """A request's ``receive`` that keeps the body's messages the app reads, to hand them to it again
    (:meth:`again`) when it answered 404: the body is the one the sessions read and replay (one read, no copy of
    it here), and what the SDK's transport does not read before its 404 is still in the sessions' replay."""

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.read: list[Message] = []

    async def __call__(self) -> Message:
        message = await self.receive()
        if message["type"] == "http.request":
            self.read.append(message)
        return message

    def again(self) -> Receive:
        """A ``receive`` that hands the messages read, then the request's own."""
        held = iter(self.read)

        async def receive() -> Message:
            message = next(held, None)
            return await self.receive() if message is None else message

        return receive


def _once(body: bytes) -> Receive:
    """A request's ``receive``: ``body``, then nothing until its answer is sent (the app stops listening)."""
    given = False

    async def receive() -> Message:
        nonlocal given
        if given:
            await anyio.sleep_forever()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def _discard(message: Message) -> None:
    pass


class _HostChecked:
    """The gateway's DNS-rebinding protection (:class:`HostCheck`) in front of ``app``."""

    def __init__(self, app: ASGIApp, check: HostCheck) -> None:
        self.app = app
        self.check = check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (refused := self.check.check(scope["headers"])) is not None:
            return await refused.send(send)
        await self.app(scope, receive, send)


class _TransportRequests:
    """The requests POSTed in a 2025 transport session, where the ``mcp`` SDK's transport would lose an answer, and
    the calls of the gateway's stop cuts (of either era):

    - the conversation a request names is claimed in the store (``Table.claim``) before the SDK answers it: a store
      that fails or stalls there leaves the request unanswered to the sessions, which answer it as every store
      failure, the retryable -32010 with HTTP 503 and ``Retry-After``; in the SDK, a handler's failure is -32603,
      and a 2025 request's event stream has started its 200;
    - it keys a session's requests in flight by ``str(id)``, so that ``7`` and ``"7"`` would share one stream and
      cross, or hang: a request whose id reads as one in flight in its transport session gets a JSON-RPC error
      instead, until the first is answered. Only the requests of the principal the SDK's transport lets in
      (:func:`authorization_context`) are its concern: another's is the SDK's to refuse, as a session it does not
      have;
    - a request in flight as its session ends (its process exited, it idled out, its client's ``DELETE``) gets an
      event stream that ends without its answer, or one left unfinished: it gets ``unanswered``'s error for its
      transport session (its conversation's end, or the gateway's stop: ``STOPPING``) instead (:class:`_Answered`);
    - a call the stop cuts (a 2026-07-28 one too) is told that it may have run (``Table.cut``), in its stream, or as
      its JSON answer, with its id: never the drain's 503 with ``Retry-After``, which would have it sent again;
    - a request that comes once the drain takes no new one (``REFUSING``) is refused here, as the table would refuse
      it, but as 503 with ``Retry-After``, which a client sends again: the SDK's transport would answer it in an
      event stream, whose 200 has started before the refusal is known.

    It stands where the SDK's transport stood, under the sessions (:func:`_under_sessions`), and reads no body: a
    request's id is the one the sessions parsed (:data:`REQUEST_ID`, set for a request alone). What reaches it
    without one (a notification, a response, a batch, the sessions' probe) is the transport's, untouched. A
    2026-07-28 request has no transport session (its ``Mcp-Session-Id``, if any, is no transport session's)."""

    def __init__(self, app: ASGIApp, children: Table) -> None:
        self.app = app
        self.children = children
        # (transport session id, its principal as the SDK's transport compares it, request id as the SDK keys it)
        self.in_flight: set[tuple[bytes, tuple[object, ...], str]] = set()

    @property
    def session_manager(self) -> object:
        """The transport's: the sessions, looking for it, find this layer in its place and go in front of it."""
        return getattr(self.app, "session_manager", None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or REQUEST_ID not in scope:
            return await self.app(scope, receive, send)
        request_id: str | int | None = scope[REQUEST_ID]
        await self.children.claim(scope)
        if _era(scope) is not Era.LEGACY:  # a 2026-07-28 request: its Mcp-Session-Id, if any, is no transport session's
            return await self._told_if_cut(scope, receive, _Answered(send, lambda: request_id, partial(_cut, scope)))
        transport = header(scope["headers"], MCP_SESSION_ID_HEADER)
        if transport is None or request_id is None:  # an initialize, which opens one; an id no answer can repeat
            return await self.app(scope, receive, send)
        if scope.get(REFUSING, bool)():  # as the table refuses it, but before its answer would start a 200 stream
            return await unavailable(503, RESTARTING, RETRY_AFTER, request_id, "refusing").send(send)
        user = scope.get("user")
        principal = tuple(authorization_context(user).values()) if isinstance(user, AuthenticatedUser) else ()
        key = (transport, principal, str(request_id))
        if key in self.in_flight:
            refusal = jsonrpc.invalid_request(request_id, "a request with this id is in progress in this session")
            return await send_json(send, 200, refusal, b"")
        self.in_flight.add(key)
        # whether the gateway was asked to stop (by its command's uvicorn)
        stopping = scope.get(STOPPING, bool)
        answered = partial(self.children.unanswered, transport, stopping)
        answer = _Answered(send, lambda: request_id, answered, answer_id=request_id)
        try:
            await self._told_if_cut(scope, receive, answer)
        finally:
            self.in_flight.discard(key)

    async def _told_if_cut(self, scope: Scope, receive: Receive, answer: _Answered) -> None:
        """The app's answer; a call the gateway's stop cuts (``STOPPING``) is told it may have run (``Table.cut``), in
        its stream, or in a JSON answer where none has started: never the drain's 503 with ``Retry-After``, which a
        client or a front would send again (a ``write_file`` twice)."""
        try:
            await self.app(scope, receive, answer)
        except anyio.get_cancelled_exc_class():
            if scope.get(STOPPING, bool)():
                await answer.end(cut=True)
            raise
        else:
            await answer.end()


def _under_sessions(app: Starlette, children: Table) -> Starlette:
    """The SDK's ``app`` with :class:`_TransportRequests` in front of its transport, on the transport's route: the
    sessions, placed at that endpoint once they are built, go in front of it (it looks like the transport), so that
    it reads what they parsed instead of the body."""
    routes = [route for route in app.routes if isinstance(route, Route) and is_transport(route.app)]
    if not routes:  # the SDK's app changed its shape: no request would be guarded
        raise TypeError(f"the mcp SDK's app has no transport route to guard: {app.routes!r}")
    for route in routes:
        route.app = _TransportRequests(route.app, children)
    return app


class _Answered:
    """A request's ``send`` that reads its event stream for its answer (the one response a request's stream carries):
    a stream that ends without it, or that the app leaves unfinished, ends with ``unanswered``'s error as its last
    event (one cut inside an event ends as it is), with the request's id (``request_id``, read only then). Any other
    answer passes as it is."""

    def __init__(
        self,
        send: Send,
        request_id: Callable[[], str | int | None],
        unanswered: Callable[[], MCPError | None],
        *,
        answer_id: str | int | None = None,
    ) -> None:
        self._send = send
        self.request_id = request_id
        self.unanswered = unanswered
        self.answer_id = (
            answer_id  # the id its answer has, where two requests' streams could cross (2025); else its one response
        )
        self.events: SSERewriter | None = None  # reads the answer's events, once it starts as a stream
        self.answered = self.started = self.ended = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            kind = header(message.get("headers", ()), b"content-type") or b""
            if kind.startswith(b"text/event-stream"):
                self.events = SSERewriter(self._read)
        elif message["type"] == "http.response.body" and self.events is not None:
            body = message.get("body", b"")
            self.events.feed(body)
            if not message.get("more_body", False):
                self.ended = True
                message = {**message, "body": body + self._last(self.events)}
        await self._send(message)

    async def end(self, *, cut: bool = False) -> None:
        """Once the app has returned, or was ``cut``: the end of a stream it left unfinished; a cut one's answer in
        JSON where none had started."""
        if cut and not self.started and (error := self.unanswered()) is not None:
            if (request_id := self.request_id()) is not None:
                told = jsonrpc.error(request_id, error.error.code, error.error.message, error.error.data)
                await send_json(self._send, 200, told, b"")
        elif self.events is not None and not self.ended:
            await self._send({"type": "http.response.body", "body": self._last(self.events), "more_body": False})

    def _read(self, data: str) -> None:
        answer = jsonrpc.loads(data, answer=True)
        if jsonrpc.is_response(answer) and (self.answer_id is None or answer["id"] == self.answer_id):
            self.answered = True

    def _last(self, events: SSERewriter) -> bytes:
        """The stream's last event: the error, unless it was answered or is cut inside an event."""
        if self.answered or events.flush() or (unanswered := self.unanswered()) is None:
            return b""
        if (request_id := self.request_id()) is None:
            return b""
        error = unanswered.error
        return sse_event(jsonrpc.error(request_id, error.code, error.message, error.data))


def _cut(scope: Scope) -> MCPError | None:
    """What a 2026-07-28 call left unanswered is told: that the stop cut it, once the gateway stops (``STOPPING``);
    else nothing (its stream ends as the app ended it)."""
    return cut() if scope.get(STOPPING, bool)() else None


def _era(scope: Scope) -> Era:
    return Era.of(header(scope["headers"], MCP_PROTOCOL_VERSION_HEADER))


__all__ = ["stdio_gateway_app"]

"""``mcp-sessions gateway --config FILE``'s app: each server's own app (``stdio_gateway_app`` or ``forwarding_app``,
as for one server) at its path, and what is the gateway's across them.

A request reaches a server's app at the server's path (``/servers/NAME/mcp``, or its ``path``) and under it (``.../
sessions``, a user's own conversations of that server), as it came: the app serves its endpoint there, so that its
sessions are minted at and bound to the path its clients reach (an HTTP server's proxy sends the upstream its own
path: ``Forwarding.path``); a prefix sent percent-encoded is no server's (the rest of the path goes on as it was
sent, for the app's front to judge); its protected-resource metadata (RFC 9728, path-inserted:
``/.well-known/oauth-protected-resource`` and the server's path) as it came, since the server's auth serves it
there. Any other path is a 404 naming where the servers are: nothing reaches a server but at its own path.

The users' sign-ins (``auth._oauth``: a server's ``upstream-token = "oauth"``, its ``oauth:`` variables, its
``id-jag-subject = "id_token"``) are served once, at the gateway's base, where each server's callback is: a sign-in
URL (``/oauth/authorize/ID``) reaches the server whose sign-in made it, a callback (``/oauth/callback``, or an
authorization server's own ``/oauth/callback/ID``) the one
whose sign-in holds its ``state`` (neither: the first server that signs anyone in, whose page says the link is
unknown), the Client ID Metadata Document (``/oauth/client.json``) the first that serves one (one callback: one
document); ``/oauth/grants`` is the user's grants at every server's sign-ins, each asked as a request of its own
(its auth decides), listed (each with its ``server``) or revoked. Each server's grants are its sign-ins' (per user,
authorization server and resource, in the store that server's sessions use); a reload that keeps a server keeps its
sign-ins under way, and one that replaces it keeps its grants in the store, not the sign-ins its old app began.

Across the servers: ``GET /sessions`` lists the caller's conversations of every stdio server that verifies her token
(each with its ``server``), ``DELETE /sessions/DIGEST`` ends the one of hers with that digest, wherever it is (what
``mcp-sessions sessions`` does, given the gateway's base URL), as does a ``DELETE`` to a stdio server's own
``.../sessions/DIGEST`` (``--end`` given a server's URL: the conversation ended is the caller's, wherever the
listing shows it); ``GET /status`` on the operator's port or socket is
every server's view in one, and ``/status/grants`` there every user's grants at every server's sign-ins (each with
its ``server``), or one user's revoked. Each server is asked as a request of its own (its auth, its own
audience's, decides), its answer read whole, bounded (:data:`ANSWER_LIMIT`).

The lifespan starts the servers' apps one after the other, in the file's order, and stops them in the reverse: a
server that does not start is said in one line naming it (``StartupFailed``), the ones started stopped. What a
server's app does, it does in a context that names it (:data:`SERVING`), so that the gateway's log lines and its
processes' (``process 3f2a...: ...``) say whose they are (``_logs``).

A reload (:meth:`Servers.replace`, on SIGHUP) serves other routes in place of some, the others' apps untouched (their
processes, uids and conversations go on): each server that goes (removed, or replaced) is drained as a stop drains the
gateway, alone: a request to it is answered 503 with ``Retry-After`` (``-32014``: a client sends it again, and reaches
the server's new app), its calls in flight may end, for the drain's bound at most, and those past it are told that
they may have run (``_drain.cut``), its streams ended; then its app is stopped (every process of it ended, its uids
given back to the gateway's pool) before any app that comes starts. Removing and installing a server's tables (``gone``
and ``coming``: ``nft``, helpers) runs on a worker thread: the servers that go on are served meanwhile."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
from starlette.datastructures import QueryParams
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._asgi import send_json
from ._config import GatewayConfig, Served, StdioProcesses
from ._drain import REFUSED, cut, is_call
from ._file import SERVERS_PATH
from ._front import StartupFailed, startup_failure
from ._logs import SERVING
from ._operator import GRANTS_STATUS_PATH
from .auth._oauth import SignIn
from .auth._sign_ins import AUTHORIZE_PATH, CALLBACK_PATH, CLIENT_PATH, GRANTS_PATH, is_sign_in

if TYPE_CHECKING:
    from .sealed._sandbox import Sandbox

logger = logging.getLogger("mcp_sessions.gateway")

METADATA: Final = "/.well-known/oauth-protected-resource"
STATUS: Final = "/status"
ANSWER_LIMIT: Final = 4 << 20
"""The most a server's answer to a view across the servers may hold (bytes): its conversations', or its processes'."""


@dataclass(frozen=True)
class Route:
    """A server's app, which serves its endpoint at ``served.path``; ``sandbox``, what its processes run in (built
    from its policy with the app, closed once the app has stopped), which a reload that keeps the route keeps."""

    served: Served
    app: ASGIApp
    sandbox: Sandbox | None = None

    @property
    def stdio(self) -> bool:
        return isinstance(self.served.config.serves, StdioProcesses)


@dataclass(eq=False)
class _Live:
    """A server's app while it serves: its requests (each's cancel scope, and whether it is a call rather than a
    stream), and its stop."""

    route: Route
    requests: dict[anyio.CancelScope, bool] = field(default_factory=dict)
    stop: anyio.Event = field(default_factory=anyio.Event)
    stopped: anyio.Event = field(default_factory=anyio.Event)
    quiet: anyio.Event = field(default_factory=anyio.Event)  # no call in flight, once it goes

    def calls(self) -> int:
        return sum(self.requests.values())


class Servers:
    """The servers' apps, each at its path (see the module)."""

    def __init__(self, routes: Sequence[Route]) -> None:
        self._route(routes)
        self._live: dict[str, _Live] = {}  # by name, while its app serves
        self._going: set[str] = set()  # the servers a reload drains: a request to one is refused
        self._tasks: anyio.abc.TaskGroup | None = None  # the lifespan's, while the gateway serves
        self._scope: Scope = {"type": "lifespan"}

    def _route(self, routes: Sequence[Route]) -> None:
        self.routes = tuple(routes)
        self.metadata = {METADATA + route.served.path: route for route in self.routes}
        listed = ", ".join(route.served.path for route in self.routes)
        self.nowhere = {"error": f"no server here: this gateway serves {listed}"}
        signing = ((route, sign_ins(route.served.config)) for route in self.routes)
        self.signing_in = tuple((route, each) for route, each in signing if each)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return await self._lifespan(scope, receive, send)
        if scope["type"] not in ("http", "websocket"):
            return None
        path = scope["path"]
        raw = scope.get("raw_path") or path.encode()
        for route in self.routes:
            served = route.served.path
            # its path as sent, too: the rest of the raw path is what the app's front judges, never re-encoded here
            if (path == served or path.startswith(served + "/")) and raw.startswith(served.encode()):
                ending = f"{served}/sessions/"
                if route.stdio and scope["type"] == "http" and scope["method"] == "DELETE" and path.startswith(ending):
                    # the caller's conversation wherever it is, as the gateway's listing shows them together
                    return await self._conversations(scope, send, path[len(ending) :])
                SERVING.set(route.served.name)  # the request's own context
                return await self._served(route, scope, receive, send)
        if (metadata := self.metadata.get(path)) is not None:
            SERVING.set(metadata.served.name)
            return await metadata.app(scope, receive, send)
        if scope["type"] != "http":
            return await send({"type": "websocket.close", "code": 1008})
        if self.signing_in and (path == CLIENT_PATH or is_sign_in(path)):
            route = self._signing(scope, path)
            SERVING.set(route.served.name)
            return await self._served(route, scope, receive, send)
        if self.signing_in and path in (GRANTS_PATH, GRANTS_STATUS_PATH):
            return await self._grants(scope, send, path)
        if path == SERVERS_PATH or path.startswith(SERVERS_PATH + "/"):
            return await self._conversations(scope, send, path[len(SERVERS_PATH) + 1 :])
        if path == STATUS:
            return await self._status(scope, send)
        await send_json(send, 404, self.nowhere, b"")

    async def _served(self, route: Route, scope: Scope, receive: Receive, send: Send) -> None:
        """A request to ``route``'s app: refused while a reload drains its server, counted while it serves, and
        told as a stop tells it if the drain's bound cuts it (see the module)."""
        name = route.served.name
        if name in self._going:
            return await REFUSED.send(send)
        live = self._live.get(name)
        if live is None or live.route is not route or scope["type"] != "http":  # no lifespan: called directly
            return await route.app(scope, receive, send)
        call = is_call(scope)
        responding = _Noting(send)
        with anyio.CancelScope() as cutting:
            live.requests[cutting] = call
            try:
                await route.app(scope, receive, responding)
            finally:
                del live.requests[cutting]
                if name in self._going and not live.calls():
                    live.quiet.set()
        if not cutting.cancelled_caught:
            return None
        return await cut(send, call=call, started=responding.started, ended=responding.ended)

    async def replace(
        self, routes: Sequence[Route], within: float, gone: Callable[[Route], None], coming: Callable[[Route], None]
    ) -> list[str]:
        """Serve ``routes`` (in their order) in place of ``routes`` now: a route that is in both (the same object)
        goes on untouched; every other that is served now is drained (for ``within`` seconds at most) and stopped,
        and ``gone`` told of it (its tables removed); then each new one is told to ``coming`` (its tables
        installed) and started. Those that did not start (each said in one line), by name; the routes are those
        that serve."""
        new = {id(route) for route in routes}
        going = [self._live[r.served.name] for r in self.routes if id(r) not in new and r.served.name in self._live]
        self._going.update(live.route.served.name for live in going)
        if going:
            logger.info(
                "mcp-sessions gateway: reload: draining %s: a request to it is refused (503, Retry-After); %d call(s) "
                "in flight may end for %g s",
                ", ".join(live.route.served.name for live in going),
                sum(live.calls() for live in going),
                within,
            )
        for live in going:
            if not live.calls():
                live.quiet.set()
        with anyio.move_on_after(within):
            for live in going:
                await live.quiet.wait()
        for live in going:  # the calls past the bound told so, the streams ended
            for request in live.requests:
                request.cancel()
        failed = []
        try:
            for live in reversed(going):
                await self._stop(live)
                await anyio.to_thread.run_sync(gone, live.route)
            old = {id(route) for route in self.routes}
            for route in routes:
                if id(route) in old:
                    continue
                try:
                    await anyio.to_thread.run_sync(coming, route)
                    await self._start(route)
                except Exception as exc:  # said as at startup, the others served
                    failed.append(route.served.name)
                    logger.error("mcp-sessions gateway: reload: %s", startup_failure(exc) or exc)
                    await anyio.to_thread.run_sync(gone, route)
        finally:
            serving = [route for route in routes if getattr(self._live.get(route.served.name), "route", None) is route]
            self._route(serving)
            self._going.clear()
        return failed

    def _signing(self, scope: Scope, path: str) -> Route:
        """The server whose sign-in a sign-in's route is for (see the module): the one that made the URL, holds the
        callback's ``state`` or serves the document; else the first that signs anyone in, which says so."""
        if path.startswith(CALLBACK_PATH):
            state = QueryParams(scope.get("query_string", b"").decode("latin-1")).get("state", "")
            held = (route for route, each in self.signing_in if any(one.holds(state=state) for one in each))
        elif path == CLIENT_PATH:
            held = (route for route, each in self.signing_in if any(one.document is not None for one in each))
        else:
            one_time = path.removeprefix(AUTHORIZE_PATH)
            held = (route for route, each in self.signing_in if any(one.holds(sign_in=one_time) for one in each))
        return next(held, self.signing_in[0][0])

    async def _grants(self, scope: Scope, send: Send, path: str) -> None:
        """The user's grants at every server's sign-ins (``path`` :data:`GRANTS_PATH`), or every user's on the
        operator's listener (:data:`GRANTS_STATUS_PATH`): each server's answer to the request (its auth, or its
        status listener, decides), its ``grants`` listed each with its ``server``, or its ``revoked`` servers
        joined; a refusal by every server is the first's, one server's error is the answer."""
        answers = [(route, await _asked(route, scope, path)) for route, _ in self.signing_in]
        taken = [(route, answer) for route, answer in answers if answer.status not in (401, 403)]
        if not taken:  # no server took her token: the first's refusal, its WWW-Authenticate with it
            return await answers[0][1].send(send)
        if (failed := next((answer for _, answer in taken if answer.status != 200), None)) is not None:
            return await failed.send(send)
        if scope["method"] == "DELETE":
            gone = [(route.served.name, each) for route, answer in taken for each in answer.json().get("revoked", [])]
            revoked = [{**each, "server": name} for name, each in gone]  # each a grant at a server: this one's
            return await send_json(send, 200, {"revoked": revoked}, b"")
        listed = [(route.served.name, answer.json().get("grants", [])) for route, answer in taken]
        grants = [{**grant, "server": name} for name, each in listed for grant in each]
        await send_json(send, 200, {"grants": grants}, b"")

    async def _conversations(self, scope: Scope, send: Send, digest: str) -> None:
        """A user's own conversations across the stdio servers whose auth takes her token, or the one of hers with
        ``digest`` (see the module)."""
        routes = [route for route in self.routes if route.stdio and route.served.config.auth is not None]
        if not routes:
            return await send_json(
                send, 404, {"error": "no server here verifies who asks: no one's own conversations"}, b""
            )
        answers = []
        for route in routes:
            answer = await _asked(route, scope, f"{route.served.path}/sessions" + (f"/{digest}" if digest else ""))
            if scope["method"] == "DELETE" and answer.status == 200:
                return await send_json(send, 200, {**answer.json(), "server": route.served.name}, b"")
            answers.append((route, answer))
        taken = [(route, answer) for route, answer in answers if answer.status not in (401, 403)]
        if not taken:  # no server took her token: the first's refusal, its WWW-Authenticate with it
            return await answers[0][1].send(send)
        if scope["method"] != "GET" or digest:
            return await taken[0][1].send(send)
        conversations = [
            {**conversation, "server": route.served.name}
            for route, answer in taken
            if answer.status == 200
            for conversation in answer.json().get("conversations", [])
        ]
        await send_json(send, 200, {"conversations": conversations}, b"")

    async def _status(self, scope: Scope, send: Send) -> None:
        """The operator's view, every stdio server's in one: their processes and users, each with its ``server``,
        their processes summed, and each one's count against its own limit under ``servers``."""
        answers = [(route, await _asked(route, scope, STATUS)) for route in self.routes if route.stdio]
        if not answers:
            return await send_json(send, 404, {"error": "no stdio server here: no processes to show"}, b"")
        if any(answer.status != 200 for _, answer in answers):  # a refusal (its port, its Host): the first's
            return await next(answer for _, answer in answers if answer.status != 200).send(send)
        views = [(route.served.name, answer.json()) for route, answer in answers]
        ended: Counter[str] = Counter()
        for _, view in views:
            ended.update(view.get("ended", {}))
        merged: dict[str, Any] = {
            "processes": [{**each, "server": name} for name, view in views for each in view.get("processes", [])],
            "users": [{**each, "server": name} for name, view in views for each in view.get("users", [])],
            # each server's limit is its own (servers): no sum of them bounds anything
            "total": {"processes": sum(view.get("total", {}).get("processes", 0) for _, view in views)},
            "ended": dict(ended),
            "servers": {name: {"total": view.get("total", {})} for name, view in views},
        }
        if "keys" in views[0][1]:
            merged["keys"] = views[0][1]["keys"]
        await send_json(send, 200, merged, b"")

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Every server's app started, in order; stopped in the reverse once the gateway stops."""
        await receive()  # lifespan.startup
        try:
            async with anyio.create_task_group() as tasks:
                self._tasks = tasks
                self._scope = scope
                try:
                    for route in self.routes:
                        await self._start(route)
                    await send({"type": "lifespan.startup.complete"})
                    await receive()  # lifespan.shutdown
                finally:
                    self._tasks = None  # no reload from now on
                    for live in reversed(list(self._live.values())):
                        await self._stop(live)
        except BaseException as exc:
            if (found := startup_failure(exc)) is not None:
                await send({"type": "lifespan.startup.failed", "message": str(found)})
            raise
        await send({"type": "lifespan.shutdown.complete"})

    async def _start(self, route: Route) -> None:
        """``route``'s app started (its lifespan run in a task of the lifespan's), served from now on."""
        if self._tasks is None:
            raise StartupFailed(f"servers.{route.served.name}: the gateway stops")
        await self._tasks.start(self._serve, route)

    async def _serve(self, route: Route, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        live = _Live(route)
        try:
            async with _running(route, self._scope):
                self._live[route.served.name] = live
                task_status.started()
                await live.stop.wait()
        finally:
            if self._live.get(route.served.name) is live:
                del self._live[route.served.name]
            live.stopped.set()

    @staticmethod
    async def _stop(live: _Live) -> None:
        """``live``'s app stopped (its lifespan ended: every process of it ended)."""
        live.stop.set()
        await live.stopped.wait()


@asynccontextmanager
async def _running(route: Route, scope: Scope) -> AsyncIterator[None]:
    """``route``'s app's lifespan, started, until the context ends; a failure to start said as its server's."""
    to_app, from_gateway = anyio.create_memory_object_stream[Message](2)
    said: list[Message] = []
    started = anyio.Event()
    stopped = anyio.Event()
    failure: list[BaseException] = []

    async def sent(message: Message) -> None:
        said.append(message)
        (started if message["type"].startswith("lifespan.startup.") else stopped).set()

    async def run() -> None:
        SERVING.set(route.served.name)  # this task's context, and the tasks its app starts
        try:
            await route.app({**scope, "state": {}}, from_gateway.receive, sent)
        except Exception as exc:
            if started.is_set() and said[-1]["type"] == "lifespan.startup.complete":
                raise
            found = startup_failure(exc)
            failure.append(StartupFailed(f"servers.{route.served.name}: {found}") if found is not None else exc)
        finally:
            started.set()
            stopped.set()

    async with anyio.create_task_group() as tasks, to_app, from_gateway:
        tasks.start_soon(run)
        await to_app.send({"type": "lifespan.startup"})
        await started.wait()
        if not said or said[-1]["type"] != "lifespan.startup.complete":
            await stopped.wait()  # its task's end, and what it raised
            raise failure[0] if failure else StartupFailed(f"servers.{route.served.name}: it did not start")
        try:
            yield
        finally:
            await to_app.send({"type": "lifespan.shutdown"})
            await stopped.wait()


def sign_ins(config: GatewayConfig) -> tuple[SignIn, ...]:
    """A server's sign-ins: a stdio server's ID-token login and ``oauth:`` variables' grants, an HTTP server's
    ``upstream-token = "oauth"`` grants or its ID-JAG's ID-token login; none for most."""
    if isinstance(config.serves, StdioProcesses):
        subject = () if config.id_tokens is None else (config.id_tokens,)
        return (*subject, *(config.process_grants or {}).values())
    token = config.serves.upstream_token
    if token is None:
        return ()
    found = token if token.mode == "oauth" else token.subject
    return (found,) if isinstance(found, SignIn) else ()


class _Noting:
    """A request's ``send``, which notes whether its answer has started and ended."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = self.ended = False

    async def __call__(self, message: Message) -> None:
        await self._send(message)
        self.started = self.started or message["type"] == "http.response.start"
        self.ended = self.ended or (message["type"] == "http.response.body" and not message.get("more_body", False))


@dataclass
class _Answer:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def json(self) -> dict[str, Any]:
        try:
            found = json.loads(self.body)
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}

    async def send(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


async def _asked(route: Route, scope: Scope, path: str) -> _Answer:
    """``route``'s app's answer to the request ``scope`` at ``path``, bodiless, read whole up to
    :data:`ANSWER_LIMIT` (a 502 past it)."""
    answer = _Answer(502, [], b"")
    parts: list[bytes] = []
    size = 0

    async def nothing() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def captured(message: Message) -> None:
        nonlocal size
        if message["type"] == "http.response.start":
            answer.status = message["status"]
            answer.headers = [(name, value) for name, value in message.get("headers", []) if name != b"content-length"]
        elif message["type"] == "http.response.body":
            size += len(message.get("body", b""))
            if size <= ANSWER_LIMIT:
                parts.append(message.get("body", b""))

    serving = SERVING.set(route.served.name)
    try:
        await route.app({**scope, "path": path, "raw_path": path.encode()}, nothing, captured)
    finally:
        SERVING.reset(serving)
    if size > ANSWER_LIMIT:
        return _Answer(502, [(b"content-type", b"application/json")], b'{"error": "a server\'s answer was too large"}')
    answer.body = b"".join(parts)
    answer.headers.append((b"content-length", str(len(answer.body)).encode()))
    return answer

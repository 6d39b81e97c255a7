"""``--config``'s app (``_gateway._servers.Servers``), called directly: each server's app reached at its path alone,
its path as it came (the app serves its endpoint there; a prefix sent percent-encoded is no server's), its metadata
as it came; the servers
started in the file's order and stopped in the reverse, and one that does not start said by its name, the ones
started stopped; no egress table left by a start that one refused; and a reload whose server's sandbox cannot be
made changes nothing, the sandboxes made for it closed."""

from __future__ import annotations

import argparse
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest
from starlette.types import Message, Receive, Scope, Send

from _waits import until_awaited
from mcp_sessions import SessionsConfig
from mcp_sessions._gateway import _cli
from mcp_sessions._gateway._cli import _install
from mcp_sessions._gateway._config import Forwarding, GatewayConfig, Served
from mcp_sessions._gateway._front import StartupFailed, startup_failure
from mcp_sessions._gateway._servers import Route, Servers
from mcp_sessions._gateway.sealed._network import NetworkError
from mcp_sessions._gateway.sealed._sandbox import Sandbox

pytestmark = pytest.mark.anyio


class Recording:
    """A server's app: the scopes it got, and its lifespan's steps in ``steps`` (a start that fails, if told)."""

    def __init__(self, name: str, steps: list[str], *, fails: bool = False) -> None:
        self.name, self.steps, self.fails = name, steps, fails
        self.scopes: list[Scope] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await receive()
            if self.fails:
                self.steps.append(f"{self.name} failed")
                raise StartupFailed("its first process ended")
            self.steps.append(f"{self.name} started")
            await send({"type": "lifespan.startup.complete"})
            await receive()
            self.steps.append(f"{self.name} stopped")
            return await send({"type": "lifespan.shutdown.complete"})
        self.scopes.append(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": self.name.encode()})


def routed(*apps: tuple[str, str, Recording]) -> Servers:
    sessions = SessionsConfig.from_env(environ={"MCP_SESSIONS_SECRET": "x" * 32})
    config = GatewayConfig(serves=Forwarding(("http://127.0.0.1:1/mcp",)), sessions=sessions)
    return Servers([Route(Served(name=name, path=path, config=config), app) for name, path, app in apps])


async def asked(app: Servers, path: str, raw: bytes | None = None) -> tuple[int, bytes]:
    scope = {"type": "http", "method": "POST", "path": path, "raw_path": raw or path.encode(), "headers": []}
    said: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        said.append(message)

    await app(scope, receive, send)
    return said[0]["status"], b"".join(message.get("body", b"") for message in said[1:])


@pytest.mark.parametrize(
    ("path", "raw", "reached"),
    [
        ("/servers/files/mcp", None, "files"),
        ("/servers/files/mcp/sessions", None, "files"),
        ("/memory", None, "memory"),
        ("/memory/a/b", b"/memory/a%2Fb", "memory"),  # as sent, for its front to judge
        ("/servers/files/mcp", b"/servers/fil%65s/mcp", None),  # an encoded prefix: no server's
        ("/.well-known/oauth-protected-resource/memory", None, "memory"),
        ("/.well-known/oauth-protected-resource/servers/files/mcp", None, "files"),
        ("/servers/files/mcpx", None, None),
        ("/servers/files", None, None),
        ("/mcp", None, None),
        ("/.well-known/oauth-protected-resource", None, None),
    ],
)
async def test_a_server_is_reached_at_its_path_alone(path: str, raw: bytes | None, reached: str | None) -> None:
    steps: list[str] = []
    files, memory = Recording("files", steps), Recording("memory", steps)
    app = routed(("files", "/servers/files/mcp", files), ("memory", "/memory", memory))
    status, body = await asked(app, path, raw)
    if reached is None:
        assert status == 404
        assert b"this gateway serves /servers/files/mcp, /memory" in body
        return
    assert (status, body) == (200, reached.encode())
    [scope] = (files if reached == "files" else memory).scopes
    assert (scope["path"], scope["raw_path"]) == (path, raw or path.encode())  # as it came: the app serves it there


async def test_the_servers_start_in_order_and_stop_in_reverse() -> None:
    steps: list[str] = []
    app = routed(*((name, f"/{name}", Recording(name, steps)) for name in ("a", "b", "c")))
    said = await _lifespan(app, stop=True)
    assert said == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert steps == ["a started", "b started", "c started", "c stopped", "b stopped", "a stopped"]


async def test_a_server_that_does_not_start_is_named_and_those_started_stopped() -> None:
    steps: list[str] = []
    a, b, c = Recording("a", steps), Recording("b", steps, fails=True), Recording("c", steps)
    app = routed(("a", "/a", a), ("b", "/b", b), ("c", "/c", c))
    with pytest.raises(BaseException) as raised:
        await _lifespan(app, stop=False)
    failure = startup_failure(raised.value)
    assert str(failure) == "servers.b: its first process ended"
    assert steps == ["a started", "b failed", "a stopped"]


async def _lifespan(app: Servers, *, stop: bool) -> list[Any]:
    """``app``'s lifespan, as uvicorn drives it: startup, then (``stop``) shutdown; the message types it sent."""
    asked = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    said: list[Any] = []

    async def receive() -> Message:
        if not stop and len(asked) == 1:
            await anyio.sleep_forever()
        return asked.pop(0)

    async def send(message: Message) -> None:
        said.append(message["type"])

    with anyio.fail_after(10):
        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
    return said


class Table:
    """A server's egress table, its install refused if told."""

    def __init__(self, said: list[str], name: str, *, refused: bool = False) -> None:
        self.said, self.name, self.refused = said, name, refused

    def install(self) -> None:
        if self.refused:
            raise NetworkError(f"--process-network egress: nft refused {self.name}")
        self.said.append(f"{self.name} installed")

    def remove(self) -> None:
        self.said.append(f"{self.name} removed")


def test_a_table_refused_at_startup_removes_the_servers_tables_installed_before_it() -> None:
    """No half-built gateway: a file whose second server's egress table nft refuses leaves not the first's."""
    said: list[str] = []
    tables = [Table(said, "a"), Table(said, "b", refused=True), Table(said, "c")]
    sandboxes = [cast("Sandbox", SimpleNamespace(install=table.install, egress=table)) for table in tables]
    with pytest.raises(NetworkError, match="nft refused b"):
        _install(sandboxes)
    assert said == ["a installed", "a removed"]


async def test_a_reload_stops_the_servers_that_go_before_those_that_come_start_and_leaves_the_others() -> None:
    """``Servers.replace``: b (replaced) and d (removed) stopped, their tables released, before b's new app and c
    start (a part of process-uids is never two apps' at once); a neither stopped nor started, reached as before."""
    steps: list[str] = []
    a, b, d = Recording("a", steps), Recording("b", steps), Recording("d", steps)
    app = routed(("a", "/a", a), ("b", "/b", b), ("d", "/d", d))
    new_b, c = Recording("b2", steps), Recording("c", steps)
    stopping = anyio.Event()
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

    async def receive() -> Message:
        if len(messages) == 1:
            await stopping.wait()
        return messages.pop(0)

    async def send(message: Message) -> None:
        pass

    lifespan = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(app, lifespan, receive, send)
            await until_awaited(lambda: len(steps) == 3, "the servers to start")
            config = app.routes[0].served.config
            routes = [
                app.routes[0],
                Route(Served(name="b", path="/b", config=config), new_b),
                Route(Served(name="c", path="/c", config=config), c),
            ]
            told: list[str] = []
            failed = await app.replace(
                routes,
                1,
                lambda route: told.append(f"{route.served.name} released"),
                lambda route: told.append(f"{route.served.name} readied"),
            )
            assert failed == []
            assert steps[3:] == ["d stopped", "b stopped", "b2 started", "c started"]
            assert told == ["d released", "b released", "b readied", "c readied"]
            assert [await asked_of(app, path) for path in ("/a", "/b", "/c")] == [b"a", b"b2", b"c"]
            assert (await asked(app, "/d"))[0] == 404
            stopping.set()
    assert steps[-3:] == ["c stopped", "b2 stopped", "a stopped"]


async def asked_of(app: Servers, path: str) -> bytes:
    status, body = await asked(app, path)
    assert status == 200
    return body


async def test_a_server_a_reload_starts_that_does_not_start_is_said_and_the_others_serve_on() -> None:
    steps: list[str] = []
    app = routed(("a", "/a", Recording("a", steps)))
    stopping = anyio.Event()
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    said: list[str] = []

    async def receive() -> Message:
        if len(messages) == 1:
            await stopping.wait()
        return messages.pop(0)

    async def send(message: Message) -> None:
        said.append(message["type"])

    lifespan = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(app, lifespan, receive, send)
            await until_awaited(lambda: steps == ["a started"], "a to start")
            config = app.routes[0].served.config
            broken = Route(Served(name="b", path="/b", config=config), Recording("b", steps, fails=True))
            released: list[str] = []
            failed = await app.replace(
                [app.routes[0], broken], 1, lambda route: released.append(route.served.name), lambda route: None
            )
            assert (failed, released) == (["b"], ["b"])
            assert await asked_of(app, "/a") == b"a"
            assert (await asked(app, "/b"))[0] == 404
            stopping.set()
    assert steps == ["a started", "b failed", "a stopped"]
    assert said == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


async def test_a_reload_whose_server_s_sandbox_cannot_be_made_changes_nothing_and_closes_those_made(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Each server's sandbox is made from its policy as its route is built (its uids' records, its proxy's
    authority and socket), after the file is read: one that cannot be made refuses the reload in one line, before
    any server is drained, and the sandboxes made for the others meanwhile are closed; the servers serve on."""
    steps: list[str] = []
    app = routed(("a", "/a", Recording("a", steps)))
    kept = app.routes[0]
    closed: list[str] = []

    def route(served: Served) -> Route:
        if served.name == "c":
            raise ValueError("servers.c: --process-state /tmp: it must be the gateway's user's alone to write")
        made = SimpleNamespace(close=lambda: closed.append(served.name))
        return Route(served, Recording(served.name, steps), cast("Sandbox", made))

    monkeypatch.setattr(_cli, "_route", route)
    config = replace(kept.served.config, servers=(kept.served,))
    reload = _cli.Reload(argparse.Namespace(config="servers.toml"), {}, config, app)
    new = [replace(kept.served, name=name, path=f"/{name}") for name in ("b", "c")]
    monkeypatch.setattr(reload, "_read", lambda: [kept.served, *new])
    assert await reload() is None
    assert closed == ["b"]
    assert app.routes == (kept,) and reload.config is config and steps == []
    [said] = [record.getMessage() for record in caplog.records if "reload" in record.getMessage()]
    assert said == (
        "mcp-sessions gateway: reload refused, nothing changed: servers.c: --process-state /tmp: it must be the "
        "gateway's user's alone to write"
    )

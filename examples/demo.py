"""Watch data-layer sessions work: a scripted conversation with the quickstart server over raw HTTP.

    make demo                              starts examples/quickstart.py in-process and talks to it
    python examples/demo.py --json         the same, with the server in JSON response mode
    python examples/demo.py --url URL      talk to a quickstart server that is already running
                                           (URL of its MCP endpoint, e.g. http://127.0.0.1:8000/mcp)

Every request is a plain HTTP POST in the MCP 2026-07-28 envelope, so what is printed is exactly what a
client sends and receives. The exit status is 0 when every step gave the expected answer, 1 when one did
not, and 2 when no server could be reached or started.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import re
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx

PROTOCOL_VERSION = "2026-07-28"
SESSION_META_KEY = "io.modelcontextprotocol/session"
SESSIONS_EXTENSION = "io.modelcontextprotocol/sessions"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}
SESSION_NOT_FOUND = -32043
SESSION_REQUIRED = -32044
STEPS = 11


class StepFailed(Exception):
    """A step of the conversation did not give the answer the demo expects."""


class ServerUnavailable(Exception):
    """No server could be started or reached."""


@dataclass
class Exchange:
    """One POST and what came back: the JSON-RPC response and any notifications streamed before it."""

    status: int
    content_type: str
    response: dict[str, Any] | None
    notifications: list[dict[str, Any]] = field(default_factory=list)

    @property
    def result(self) -> dict[str, Any]:
        if self.response is None or not isinstance(self.response.get("result"), dict):
            raise StepFailed(f"expected a result, got HTTP {self.status} {self.response!r}")
        result: dict[str, Any] = self.response["result"]
        return result

    @property
    def error(self) -> dict[str, Any]:
        if self.response is None or not isinstance(self.response.get("error"), dict):
            raise StepFailed(f"expected a JSON-RPC error, got HTTP {self.status} {self.response!r}")
        error: dict[str, Any] = self.response["error"]
        return error

    @property
    def echo(self) -> dict[str, Any] | None:
        """The session metadata the server echoed in ``result._meta``."""
        meta = self.result.get("_meta")
        echo = meta.get(SESSION_META_KEY) if isinstance(meta, dict) else None
        return echo if isinstance(echo, dict) else None

    def session_id(self) -> str:
        """The ``sessionId`` of a ``sessions/create`` result."""
        session = self.result.get("session")
        token = session.get("sessionId") if isinstance(session, dict) else None
        if not isinstance(token, str):
            raise StepFailed(f"sessions/create gave no sessionId: {self.response!r}")
        return token

    def tool_value(self) -> Any:
        result = self.result
        if result.get("isError"):
            raise StepFailed(f"the tool failed: {result.get('content')!r}")
        structured = result.get("structuredContent")
        if isinstance(structured, dict) and "result" in structured:
            return structured["result"]
        return result["content"][0]["text"]


# -- presentation ----------------------------------------------------------------------------------


_JWT = re.compile(r"eyJ[\w-]*\.[\w-]*\.[\w-]*")


def shorten(token: str) -> str:
    """A session id is a bearer secret: never print it whole."""
    return f"{token[:10]}...{token[-5:]} ({len(token)} chars)"


def _jwt_part(token: str, index: int) -> dict[str, Any]:
    part = token.split(".")[index]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    return decoded


def _redacted(value: Any, names: dict[str, str]) -> Any:
    """``value`` with every JWT-shaped string replaced by its name or shortened."""
    if isinstance(value, str) and value.startswith("eyJ") and value.count(".") == 2:
        return f"<{names[value]}>" if value in names else shorten(value)
    if isinstance(value, dict):
        return {k: _redacted(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v, names) for v in value]
    return value


def _utc(timestamp: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timestamp))


# -- the client ------------------------------------------------------------------------------------


class Conversation:
    """A raw HTTP MCP client for one endpoint that prints what it sends and receives."""

    def __init__(self, client: httpx.Client, url: str, out: TextIO) -> None:
        self.client = client
        self.url = url
        self.out = out
        self.names: dict[str, str] = {}  # tokens, by the name printed instead of them
        self.step = "start"
        self._next_id = 0

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def show(self, value: Any) -> str:
        """``value`` as JSON, with tokens replaced by their names or shortened: never print a token."""
        return json.dumps(_redacted(value, self.names), ensure_ascii=False)

    def post(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: str | None = None,
        state: str | None = None,
        progress_token: str | None = None,
        on_notification: Callable[[dict[str, Any], float], None] | None = None,
    ) -> Exchange:
        self._next_id += 1
        meta: dict[str, Any] = dict(ENVELOPE)
        headers = {
            "Accept": "application/json, text/event-stream",
            "Mcp-Protocol-Version": PROTOCOL_VERSION,
            "Mcp-Method": method,
        }
        params = dict(params or {})
        if method == "tools/call":
            headers["Mcp-Name"] = params["name"]
        shown: dict[str, Any] = {k: v for k, v in params.items() if k != "_meta"}
        if progress_token is not None:
            meta["progressToken"] = progress_token
            shown["_meta"] = {"progressToken": progress_token}
        if session is not None:
            # The session goes in _meta; the header repeats it for load balancers and proxies.
            session_meta = {"sessionId": session}
            if state is not None:
                session_meta["state"] = state
            meta[SESSION_META_KEY] = session_meta
            headers["Mcp-Session-Id"] = session
            shown.setdefault("_meta", {})[SESSION_META_KEY] = session_meta
        params["_meta"] = meta
        body = {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        described = self.show(shown) if shown else "(envelope only)"
        self.say(f"   -> POST {httpx.URL(self.url).path}  {method}  params: {described}")
        if session is not None:
            self.say(f"      and the header Mcp-Session-Id: {self.show(session)[1:-1]}")
        started = time.monotonic()
        try:
            with self.client.stream("POST", self.url, json=body, headers=headers) as response:
                content_type = response.headers.get("content-type", "").split(";")[0]
                exchange = Exchange(response.status_code, content_type, None)
                self.say(f"   <- HTTP {exchange.status} {content_type or '(no content type)'}")
                if content_type == "text/event-stream":
                    for message in _sse_messages(response.iter_lines()):
                        if "method" in message:
                            exchange.notifications.append(message)
                            if on_notification is not None:
                                on_notification(message, time.monotonic() - started)
                        elif message.get("id") == body["id"]:
                            exchange.response = message
                else:
                    raw = response.read()
                    exchange.response = json.loads(raw) if raw else None
        except httpx.HTTPError as exc:
            raise ServerUnavailable(f"{method} to {self.url} failed: {exc}") from None
        except ValueError as exc:
            raise StepFailed(f"{method}: the response is not JSON ({exc})") from None
        return exchange


def _sse_messages(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The JSON-RPC messages of a ``text/event-stream``, each as soon as its event is complete."""
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield json.loads("\n".join(data))
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield json.loads("\n".join(data))


# -- the conversation ------------------------------------------------------------------------------


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise StepFailed(message)


def run_conversation(talk: Conversation, *, streaming: bool | None) -> None:
    """The scripted steps; ``streaming`` says whether progress must arrive as SSE (None: either)."""
    say = talk.say

    def step(number: int, title: str) -> None:
        talk.step = f"step {number} ({title})"
        say()
        say(f"{number:>2}. {title}")

    def ok(text: str) -> None:
        say(f"   ok: {text}")

    step(1, "Does the server support sessions? (server/discover)")
    discover = talk.post("server/discover")
    caps = discover.result.get("capabilities", {})
    extensions = caps.get("extensions", {})
    say(f"      capabilities.sessions = {talk.show(caps.get('sessions'))}")
    say(f'      capabilities.extensions["{SESSIONS_EXTENSION}"] = {talk.show(extensions.get(SESSIONS_EXTENSION))}')
    expect("sessions" in caps, "server/discover does not advertise capabilities.sessions")
    ok("the server advertises data-layer sessions")

    step(2, "Open session A (sessions/create)")
    created = talk.post("sessions/create")
    session_a = created.session_id()
    talk.names[session_a] = "session A token"
    say(f"      session.sessionId = {shorten(session_a)}  (printed as <session A token> from now on)")
    say(f"      session.expiresAt = {created.result['session'].get('expiresAt')}")
    header, claims = _jwt_part(session_a, 0), _jwt_part(session_a, 1)
    say("      The sessionId is a signed JWT (a bearer secret: whoever holds it is in the session).")
    say("      Signed, not encrypted, so its non-secret claims can be read:")
    say(f"        header {json.dumps(header)}")
    say(f"        claims {json.dumps(claims)}")
    say(f"        issued {_utc(claims['iat'])}, absolute expiry {_utc(claims['exp'])}")
    say("      'sid' is the stable id the server keys this session's data, logs and traces by.")
    ok(f"session A is open, sid {claims['sid']}")

    step(3, "count in session A: the counter lives server-side, keyed by the session")
    first = talk.post("tools/call", {"name": "count", "arguments": {}}, session=session_a)
    say(f"      count returned {first.tool_value()}")
    echo = first.echo
    say(f'      result._meta["{SESSION_META_KEY}"] = {talk.show(echo)}')
    expect(first.tool_value() == 1, f"count in a new session should be 1, got {first.tool_value()!r}")
    expect(echo is not None and echo.get("sessionId") == session_a, "the result does not echo session A")
    ok("1, and every result echoes the session (same sessionId, fresh expiresAt)")

    step(4, "count in session A again")
    second = talk.post("tools/call", {"name": "count", "arguments": {}}, session=session_a)
    say(f"      count returned {second.tool_value()}")
    expect(second.tool_value() == 2, f"the second count in session A should be 2, got {second.tool_value()!r}")
    ok("2: the state survived between two independent HTTP requests")

    step(5, "Open session B and count there")
    session_b = talk.post("sessions/create").session_id()
    talk.names[session_b] = "session B token"
    say(f"      session.sessionId = {shorten(session_b)}, sid {_jwt_part(session_b, 1)['sid']}")
    other = talk.post("tools/call", {"name": "count", "arguments": {}}, session=session_b)
    say(f"      count returned {other.tool_value()}")
    expect(other.tool_value() == 1, f"count in session B should start at 1, got {other.tool_value()!r}")
    ok("1: sessions are independent (A is at 2, B at 1)")

    step(6, 'set_mode("focus") in session A: client-held state, signed by the server')
    set_mode = talk.post("tools/call", {"name": "set_mode", "arguments": {"mode": "focus"}}, session=session_a)
    set_mode.tool_value()  # a server without the quickstart's tools fails here, saying so
    echo = set_mode.echo or {}
    state = echo.get("state")
    expect(isinstance(state, str), f"set_mode's result echoes no state: {echo!r}")
    assert isinstance(state, str)
    talk.names[state] = "state token"
    say(f'      result._meta["{SESSION_META_KEY}"] = {talk.show(echo)}')
    say(f"      the state token ({len(state)} chars) is a JWS too; decoded:")
    say(f"        {json.dumps(_jwt_part(state, 1))}")
    say("      The client keeps it and sends it back; the signature binds it to session A, so the")
    say("      client can read it but cannot change it or move it to another session.")
    ok("the server stored nothing: the state travels with the client")

    step(7, "get_mode in session A, sending back the echoed state")
    get_mode = talk.post("tools/call", {"name": "get_mode", "arguments": {}}, session=session_a, state=state)
    say(f"      get_mode returned {get_mode.tool_value()!r}")
    expect(get_mode.tool_value() == "focus", f"get_mode should see 'focus', got {get_mode.tool_value()!r}")
    ok("the tool read the mode from the state the client sent")

    step(8, "countdown(3) in session A: progress notifications stream before the result")

    def show_progress(message: dict[str, Any], elapsed: float) -> None:
        params = message.get("params", {})
        say(
            f"      +{elapsed:.2f}s  event {message.get('method')}: "
            f"{params.get('progress')}/{params.get('total')} {params.get('message', '')}"
        )

    countdown = talk.post(
        "tools/call",
        {"name": "countdown", "arguments": {"n": 3}},
        session=session_a,
        progress_token="countdown-1",
        on_notification=show_progress,
    )
    value = countdown.tool_value()
    echo = countdown.echo
    where = "the final event" if countdown.content_type == "text/event-stream" else "the result"
    say(f"      {where}: countdown returned {value!r}, with the session echo: {echo is not None}")
    expect(value == "done", f"countdown should return 'done', got {value!r}")
    expect(echo is not None and echo.get("sessionId") == session_a, "the streamed result does not echo session A")
    progress = [m for m in countdown.notifications if m.get("method") == "notifications/progress"]
    if countdown.content_type == "text/event-stream":
        expect(len(progress) == 3, f"expected 3 progress events, got {len(progress)}")
        expect(
            all(SESSION_META_KEY not in m.get("params", {}).get("_meta", {}) for m in progress),
            "a notification carries session metadata",
        )
        ok("3 progress events flowed untouched, and only the final event got the session echo")
    else:
        expect(streaming is not True, "the server answered countdown with JSON, expected an SSE stream")
        say("      (JSON response mode: the server sends only the final result, no progress events)")
        ok("the final result carries the session echo")

    step(9, "count without a session: the quickstart requires one for its session tools")
    missing = talk.post("tools/call", {"name": "count", "arguments": {}})
    error = missing.error
    say(f"      error {talk.show(error)}")
    expect(error.get("code") == SESSION_REQUIRED, f"expected {SESSION_REQUIRED} (session required), got {error!r}")
    ok(f"{SESSION_REQUIRED} Session required, answered by the middleware before the tool ran")

    step(10, "Close session A (sessions/delete)")
    deleted = talk.post("sessions/delete", session=session_a)
    say(f"      result {talk.show(deleted.result)}")
    leftover = {k: v for k, v in deleted.result.items() if k not in ("resultType", "_meta")}
    expect(not leftover, f"sessions/delete should answer an empty result, got {deleted.result!r}")
    ok("session A is deleted, and its server-side data with it")

    step(11, "count with the deleted session A")
    gone = talk.post("tools/call", {"name": "count", "arguments": {}}, session=session_a)
    error = gone.error
    say(f"      error {talk.show(error)}")
    say("      (data.sessionId repeats what the client sent, cut to 256 characters)")
    expect(error.get("code") == SESSION_NOT_FOUND, f"expected {SESSION_NOT_FOUND} (session not found), got {error!r}")
    ok(f"{SESSION_NOT_FOUND} Session not found: a client treats it as final and opens a new session")


# -- running it ------------------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    """Keep the SDK's and httpx's INFO lines (MCPServer sets the root level to INFO) off the screen."""
    loggers = [logging.getLogger(name) for name in ("httpx", "mcp", "uvicorn.error")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@contextlib.contextmanager
def serve_in_thread(
    app: Any,
    *,
    timeout: float = 10.0,
    path: str = "/mcp",
    root_path: str = "",
    port: int = 0,
    tls: tuple[str, str] | None = None,
) -> Iterator[str]:
    """Serve ``app`` with a real uvicorn on 127.0.0.1 (``port``, else a free one) in a thread; yields its URL plus
    ``path``: https given ``tls``, the certificate chain's file and its key's.

    The app's lifespan runs; the server stops, bounded in time, when the block
    ends. :class:`ServerUnavailable` if it does not start within ``timeout``.
    """
    import uvicorn

    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only then, and without it
    # every request on a kept-alive connection waits ~40 ms (Nagle + delayed ACK).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    # A keep-alive longer than a client's pause (uvicorn's default is 5 s): uvicorn closing an idle pooled connection
    # just as a client reuses it is a race between uvicorn and the client (httpx raises ReadError), not what a caller
    # of this is about; a busy machine's pauses can reach 5 s.
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=2,
        timeout_keep_alive=120,
        root_path=root_path,
        ssl_certfile=None if tls is None else tls[0],
        ssl_keyfile=None if tls is None else tls[1],
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + timeout
        while not server.started:  # its app's startup (the lifespan) ended, and it listens
            if not thread.is_alive():
                raise ServerUnavailable("the server did not start: its app's startup failed (see the log above)")
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"the server did not start: its app's startup had not ended in {timeout:g} s")
            time.sleep(0.01)
        yield f"{'http' if tls is None else 'https'}://127.0.0.1:{port}{path}"
    finally:
        server.should_exit = True
        thread.join(timeout)
        sock.close()
        if thread.is_alive():
            print(f"warning: the server thread did not stop within {timeout:.0f} s", file=sys.stderr)


@contextlib.contextmanager
def serve_quickstart(*, json_response: bool, timeout: float = 10.0) -> Iterator[str]:
    """Serve the quickstart app (a throwaway secret) in a thread; yields its MCP URL."""
    if __package__ in (None, ""):
        # Run as a script (python examples/demo.py): make the examples package importable.
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from examples.quickstart import build_app

    environ = {"MCP_SESSIONS_SECRET": secrets.token_urlsafe(32)}
    with serve_in_thread(build_app(json_response=json_response, environ=environ), timeout=timeout) as url:
        yield url


def main(argv: list[str] | None = None, *, out: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="demo.py",
        description="A scripted conversation that shows data-layer sessions working, over raw HTTP.",
    )
    parser.add_argument("--json", action="store_true", help="start the server in JSON response mode (no SSE)")
    parser.add_argument(
        "--url",
        help="the MCP endpoint of a running quickstart server (examples/quickstart.py: the demo calls its tools "
        "count, set_mode, get_mode and countdown), instead of starting one",
    )
    args = parser.parse_args(argv)
    out = sys.stdout if out is None else out
    print("mcp-sessions demo: a conversation with the quickstart MCP server (examples/quickstart.py)", file=out)
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_quiet_logs())
            if args.url:
                url, streaming = args.url, None
                print(f"Server: {url} (already running; started by you)", file=out)
                if args.json:
                    print("Note: --json only applies to a server the demo starts; ignored with --url", file=out)
            else:
                url = stack.enter_context(serve_quickstart(json_response=args.json))
                streaming = not args.json
                mode = "JSON responses" if args.json else "SSE responses when a tool streams"
                print(f"Server: started in this process with uvicorn at {url} ({mode})", file=out)
                print(
                    "        signing key: a throwaway MCP_SESSIONS_SECRET generated for this run,\n"
                    "        so these sessions end with the demo",
                    file=out,
                )
            print(
                "\nEach request is a JSON-RPC POST in the MCP 2026-07-28 envelope: headers Mcp-Protocol-Version,\n"
                "Mcp-Method (and Mcp-Name for tools/call), Accept: application/json, text/event-stream, and\n"
                "params._meta with protocolVersion and clientCapabilities. Only the parts about sessions are shown.",
                file=out,
            )
            client = stack.enter_context(httpx.Client(timeout=httpx.Timeout(30.0, connect=5.0)))
            talk = Conversation(client, url, out)
            try:
                run_conversation(talk, streaming=streaming)
            except StepFailed as exc:
                raise StepFailed(f"{talk.step}: {exc}") from None
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                raise StepFailed(f"{talk.step}: a response did not have the expected shape ({exc!r})") from exc
    except StepFailed as exc:
        failure = _JWT.sub(lambda token: shorten(token[0]), str(exc))  # a response quoted in full holds tokens
        print(f"\nFAILED at {failure}", file=out, flush=True)
        print(f"demo failed at {failure}", file=sys.stderr)
        return 1
    except ServerUnavailable as exc:
        print(f"\nFAILED: {exc}", file=out, flush=True)
        print(f"demo failed: {exc}", file=sys.stderr)
        return 2
    print(f"\nAll {STEPS} steps gave the expected answers.", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The tests' stdio MCP server, without the ``mcp`` SDK: ``python -m e2e._plain_stdio``, for the tests whose subject
is the gateway (its process table, lifetimes, limits, what it relays), not the server; it starts in a twentieth of the
CPU time of the SDK's (``_stdio_server``, which asks ``sample`` and ``elicit`` alike, for the tests of what the SDK
takes of its client's answers).

A JSON-RPC message a line: ``initialize`` and ``server/discover`` as the SDK's server answers them (its name and
instructions; it speaks 2026-07-28), ``ping``, ``tools/list``, each ``tools/call`` on a thread of its own (as the SDK
runs a tool that is no coroutine), ``-32601`` for any other method. A tool asks its client as the SDK's server does:
its request, of an id of its own, waits (30 s at most) for the answer the main loop reads; the client's error answer
is the call's. Its tools:

- ``whoami``: its pid and uid, the MCP_SESSION_ID it was given, and the names of its MCP_SESSIONS_* variables;
- ``count``: one more than the last time (this process's memory); ``getenv``: a variable of its ("" for none);
- ``keep``: appends ``line`` to its own file (``<pid>.txt`` in ``STDIO_TEST_FILES``): the file's lines;
- ``complain``: writes ``line`` to stderr; ``crash``: exits at once, without an answer;
- ``spawn``: starts a long sleep in its process group, its pid (``holds_stdout``: it inherits the protocol's stdout);
- ``endless``: one stdout line that never ends; ``allocate``: ``mib`` MiB held, every page written, its size;
- ``hold``: says it runs (the file ``held`` in ``STDIO_TEST_FILES``, ``heldNAME`` given ``name``), answers once
  ``go`` (``goNAME``) is there (within 30 s);
  ``sleep``: answers ``slept`` after ``seconds``;
- ``sample``, ``elicit``, ``roots``: what the client answers its ``sampling/createMessage`` of ``prompt`` (the text),
  ``elicitation/create`` of ``question`` (``accept: <answer>``) and ``roots/list`` (the URIs);
- ``progress``: ``steps`` notifications under the call's ``progressToken``, then ``done``; ``announce``: ``soon``, and
  after that answer, tied to no request, ``notifications/tools/list_changed`` and a log message that names its pid.

``--stubborn``: it ignores SIGTERM and its stdin's end (only SIGKILL ends it), as a careless server may.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

INFO = {"name": "stdio-test-server", "version": ""}
SERVES = {"capabilities": {"tools": {"listChanged": False}}, "instructions": "A server of the tests' own."}
HANDSHAKES = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
COUNTS = itertools.count(1)  # this process's memory: ``next`` is atomic, whichever thread asks
ASKS = itertools.count(1)  # the ids of its own requests to the client
ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}  # what it elicits
_write = threading.Lock()
_asked: dict[int, queue.SimpleQueue[dict[str, Any]]] = {}  # its requests yet unanswered, by id
_call = threading.local()  # the ``_meta`` of the call its thread runs


class Refused(Exception):
    """The client's error answer to a request of this server's: the answer of the call that asked."""


def send(message: dict[str, Any]) -> None:
    with _write:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        sys.stdout.flush()


def whoami() -> str:
    leaked = sorted(key for key in os.environ if key.startswith("MCP_SESSIONS_"))
    said = {"pid": os.getpid(), "uid": os.getuid(), "session": os.environ.get("MCP_SESSION_ID"), "leaked": leaked}
    return json.dumps(said)


def keep(line: str) -> str:
    path = os.path.join(os.environ["STDIO_TEST_FILES"], f"{os.getpid()}.txt")
    with open(path, "a+") as file:
        file.write(line + "\n")
        file.seek(0)
        return file.read()


def complain(line: str) -> str:
    print(line, file=sys.stderr, flush=True)
    return "written"


def spawn(holds_stdout: bool = False) -> int:
    command = [sys.executable, "-c", "import time; time.sleep(300)"]
    return subprocess.Popen(command, stdout=None if holds_stdout else sys.stderr).pid


def endless() -> str:
    chunk = b"x" * 65536
    while True:
        os.write(1, chunk)


def hold(name: str = "") -> str:
    files = os.environ["STDIO_TEST_FILES"]
    open(os.path.join(files, f"held{name}"), "w").close()
    for _ in range(600):
        if os.path.exists(os.path.join(files, f"go{name}")):
            break
        time.sleep(0.05)
    return "held"


def sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


def ask(method: str, params: dict[str, Any] | None = None) -> Any:
    """The client's result for a request of this server's (``Refused`` for its error), within 30 s."""
    request_id = next(ASKS)
    _asked[request_id] = answered = queue.SimpleQueue[dict[str, Any]]()
    send({"id": request_id, "method": method, **({} if params is None else {"params": params})})
    message = answered.get(timeout=30)  # queue.Empty without one: the call's error
    if "error" in message:
        raise Refused(message["error"])
    return message["result"]


def sample(prompt: str) -> str:
    messages = [{"role": "user", "content": {"type": "text", "text": prompt}}]
    return str(ask("sampling/createMessage", {"messages": messages, "maxTokens": 10})["content"]["text"])


def elicit(question: str) -> str:
    result = ask("elicitation/create", {"mode": "form", "message": question, "requestedSchema": ANSWER})
    return f"{result['action']}: {result.get('content', {}).get('answer', '')}"


def progress(steps: int) -> str:
    for step in range(1, steps + 1):
        if (token := _call.meta.get("progressToken")) is not None:  # none without a token, as the SDK's
            report = {"progressToken": token, "progress": step, "total": steps, "message": f"step {step}"}
            send({"method": "notifications/progress", "params": report})
    return "done"


def announce() -> str:
    _call.then = (  # sent once its answer is: tied to no request
        {"method": "notifications/tools/list_changed"},
        {"method": "notifications/message", "params": {"level": "info", "data": f"announced by {os.getpid()}"}},
    )
    return "soon"


TOOLS: dict[str, Callable[..., Any]] = {
    "whoami": whoami,
    "keep": keep,
    "getenv": lambda name: os.environ.get(name, ""),
    "count": lambda: next(COUNTS),
    "complain": complain,
    "spawn": spawn,
    "endless": endless,
    "hold": hold,
    "sleep": sleep,
    "allocate": lambda mib: len(bytearray(mib << 20)),
    "crash": lambda: os._exit(3),
    "sample": sample,
    "elicit": elicit,
    "roots": lambda: " ".join(root["uri"] for root in ask("roots/list")["roots"]),
    "progress": progress,
    "announce": announce,
}


def call(request_id: Any, params: dict[str, Any]) -> None:
    _call.meta, _call.then = params.get("_meta") or {}, ()
    try:
        value = TOOLS[params["name"]](**params.get("arguments") or {})
    except Refused as refused:
        send({"id": request_id, "error": refused.args[0]})
        return
    except Exception as exc:
        result = {"content": [{"type": "text", "text": repr(exc)}], "isError": True}
    else:
        text = {"type": "text", "text": str(value)}
        result = {"content": [text], "isError": False, "structuredContent": {"result": value}}
    send({"id": request_id, "result": result})
    for message in _call.then:
        send(message)


def answer(method: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """The result of a request other than ``tools/call``; None for a method it does not know."""
    if method == "initialize":
        version = params.get("protocolVersion")
        version = version if version in HANDSHAKES else HANDSHAKES[-1]
        return {"protocolVersion": version, "serverInfo": INFO, **SERVES}
    if method == "server/discover":  # the revision probe: it speaks 2026-07-28
        return {"supportedVersions": ["2026-07-28"], "_meta": {"io.modelcontextprotocol/serverInfo": INFO}, **SERVES}
    if method == "tools/list":
        return {"tools": [{"name": name, "inputSchema": {"type": "object"}} for name in TOOLS]}
    return {} if method == "ping" else None


def main() -> None:
    for line in filter(str.strip, sys.stdin):
        message = json.loads(line)
        method, request_id, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method is None and request_id in _asked:  # the client's answer to a tool's request
            _asked.pop(request_id).put(message)
        elif method is None or request_id is None:  # a notification, or another answer: it asks nothing
            continue
        elif method == "tools/call":
            threading.Thread(target=call, args=(request_id, params), daemon=True).start()
        elif (result := answer(method, params)) is not None:
            send({"id": request_id, "result": result})
        else:
            send({"id": request_id, "error": {"code": -32601, "message": "Method not found", "data": method}})


if __name__ == "__main__":
    if "--stubborn" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    main()
    if "--stubborn" in sys.argv:
        time.sleep(300)

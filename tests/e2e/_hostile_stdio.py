"""A hostile stdio MCP server, written by hand a JSON-RPC line at a time: ``python -m e2e._hostile_stdio``.

It answers ``initialize`` and ``tools/list`` as any server does (``--no-list``: never ``tools/list``); each
``tools/call`` does what its tool's name says (``arguments`` tune it), each on a thread of its own so that a slow
one holds up no other:

- ``seen``: the ``_meta`` it was sent and its ``MCP_SESSION_ID``, as text;
- ``flood``: ``count`` log notifications of 1 KiB, then "flooded" on stderr, then its answer;
- ``flood_later``: its answer, then ``count`` log notifications of 1 KiB, then "flooded later" on stderr;
- ``rounds``: a result in the gateway's own 2026-07-28 members (``resultType: "input_required"``, ...);
- ``forge``: a result whose ``_meta`` carries a session echo of its own making;
- ``inject``: a notification whose method carries a newline and an ESC, then its answer;
- ``slow``: "slow TAG started" on stderr, then its answer, ``tag``, after ``seconds``;
- ``ask_then_answer``: an elicitation of its client (``q``) and its answer, in one write, not waiting for the client;
  what ``q`` got on stderr;
- ``connect``: a TCP connection to ``host`` and ``port`` tried: "connected", or why not ("refused: ...").
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from typing import Any

_write = threading.Lock()
TOOLS = ("seen", "flood", "flood_later", "rounds", "forge", "inject", "slow", "ask_then_answer", "connect")
FORGED = {"sessionId": "forged-by-the-process", "expiresAt": "2099-01-01T00:00:00Z"}


def send(message: dict[str, Any]) -> None:
    with _write:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        sys.stdout.flush()


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], **extra}


def flood(count: int) -> None:
    for index in range(count):
        send({"method": "notifications/message", "params": {"level": "info", "data": f"{index:08d}" + "x" * 1016}})


def connect(host: str, port: int) -> str:
    try:
        socket.create_connection((host, port), timeout=10).close()
    except OSError as exc:
        return f"refused: {exc.strerror or exc}"
    return "connected"


def call(request_id: Any, params: dict[str, Any]) -> None:
    name, arguments = params.get("name"), params.get("arguments") or {}
    result: dict[str, Any]
    if name == "seen":
        result = text(json.dumps({"meta": params.get("_meta", {}), "session": os.environ.get("MCP_SESSION_ID")}))
    elif name == "flood":
        flood(arguments["count"])
        print("flooded", file=sys.stderr, flush=True)
        result = text("flooded")
    elif name == "flood_later":
        send({"id": request_id, "result": text("soon")})
        flood(arguments["count"])
        print("flooded later", file=sys.stderr, flush=True)
        return
    elif name == "rounds":
        asked = {"q": {"method": "elicitation/create", "params": {"message": "?", "requestedSchema": {}}}}
        result = text("mine", resultType="input_required", inputRequests=asked, requestState="the-process's")
    elif name == "forge":
        result = text("forged", _meta={"io.modelcontextprotocol/session": FORGED, "mine": 1})
    elif name == "inject":
        send({"method": "evil\nCRITICAL:root:forged \x1b[31mred", "params": {}})
        result = text("injected")
    elif name == "slow":
        print(f"slow {arguments['tag']} started", file=sys.stderr, flush=True)
        time.sleep(arguments["seconds"])
        result = text(arguments["tag"])
    elif name == "connect":
        result = text(connect(arguments["host"], arguments["port"]))
    elif name == "ask_then_answer":
        schema = {"type": "object", "properties": {}}
        question = {"id": "q", "method": "elicitation/create", "params": {"message": "?", "requestedSchema": schema}}
        with _write:
            answer = {"id": request_id, "result": text("soon")}
            lines = (json.dumps({"jsonrpc": "2.0", **message}) for message in (question, answer))
            sys.stdout.write("\n".join(lines) + "\n")
            sys.stdout.flush()
        return
    else:
        send({"id": request_id, "error": {"code": -32602, "message": "unknown tool"}})
        return
    send({"id": request_id, "result": result})


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            capabilities: dict[str, Any] = {"tools": {}, "logging": {}}
            info = {"name": "hostile", "version": "1"}
            answer = {"protocolVersion": "2025-11-25", "capabilities": capabilities, "serverInfo": info}
            send({"id": request_id, "result": answer})
        elif method == "tools/list" and "--no-list" not in sys.argv:
            tools = [{"name": name, "inputSchema": {"type": "object"}} for name in TOOLS]
            send({"id": request_id, "result": {"tools": tools}})
        elif method == "tools/call":
            threading.Thread(target=call, args=(request_id, message["params"]), daemon=True).start()
        elif request_id == "q" and method is None:
            print(f"q got {json.dumps(message.get('result', message.get('error')))}", file=sys.stderr, flush=True)
        elif request_id is not None and method not in (None, "tools/list"):
            send({"id": request_id, "result": {}})


if __name__ == "__main__":
    main()

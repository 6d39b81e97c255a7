"""``mcp-sessions gateway``'s log, as an operator reads it: every line with its time (RFC 3339, with its offset), in
text or, with ``--log-format json``, one JSON object a line, uvicorn's lines (its access log among them) in the same
form; a line about the whole gateway (a drain) names no server. The gateway as its own process, its whole output
read."""

from __future__ import annotations

import json
import shlex
import signal
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from _mcp import answer, modern_headers, modern_request, session_meta
from _waits import WITHIN, until, until_awaited
from e2e._gateway import SECRET, Process, gateway_process, started
from e2e._stdio import SERVER, SERVER_PATH

pytestmark = pytest.mark.anyio


def stamped(line: str) -> datetime:
    """The time a text line starts with: RFC 3339, with its offset."""
    stamp = datetime.fromisoformat(line.split(" ", 1)[0])
    assert stamp.tzinfo is not None, line
    return stamp


def served_and_stopped(gateway: Process) -> str:
    """The gateway's whole output, once it has served a conversation's call and stopped on SIGTERM."""
    with httpx.Client(timeout=30) as http:
        assert http.get(gateway.url("/readyz")).text == "ok\n"
        create = modern_request("sessions/create")
        session = answer(http.post(gateway.url(), json=create, headers=modern_headers(create)))["result"]["session"]
        call = modern_request("tools/call", {"name": "count", "arguments": {}}, session=session_meta(session))
        assert "result" in answer(http.post(gateway.url(), json=call, headers=modern_headers(call)))
    assert gateway.process is not None
    gateway.process.send_signal(signal.SIGTERM)
    assert gateway.process.wait(WITHIN) == -signal.SIGTERM
    log = gateway.log().decode()
    assert session["sessionId"] not in log  # a bearer value in no line
    return log


def test_every_line_starts_with_its_time(tmp_path: Path) -> None:
    """Issue 112 (5): the gateway's lines had no time (``INFO: message``), uvicorn's neither."""
    environ = {**SERVER_PATH, "STDIO_TEST_FILES": str(tmp_path)}
    with gateway_process([], "--stdio", shlex.join(SERVER), "--log-level", "info", environ=environ) as gateway:
        lines = served_and_stopped(gateway).splitlines()
    assert [line for line in lines if "Application startup complete" in line], lines  # uvicorn's, too
    stamps = [stamped(line) for line in lines]
    assert stamps == sorted(stamps), lines
    assert any(" INFO: mcp-sessions gateway: stdio " in line for line in lines), lines


def test_log_format_json_makes_every_line_one_json_object(tmp_path: Path) -> None:
    """``--log-format json``: every line, uvicorn's and its access log's included, one object with its time, level,
    logger and message; the conversation a line is about beside them."""
    environ = {**SERVER_PATH, "STDIO_TEST_FILES": str(tmp_path)}
    flags = ("--log-level", "info", "--log-format", "json")
    with gateway_process([], "--stdio", shlex.join(SERVER), *flags, environ=environ) as gateway:
        lines = served_and_stopped(gateway).splitlines()
    records: list[dict[str, Any]] = [json.loads(line) for line in lines]
    for record in records:
        assert {"time", "level", "logger", "message"} <= set(record), record
        assert datetime.fromisoformat(record["time"]).tzinfo is not None, record
    loggers = {record["logger"] for record in records}
    assert {"mcp_sessions.gateway", "uvicorn.error", "uvicorn.access"} <= loggers, loggers
    [readyz] = [record for record in records if "GET /readyz" in record["message"]]
    assert (readyz["level"], readyz["logger"]) == ("INFO", "uvicorn.access"), readyz
    [served] = [record["message"] for record in records if "serves the conversation" in record["message"]]
    [call] = [record for record in records if "conversation" in record]  # the call's own access line
    assert (call["logger"], call["conversation_source"]) == ("uvicorn.access", "data-layer"), call
    assert served.endswith(f"serves the conversation {call['conversation']}"), (served, call)


def servers_file(directory: Path) -> Path:
    """A file of two servers, each the tests' stdio server, uncontained, a process per conversation."""
    env = json.dumps({**SERVER_PATH, "STDIO_TEST_FILES": str(directory)})
    server = {"stdio": shlex.join(SERVER), "process-containment": "none", "processes": "per-conversation", "warm": 0}
    file = directory / "servers.json"
    servers = {name: {**server, "env": json.loads(env)} for name in ("a", "b")}
    file.write_text(json.dumps({"gateway": {"shutdown-timeout": 60}, "mcpServers": servers}), encoding="utf-8")
    return file


@pytest.mark.parametrize("form", ["text", "json"])
async def test_a_drain_s_lines_name_no_server(tmp_path: Path, form: str) -> None:
    """Issue 112 (5): with ``--config``, a drain's line said as a call of one server ended was that server's
    (``INFO: a: mcp-sessions gateway: the calls in flight at the signal are answered ...``): the drain is the whole
    gateway's. A server's own lines name it, in the text and as the JSON's ``server``."""
    file = servers_file(tmp_path)

    def command_line(port: int) -> tuple[list[str], dict[str, str]]:
        line = ["-m", "mcp_sessions", "gateway", "--config", str(file), "--port", str(port), "--log-level", "info"]
        return [sys.executable, *line, "--log-format", form], {"MCP_SESSIONS_SECRET": SECRET}

    gateway = started("mcp-sessions gateway --config servers.json", command_line)
    try:
        assert gateway.process is not None
        url = gateway.url("/servers/a/mcp")
        async with httpx.AsyncClient(timeout=WITHIN) as http, anyio.create_task_group() as tasks:

            async def held() -> None:
                body = modern_request("tools/call", {"name": "hold", "arguments": {}})
                assert "result" in (await http.post(url, json=body, headers=modern_headers(body))).json()

            tasks.start_soon(held)
            await until_awaited(lambda: (tmp_path / "held").exists(), "the call to reach its process")
            gateway.process.send_signal(signal.SIGTERM)
            await until_awaited(lambda: b"draining" in gateway.log(), "the drain to begin")
            (tmp_path / "go").touch()
        until(lambda: gateway.process is not None and gateway.process.poll() is not None, "the gateway to stop")
        lines = gateway.log().decode().splitlines()
    finally:
        gateway.stop()
    if form == "json":  # as the text would say it
        records = [json.loads(line) for line in lines]
        named = [f"{r['server']}: " if "server" in r else "" for r in records]
        lines = [f"{r['time']} {r['level']}: {name}{r['message']}" for r, name in zip(records, named, strict=True)]
    drain = [line for line in lines if "mcp-sessions gateway: draining" in line or "the calls in flight" in line]
    assert len(drain) == 2, lines
    assert all(" INFO: mcp-sessions gateway: " in line for line in drain), drain
    assert any(" INFO: a: process " in line for line in lines), lines  # a server's own lines name it

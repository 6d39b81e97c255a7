"""No span lost when the server stops: a real server, stopped by a signal right after a request, exported its spans.

uvicorn (0.29 and later) re-raises the SIGTERM it caught once its graceful shutdown is done, so the
process ends by the signal: no ``atexit`` handler runs, the OpenTelemetry SDK's exit flush included, and
a batch of spans still waiting would be lost. The middleware flushes the providers it records with when
the app's lifespan shutdown completes, before the server exits. Each case runs a server in a process of
its own (``tests/_traced_server.py``, or ``examples/tracing.py --port``), sends a session's call, signals
the server at once, and looks for that call's spans at a real OTLP/HTTP receiver (``tests/_otlp.py``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from _mcp import ModernClient, jwt_claims, session_meta
from _otlp import Receiver
from _redis import free_port
from _waits import WITHIN, until
from conftest import SECRET

ROOT = Path(__file__).resolve().parents[2]

SERVERS = {
    "uvicorn": lambda port: [
        *(sys.executable, "-m", "uvicorn", "--factory", "_traced_server:app"),
        *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"),
    ],
    "gunicorn": lambda port: [
        *(sys.executable, "-m", "gunicorn", "_traced_server:app()"),
        *("--worker-class", "uvicorn.workers.UvicornWorker", "--workers", "1"),
        *("--bind", f"127.0.0.1:{port}", "--log-level", "warning"),
    ],
    "examples/tracing.py": lambda port: [sys.executable, "examples/tracing.py", "--port", str(port)],
}


@contextlib.contextmanager
def server(kind: str, endpoint: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """The server ``kind`` on a free port of 127.0.0.1, ready; killed at the end if it is still running."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MCP_SESSIONS_"))}
    paths = [ROOT / "middleware", ROOT, ROOT / "tests"]
    env.update(PYTHONPATH=os.pathsep.join(map(str, paths)), TRACED_SERVER_OTLP=endpoint)
    argv = SERVERS[kind](port)
    if kind == "examples/tracing.py":
        env["MCP_SESSIONS_SECRET"] = SECRET
        argv += ["--otlp-endpoint", endpoint]
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"

        def answering() -> bool:
            assert process.poll() is None, f"{kind} exited at start:\n{process.communicate()[1].decode()}"
            with contextlib.suppress(httpx.TransportError):
                httpx.get(url + "/", timeout=2)
                return True
            return False

        until(answering, f"{kind} did not answer")
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=WITHIN)


@pytest.mark.parametrize(
    ("kind", "stop"),
    [
        ("uvicorn", signal.SIGTERM),
        ("uvicorn", signal.SIGINT),
        ("gunicorn", signal.SIGTERM),
        ("examples/tracing.py", signal.SIGTERM),
    ],
    ids=["uvicorn-SIGTERM", "uvicorn-SIGINT", "gunicorn-uvicorn-worker-SIGTERM", "tracing-example-SIGTERM"],
)
def test_a_signal_right_after_a_request_loses_none_of_its_spans(
    receiver: tuple[Receiver, str], kind: str, stop: signal.Signals
) -> None:
    received, endpoint = receiver
    with server(kind, endpoint) as (process, url), httpx.Client(timeout=10) as http:
        client = ModernClient(http, url)
        token = client.create_session()["sessionId"]
        _, counted = client.call_tool("count", session=session_meta(token))
        assert "result" in counted, counted
        process.send_signal(stop)  # within milliseconds of the answer: nothing has exported the batch yet
        process.wait(WITHIN)
    sid = jwt_claims(token)["sid"]
    exported = [(span.scope, span.name) for span in received.spans if span.attributes.get("session.id") == sid]
    assert ("mcp_sessions", "sessions/create") in exported
    assert ("mcp_sessions", "tools/call count") in exported

"""Shared fixtures: real uvicorn servers on 127.0.0.1 with ephemeral ports."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

SECRET = "test-secret-that-is-long-enough-for-hs256-0123456789"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextlib.contextmanager
def serve(app: Any, *, timeout: float = 10.0) -> Iterator[str]:
    """Serve ``app`` with a real uvicorn on 127.0.0.1:0 in a thread; yields the base URL.

    The app's lifespan runs (the MCP SDK app needs it), and the server stops,
    bounded in time, when the block ends.
    """
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only then, and without it
    # every request on a kept-alive connection waits ~40 ms (Nagle + delayed ACK).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
        sock.close()

"""Shared fixtures: real uvicorn servers on 127.0.0.1 with ephemeral ports."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from examples.demo import serve_in_thread

from mcp_sessions import KeySet, SessionKey

SECRET = "test-secret-that-is-long-enough-for-hs256-0123456789"


def signer_of(keys: KeySet) -> SessionKey:
    """The key ``keys`` signs with: ``KeySet.signer`` is ``None`` only for a verify-only set, and these have one."""
    assert keys.signer is not None, "a verify-only KeySet has no signer"
    return keys.signer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextlib.contextmanager
def serve(app: Any, *, timeout: float = 10.0, root_path: str = "") -> Iterator[str]:
    """Serve ``app`` with a real uvicorn on 127.0.0.1:0 in a thread; yields the base URL.

    The app's lifespan runs (the MCP SDK app needs it), and the server stops,
    bounded in time, when the block ends.
    """
    with serve_in_thread(app, timeout=timeout, path="", root_path=root_path) as url:
        yield url

"""What the client transport's tests share: what a request carried as its session, and a retry policy without waits."""

from __future__ import annotations

from typing import Any

from _mcp import SESSION_KEY
from mcp_sessions.client import RetryPolicy

FAST = RetryPolicy(attempts=3, backoff=0.0, max_backoff=0.0, jitter=False)
"""Three retries, none of them waiting."""
STORE_UNAVAILABLE = -32010


def sent_session(body: Any) -> Any:
    """The session ``_meta`` of a JSON-RPC request body, or ``"absent"``."""
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get(SESSION_KEY, "absent") if isinstance(meta, dict) else "absent"

"""Data-layer sessions for existing MCP clients: a transport shim and a small explicit API.

``SessionTransport`` (httpx2, which the ``mcp`` SDK client uses) and
``HttpxSessionTransport`` (httpx) wrap a client's HTTP transport so that every
request carries a session; ``HeldSession`` is the session a client holds.
Neither HTTP library is a dependency: each transport imports its own on first
use, so a user of one never needs the other. See ``docs/client.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ._messages import SessionError
from ._session import HeldSession, RetryPolicy

if TYPE_CHECKING:
    from ._httpx import HttpxSessionTransport
    from ._httpx2 import SessionTransport

__all__ = [
    "HeldSession",
    "HttpxSessionTransport",
    "RetryPolicy",
    "SessionError",
    "SessionTransport",
]

_LAZY = {
    "SessionTransport": ("._httpx2", "httpx2", "the mcp SDK client's HTTP library"),
    "HttpxSessionTransport": ("._httpx", "httpx", "the HTTP library"),
}


def __getattr__(name: str) -> type:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name, package, what = _LAZY[name]
    try:
        module = importlib.import_module(module_name, __name__)
    except ModuleNotFoundError as exc:
        if exc.name != package:
            raise
        raise ImportError(f"{name} needs {package} ({what}): pip install {package}") from exc
    value: type = getattr(module, name)  # a session transport class
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

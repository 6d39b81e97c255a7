"""The ``mcp`` SDK's JSON parsers, per era: the bodies they refuse that the middleware's own parser reads.

The middleware reads every body ``json.loads`` reads (``wire/jsonrpc.py``), so that nothing the
server reads passes as "not JSON". The SDK's parsers read less, and answer -32700 (HTTP 400) before
any other check of the body:

- the 2025-era transport (``server/streamable_http.py``) parses with pydantic-core's
  ``from_json``: UTF-8 only (no byte-order mark, no UTF-16 or UTF-32), no lone surrogate (as
  bytes or escaped), no number beyond its range, at most 201 levels of nesting (pydantic-core
  2.50, wherever it runs). Its answer quotes the parser (``Parse error: expected value at line 1
  column 1``), so the guard calls the very same function.
- the 2026-07-28 entry (``server/_streamable_http_modern.py``) parses with ``json.loads`` and
  answers a constant ``Parse error``. It reads what the middleware reads, except nesting: on
  CPython 3.11 the JSON parser's nesting counts against the recursion limit, and the SDK parses
  deeper in the stack than the middleware (measured: a body 971 levels deep is refused behind the
  middleware, 972 when the SDK is served bare, under uvicorn with the default limit of 1000). The
  guard parses again, as deep in the stack as the SDK does. From CPython 3.12 the parser has a
  limit of its own (1492 and 9993 levels were measured on 3.12.1 and 3.13.0, everywhere alike),
  which the frames do not change.
"""

from __future__ import annotations

import json
import sys
from typing import Final

from ..wire import jsonrpc
from ..wire.protocol import PARSE_ERROR
from ._rejection import Rejection, _legacy_error, _modern_error

__all__ = ["SDK_FRAMES_AT_TRANSPORT", "SDK_FRAMES_BEHIND_APP", "legacy_parse_refusal", "modern_parse_refusal"]

_MODERN_PARSE_ERROR: Final = _modern_error(None, PARSE_ERROR, "Parse error", "parse_error")

# The frames below the middleware's ``__call__`` down to the one that calls ``json.loads``. In the SDK
# (``streamable_http_app()``, mcp 2.3, Starlette 1.10): Starlette, its error and exception middlewares, the
# exception handler's wrapper, the router, the route, its handler, the session manager, transport security,
# its dispatch, and the 2026-07-28 entry. In the guard: the middleware's step, Guard.check, check_modern,
# modern_parse_refusal, and _parses, which recurses the difference (a subclass's check that calls this one
# adds a frame: it refuses one level sooner). tests/e2e/test_guard_differential.py finds the SDK's limit
# behind the middleware and holds the guard to it.
SDK_FRAMES_BEHIND_APP: Final = 11
"""In front of a whole ``streamable_http_app()`` (the outer form)."""
SDK_FRAMES_AT_TRANSPORT: Final = 4
"""Placed in front of the transport app (``_inside.py``): Starlette's frames are above the middleware then
(measured by tests/e2e/test_guard_differential.py, which finds the SDK's limit behind the middleware)."""
_GUARD_FRAMES: Final = 5
# Nesting never counts more levels than the body has brackets; fewer than this is never too deep for the SDK
# (the default recursion limit is 1000 frames, and the SDK parses some 30 frames down).
_SHALLOW: Final = 200


def legacy_parse_refusal(body: bytes) -> Rejection | None:
    """The 2025-era transport's answer to a body pydantic-core's ``from_json`` refuses, else ``None``.

    ``None`` too where pydantic-core is not installed: the wrapped server is then not the SDK.
    """
    sdk_loads = jsonrpc.sdk_loads
    if sdk_loads is None:  # pragma: no cover - pydantic-core comes with the mcp SDK
        return None
    try:
        sdk_loads(body)
    except ValueError as exc:
        return _legacy_error(400, PARSE_ERROR, f"Parse error: {exc}", "parse_error")
    return None


def modern_parse_refusal(body: bytes, sdk_frames: int = SDK_FRAMES_BEHIND_APP) -> Rejection | None:
    """The 2026-07-28 entry's answer to a body ``json.loads`` refuses where the SDK calls it, else ``None``.

    On CPython 3.11 the JSON parser's nesting shares the recursion limit with the stack, so the body is
    parsed as many frames down as the SDK parses it; from 3.12 it has a limit of its own, which the frames
    do not change.
    """
    if body.count(b"[") + body.count(b"{") < _SHALLOW:
        return None
    return None if _parses(body, sdk_frames - _GUARD_FRAMES) else _MODERN_PARSE_ERROR


def _parses(body: bytes, frames: int) -> bool:
    """Whether ``json.loads`` reads ``body`` when called ``frames`` frames further down the stack.

    Placed right in front of the transport, the guard's own frames are more than the SDK's below the
    middleware: ``frames`` is negative then, and the parse gets that many frames more of recursion limit
    (raised, never lowered, for the moment of the parse: no other code can run out of frames for it).
    """
    if frames > 0:
        return _parses(body, frames - 1)
    limit = sys.getrecursionlimit()
    if frames < 0:
        sys.setrecursionlimit(limit - frames)
    try:
        json.loads(body)
    except (ValueError, RecursionError):  # as the SDK catches them
        return False
    finally:
        if frames < 0:
            sys.setrecursionlimit(limit)
    return True

"""The ``mcp`` SDK's JSON parsers, per era: the bodies they refuse that the middleware's own parser reads.

The middleware reads every body ``json.loads`` reads (``wire/jsonrpc.py``), so that nothing the
server reads passes as "not JSON". The SDK's parsers read less, and answer -32700 (HTTP 400) before
any other check of the body:

- the 2025-era transport parses with pydantic-core's ``from_json``: UTF-8 only (no byte-order
  mark, no UTF-16 or UTF-32), no lone surrogate (as bytes or escaped), no number beyond its range,
  at most 201 levels of nesting. Its answer quotes the parser (``Parse error: expected value at
  line 1 column 1``), so the guard calls that very function: the server's own verdict.
- the 2026-07-28 entry parses with ``json.loads`` and answers a constant ``Parse error``. It reads
  what the middleware reads, except nesting, where its limit depends on how deep in the stack the
  SDK happens to parse (on CPython 3.11 the parser's nesting counts against the recursion limit:
  about 970 levels under uvicorn) and on the Python release (its own limit from 3.12). No copy of
  that would hold across releases, so for the answers the middleware gives itself a documented
  limit stricter than any of them applies: :data:`MAX_NESTING` levels, far deeper than any MCP
  message and hundreds of frames short of where the SDK's parser gives up.
"""

from __future__ import annotations

import json
import re
from typing import Final

from .._wire import jsonrpc
from .._wire.protocol import PARSE_ERROR
from ._rejection import Rejection, _legacy_error, _modern_error

__all__ = ["MAX_NESTING", "legacy_parse_rejection", "modern_parse_rejection", "nesting_of"]

MAX_NESTING: Final = 512
"""The deepest 2026-07-28 body (arrays and objects inside each other) the middleware answers itself."""
_MODERN_PARSE_ERROR: Final = _modern_error(None, PARSE_ERROR, "Parse error", "parse_error")
# A JSON string (possessive: a string is read once, never re-tried) or a bracket: each character is read once.
_STRING_OR_BRACKET: Final = re.compile(r'"(?:[^"\\]++|\\.)*+"|[\[\]{}]')


def legacy_parse_rejection(body: bytes) -> Rejection | None:
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


def modern_parse_rejection(body: bytes) -> Rejection | None:
    """The 2026-07-28 ``Parse error`` for a body nested deeper than :data:`MAX_NESTING`, else ``None``."""
    if body.count(b"[") + body.count(b"{") <= MAX_NESTING:
        return None
    return _MODERN_PARSE_ERROR if nesting_of(body) > MAX_NESTING else None


def nesting_of(body: bytes) -> int:
    """How deep arrays and objects nest in ``body`` (JSON ``json.loads`` reads), in time linear in its length."""
    depth = deepest = 0
    for token in _STRING_OR_BRACKET.finditer(body.decode(json.detect_encoding(body), "surrogatepass")):
        bracket = token[0]
        if bracket in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif bracket in ("]", "}"):
            depth -= 1
    return deepest

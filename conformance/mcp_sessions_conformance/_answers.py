"""What a command shows a person of a stranger's answer: its text escaped and cut short, and what it means.

Every string a server chose (an error message, a tool's text, a header, a body) reaches a terminal
only through :func:`printable`: a control character in it could otherwise set the window title
(``ESC ] 0;… BEL``), clear the screen (``ESC [2J``), start a sequence with the one-character CSI
(U+009B) or reorder what follows (U+202E). :func:`excerpt` is the bounded, one-line start of a
body; :func:`handshake_only` reads the refusal a 2025-11-25 server gives a 2026-07-28 request.

mcp-sessions' ``create`` command has the same functions (``mcp_sessions/_wire/answers.py``): the
pack is a distribution of its own that imports nothing of the middleware's, and these few lines
are the price (tests/unit/test_answers.py holds both copies to the same cases).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

EXCERPT_CHARS: Final = 240
"""The most characters of an answer's body a command shows (then ``…``)."""
_UNSAFE: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""C0 and C1 controls and DEL (Cc), format characters such as bidirectional overrides (Cf), lone
surrogates (Cs: no terminal encoding takes them), line and paragraph separators (Zl, Zp)."""
_HANDSHAKE_REFUSAL: Final = re.compile(
    r"session[ _-]?id|not initiali[sz]ed|protocol[ _-]?version",
    re.IGNORECASE,
)


def _unsafe(char: str) -> bool:
    return unicodedata.category(char) in _UNSAFE


def _python_escaped(char: str) -> str:
    return char.encode("unicode_escape").decode("ascii")


def printable(text: str) -> str:
    """``text`` with every character a terminal could act on written as Python escapes it (``\\x1b``,
    ``\\x9b``, ``\\n``, ``\\u202e``): what a server wrote, shown, never obeyed. Linear in ``text``."""
    return "".join(_python_escaped(char) if _unsafe(char) else char for char in text)


def excerpt(body: bytes | str, limit: int = EXCERPT_CHARS) -> str:
    """The start of ``body`` on one line: UTF-8 read leniently, runs of white space as one space, at most
    ``limit`` characters (then ``…``), :func:`printable`. Reads at most ``4 * limit`` bytes of it."""
    start = body[: 4 * limit]
    text = start.decode("utf-8", "replace") if isinstance(start, bytes) else start
    cut = len(body) > 4 * limit
    text = " ".join(text.split())
    if len(text) > limit:
        text, cut = text[:limit], True
    return printable(text) + ("…" if cut else "")


def json_printable(dumped: str) -> str:
    """JSON text (as ``json.dumps`` writes it) with every character :func:`printable` escapes, and that JSON
    leaves as it is (DEL, C1, format characters, separators, lone surrogates), as a ``\\uXXXX`` escape:
    the same JSON value, and a file a terminal can show. JSON escapes C0 controls itself, so every C0
    character left in ``dumped`` is its own white space, kept."""

    def escaped(char: str) -> str:
        if char < " " or not _unsafe(char):
            return char
        units = char.encode("utf-16-be", "surrogatepass")
        return "".join(f"\\u{int.from_bytes(units[i : i + 2], 'big'):04x}" for i in range(0, len(units), 2))

    return "".join(escaped(char) for char in dumped)


def handshake_only(status: int, text: str) -> bool:
    """Whether ``status`` and ``text`` (its body), the answer to a 2026-07-28 request, are how a server that
    speaks only 2025-11-25 refuses it: HTTP 400 saying that a transport session is missing or that the
    protocol version is not one it takes. mcp 1.x (stateful): "Bad Request: Missing session ID"; mcp 1.x
    (stateless) and the TypeScript SDK: "Bad Request: Unsupported protocol version: 2026-07-28";
    the TypeScript SDK (server-everything): "Bad Request: Server not initialized" or "No valid session ID
    provided". mcp 2.x serves 2026-07-28 itself."""
    return status == 400 and _HANDSHAKE_REFUSAL.search(text[: 4 * EXCERPT_CHARS]) is not None

"""Pure: JSON-RPC frames and refusals, SSE, what every wire shares, and what a stranger wrote made safe to print
(:func:`printable`: a server's answer on a terminal, a child process's lines in a log).

Imports nothing that speaks ASGI, and nothing else of the package. ``ThrottledWarning`` is how a
refusal, and a store, say that their backend is down without a line for each request.
"""

import unicodedata
from typing import Final

from . import jsonrpc, protocol, sse
from .jsonrpc import Refusal, ThrottledWarning, batch_refused, store_unavailable
from .protocol import iso

__all__ = [
    "Refusal",
    "ThrottledWarning",
    "batch_refused",
    "iso",
    "jsonrpc",
    "printable",
    "protocol",
    "sse",
    "store_unavailable",
]

_UNSAFE: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""C0 and C1 controls and DEL (Cc), format characters such as bidirectional overrides (Cf), lone
surrogates (Cs: no terminal encoding takes them), line and paragraph separators (Zl, Zp)."""


def printable(text: str) -> str:
    """``text`` with every character a terminal could act on written as Python escapes it (``\\x1b``,
    ``\\x9b``, ``\\n``, ``\\u202e``): what a stranger wrote, shown, never obeyed. Linear in ``text``."""
    return "".join(
        char.encode("unicode_escape").decode("ascii") if unicodedata.category(char) in _UNSAFE else char
        for char in text
    )

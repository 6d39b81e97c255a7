"""What a stranger wrote, made safe to print: a server's answer on a terminal, a child process's lines in a log."""

from __future__ import annotations

import unicodedata
from typing import Final

_UNSAFE: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""C0 and C1 controls and DEL (Cc), format characters such as bidirectional overrides (Cf), lone
surrogates (Cs: no terminal encoding takes them), line and paragraph separators (Zl, Zp)."""


def printable(text: str) -> str:
    """``text`` with every character a terminal could act on written as Python escapes it (``\\x1b``,
    ``\\x9b``, ``\\n``, ``\\u202e``): what a stranger wrote, shown, never obeyed. Linear in ``text``."""
    return "".join(map(_shown, text))


def _shown(char: str) -> str:
    if unicodedata.category(char) in _UNSAFE:
        return char.encode("unicode_escape").decode("ascii")
    return char

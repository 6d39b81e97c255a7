"""The Python snippets of the docs, as the docs tests find and run them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def python_snippets(page: str) -> list[str]:
    """The ```` ```python ```` blocks of ``page`` (its path from the repository's root), in order."""
    return _PYTHON_BLOCK.findall((ROOT / page).read_text(encoding="utf-8"))


def one_with(snippets: Sequence[str], text: str) -> str:
    """The one snippet of ``snippets`` that contains ``text`` (there must be exactly one)."""
    [snippet] = [s for s in snippets if text in s]
    return snippet


def exec_snippet(snippet: str, page: str, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``snippet`` as a module named ``docs_snippet``: ``namespace``, and what the snippet defines in it."""
    namespace = {"__name__": "docs_snippet", **(namespace or {})}
    exec(compile(snippet, page, "exec"), namespace)
    return namespace

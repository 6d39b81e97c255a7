"""The Python snippets of the docs, as the docs tests find and run them."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
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


OUT_VARIABLE = "MCP_SESSIONS_DOCS_OUT"
"""Set by ``scripts/update_docs.py``: a directory where each generated block is written for it to splice in."""


def assert_generated(doc: Path, rendered: str, begin: str, end: str) -> None:
    """The part of ``doc`` between ``begin`` (or the start, if empty) and ``end`` is ``rendered``.

    The test never writes the page: ``python scripts/update_docs.py`` runs the tests that render pages and puts
    what they rendered in place.
    """
    text = doc.read_text(encoding="utf-8") if doc.exists() else ""
    rest = text.partition(begin)[2] if begin else text
    committed = rest.partition(end)[0]
    out = os.environ.get(OUT_VARIABLE)
    if out:
        record = {"doc": str(doc.relative_to(ROOT)), "begin": begin, "end": end, "rendered": rendered}
        name = hashlib.sha256(f"{doc}{begin}".encode()).hexdigest()[:16]
        (Path(out) / f"{name}.json").write_text(json.dumps(record), encoding="utf-8")
    diff = "".join(difflib.unified_diff(committed.splitlines(True), rendered.splitlines(True), "committed", "now"))
    assert committed == rendered, f"{doc.name} is stale: regenerate with python scripts/update_docs.py\n{diff}"

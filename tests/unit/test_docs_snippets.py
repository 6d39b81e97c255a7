"""Every ```python block of README.md and docs/*.md is run: by the test module tests/_docs.py's RUN_BY names for
it, or here, as written (a block with nothing of the reader's to stand in for, whose page says only what it builds).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _docs import AS_WRITTEN, ROOT, RUN_BY, exec_snippet, one_with, python_snippets
from conftest import SECRET

PAGES = sorted(
    str(page.relative_to(ROOT))
    for page in [ROOT / "README.md", *ROOT.glob("docs/*.md")]
    if python_snippets(str(page.relative_to(ROOT)))
)


@pytest.mark.parametrize("page", PAGES)
def test_every_block_of_the_page_has_one_runner(page: str) -> None:
    """Each block holds exactly one of its page's texts in RUN_BY, and each named module runs that page's blocks."""
    snippets = python_snippets(page)
    assert page in RUN_BY, f"{page}'s Python blocks are run by no test: add them to RUN_BY in tests/_docs.py"
    assert sorted(snippets) == sorted(one_with(snippets, text) for text in RUN_BY[page])
    for module in set(RUN_BY[page].values()) - {AS_WRITTEN}:
        assert Path(page).name in (ROOT / "tests" / module).read_text(encoding="utf-8"), (page, module)


AS_WRITTEN_BLOCKS = [
    (page, text) for page, texts in RUN_BY.items() for text, module in texts.items() if module == AS_WRITTEN
]


@pytest.mark.parametrize(("page", "text"), AS_WRITTEN_BLOCKS)
def test_the_block_runs_as_written(page: str, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SESSIONS_SECRET", SECRET)
    namespace = exec_snippet(one_with(python_snippets(page), text), page)
    assert callable(namespace["app"])  # each builds the ASGI app its page goes on to serve

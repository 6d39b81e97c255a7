"""The snippets of docs/profiles.md run, and the page names every registered wire."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mcp_sessions import MCPSessionMiddleware
from mcp_sessions.profiles import PROFILES

PAGE = Path(__file__).parents[2] / "docs" / "profiles.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_python_snippet_builds_the_middleware_with_every_wire() -> None:
    [snippet] = blocks("python")
    namespace: dict[str, object] = {}
    exec(compile(snippet, str(PAGE), "exec"), namespace)
    app = namespace["app"]
    assert isinstance(app, MCPSessionMiddleware)
    assert [p.name for p in app.config.profiles] == list(PROFILES)


def test_json_examples_are_json_and_every_wire_has_a_section() -> None:
    for block in blocks("json"):
        for line in block.splitlines():
            json.loads(line)
    text = PAGE.read_text()
    for name in PROFILES:
        assert f"## `{name}`" in text

"""Wrapping changes nothing a conformant server does: the official MCP conformance suite, bare and wrapped.

``@modelcontextprotocol/conformance`` (pinned by scripts/system-deps.sh) checks an ``MCPServer``
served bare and the same server wrapped by ``MCPSessionMiddleware``, on each era: every check of
every server scenario has the same outcome.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SECRET, serve
from e2e._gateway import run_suite, upstream_server
from mcp_sessions import MCPSessionMiddleware


@pytest.mark.parametrize("spec_version", ["2025-11-25", "2026-07-28"])
def test_the_suite_gives_the_same_outcomes_wrapped_as_bare(tmp_path: Path, spec_version: str) -> None:
    with serve(upstream_server("bare").streamable_http_app(stateless_http=True)) as bare:
        unwrapped = run_suite(bare + "/mcp", tmp_path / "bare", spec_version)
    wrapped_app = MCPSessionMiddleware(
        upstream_server("wrapped").streamable_http_app(stateless_http=True), secret=SECRET
    )
    with serve(wrapped_app) as wrapped:
        outcomes = run_suite(wrapped + "/mcp", tmp_path / "wrapped", spec_version)
    assert outcomes == unwrapped
    assert sum(statuses.count("SUCCESS") for statuses in outcomes.values()) >= 28, outcomes

"""The official MCP conformance suite through the gateway gives what it gives against the upstream directly.

``@modelcontextprotocol/conformance`` (pinned by scripts/system-deps.sh, run with the Node 22 the
``node@22`` package brings, in ``.cache/node22``) checks each upstream once directly and once through the gateway:
``server-everything`` (node) on every server scenario of the 2025 era, the one it speaks, and an
``MCPServer`` on both eras (and that ``MCPServer`` wrapped by ``MCPSessionMiddleware``: wrapping changes
nothing a conformant server does). Scenario by scenario, check by check, the outcomes are the same, but
one: the gateway refuses a foreign ``Host`` itself (the upstream never sees the client's), so the
DNS-rebinding check that server-everything fails passes through the gateway.

And ``mcp-sessions conformance`` through the gateway (issue 51): its default run passes in each era
the upstream speaks, though no upstream has the quickstart's tools; against server-everything, which
speaks only 2025-11-25, the 2026-07-28 run fails saying to run the pack with that era.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import serve
from e2e._gateway import SECRET, everything_server, gateway_process, run_suite, upstream_server
from e2e._pack import LEGACY, MODERN, run_pack
from mcp_sessions import MCPSessionMiddleware, SessionsConfig, gateway_app

# What the gateway changes: it checks Host itself, as the mcp SDK's DNS-rebinding protection does.
GATEWAY_OWN = {("dns-rebinding-protection", "localhost-host-rebinding-rejected"): ("FAILURE", "SUCCESS")}


def test_the_suite_through_the_gateway_gives_what_it_gives_directly(tmp_path: Path) -> None:
    with everything_server() as upstream:
        direct = run_suite(upstream, tmp_path / "direct")
        with gateway_process([upstream]) as gateway:
            through = run_suite(gateway.url(), tmp_path / "gateway")
    assert direct.keys() == through.keys()
    differing = {key: (direct[key], through[key]) for key in direct if direct[key] != through[key]}
    assert differing == {key: ([before], [after]) for key, (before, after) in GATEWAY_OWN.items()}
    passed = sum(statuses.count("SUCCESS") for statuses in through.values())
    assert passed >= 13, through  # what server-everything passes directly: its handshake, tools, resources…


@pytest.mark.parametrize("spec_version", [LEGACY, MODERN])
def test_the_suite_through_the_gateway_or_wrapped_gives_what_an_mcpserver_gives_directly_and_the_pack_passes(
    tmp_path: Path, spec_version: str
) -> None:
    app = upstream_server("plain").streamable_http_app(stateless_http=True)
    with serve(app) as upstream:
        direct = run_suite(upstream + "/mcp", tmp_path / "direct", spec_version)
        with serve(gateway_app([upstream + "/mcp"], config=SessionsConfig(secret=SECRET))) as gateway:
            through = run_suite(gateway + "/mcp", tmp_path / "gateway", spec_version)
            run = run_pack(gateway + "/mcp", "--spec-version", spec_version)
    wrapped_app = MCPSessionMiddleware(
        upstream_server("wrapped").streamable_http_app(stateless_http=True), secret=SECRET
    )
    with serve(wrapped_app) as wrapped:
        assert run_suite(wrapped + "/mcp", tmp_path / "wrapped", spec_version) == direct
    assert through == direct
    assert sum(statuses.count("SUCCESS") for statuses in through.values()) >= 28, through  # handshake, tools…
    assert (run.code, run.failing()) == (0, set()), run.out
    assert set(run.checks) == {"sessions-draft"}


def test_the_pack_through_the_gateway_passes_in_front_of_server_everything() -> None:
    with everything_server() as upstream, gateway_process([upstream]) as gateway:
        legacy = run_pack(gateway.url(), "--spec-version", LEGACY)
        default = run_pack(gateway.url())  # no era asked for: judged at the one the server speaks
        modern = run_pack(gateway.url(), "--spec-version", MODERN)

    assert (legacy.code, legacy.failing()) == (0, set()), legacy.out
    assert set(legacy.checks) == {"sessions-draft"}  # the wire the gateway advertises
    statuses = legacy.statuses()
    assert statuses["sessions-draft-session-is-context"] == {"SKIPPED"}  # server-everything has no counter
    assert statuses["sessions-draft-echo"] == {"SUCCESS"}
    assert (default.code, default.failing(), set(default.checks)) == (0, set(), {"sessions-draft"}), default.out
    assert f"The server speaks only {LEGACY} (it refused {MODERN} as such a server does): checked there." in default.out
    assert modern.code == 1  # an era asked for and refused: a failure, with the hint
    assert f"The server seems to speak only {LEGACY}: run the pack with --spec-version {LEGACY}" in modern.out

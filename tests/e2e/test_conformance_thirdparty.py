"""Issue 51: the pack's default run against other people's servers, installed from the package index, each in an
environment of its own and run as a real process on loopback, through the ``mcp-sessions conformance`` command.

Each server's outcome is written down check by check, here and in docs/interop.md (the last test holds the two
together): a FAILURE only where the server departs from a sentence quoted there, with no baseline. The mcp 1.x
server that refuses every batch is ``test_conformance_strangers.py``'s.
"""

from __future__ import annotations

import re
import shutil
import tarfile
from pathlib import Path
from typing import Any

import httpx
import pytest

from _mcp import MODERN, modern_request
from _redis import missing
from e2e._thirdparty import conformance, thirdparty_server, venv_of

LEGACY = "2025-11-25"
HERE = Path(__file__).parent
FAST_AGENT_EXAMPLE = "fast_agent_mcp-0.5.3/examples/experimental/mcp_sessions/session_server.py"
DOC = HERE.parents[1] / "docs" / "interop.md"
BY_HAND_HEADING = "## Other people's servers: the conformance pack's default run"
OUTCOME_ROW = re.compile(r"^\| `(?P<check>sessions-[\w-]+)` \| (?P<status>[A-Z]+) \|")
FAST_AGENT_OUTCOME = {
    "sessions-strawman-capability": "SUCCESS",
    "sessions-strawman-create": "SUCCESS",
    "sessions-strawman-resume": "SKIPPED",  # it lists create, list and delete: no resume
    "sessions-strawman-list": "SUCCESS",
    "sessions-strawman-session-is-context": "SKIPPED",  # no count tool
    "sessions-strawman-delete": "SUCCESS",
}


def outcome_tables(server: str) -> list[dict[str, str]]:
    """Each table of docs/interop.md's section on ``server`` (written by hand): check id to status."""
    section = DOC.read_text(encoding="utf-8").split(BY_HAND_HEADING, 1)[1].split(f"### {server}", 1)[1]
    tables: list[dict[str, str]] = [{}]
    for line in section.split("\n### ", 1)[0].splitlines():
        if row := OUTCOME_ROW.match(line):
            tables[-1][row["check"]] = row["status"]
        elif tables[-1]:
            tables.append({})
    return [table for table in tables if table]


@pytest.fixture
def fast_agent_example(tmp_path: Path) -> Path:
    """session_server.py, copied at run time out of the fast-agent sdist the Makefile downloaded beside its venv."""
    sdist = venv_of("fast-agent") / "sdist" / "fast_agent_mcp-0.5.3.tar.gz"
    if not sdist.exists():
        missing(f"{sdist} is missing: `make {sdist.parents[1]}/sdist/.downloaded` downloads it")
    with tarfile.open(sdist) as archive, archive.extractfile(FAST_AGENT_EXAMPLE) as example:  # type: ignore[union-attr]
        copy = tmp_path / "session_server.py"
        with copy.open("wb") as out:
            shutil.copyfileobj(example, out)
    return copy


@pytest.mark.parametrize("era", [["--spec-version", LEGACY], []], ids=[LEGACY, "no-option"])
def test_fast_agent_s_strawman_server_passes_the_default_run(fast_agent_example: Path, era: list[str]) -> None:
    """fast-agent 0.5.3's example speaks the strawman (experimental.session, session/*) on mcp 1.26, 2025-11-25 only:
    asked for no era, the pack judges it at the one it speaks (it refuses 2026-07-28 as such a server does)."""
    launcher = str(HERE / "_fast_agent_server.py")
    with thirdparty_server(venv_of("fast-agent"), launcher, str(fast_agent_example)) as base:
        run = conformance(base + "/mcp", *era)

    assert (run.code, run.statuses()) == (0, FAST_AGENT_OUTCOME), run.out
    if not era:
        assert f"The server speaks only {LEGACY} (it refused {MODERN} as such a server does): checked there." in run.out


@pytest.mark.parametrize("era", [[], ["--spec-version", LEGACY]], ids=["2026-07-28", LEGACY])
def test_ag2_s_mcp_server_advertises_no_session_wire_and_nothing_fails(era: list[str]) -> None:
    """ag2 1.2.1 continues a conversation by a handle of its own (``_meta["ai.ag2/conversation"]``), in no wire."""
    with thirdparty_server(venv_of("ag2"), str(HERE / "_ag2_server.py")) as base:
        run = conformance(base + "/mcp/", *era)  # /mcp answers 307 to /mcp/, which the pack does not follow

    assert (run.code, run.checks) == (0, []), run.out
    assert "The server advertises none of the session wires: nothing to check" in run.out
    for scenario in ("sessions-draft", "sessions-strawman"):
        assert f"SKIPPED: scenario '{scenario}': the server does not advertise it" in run.out


def test_ag2_s_conversation_handles_are_a_tool_s_and_work_on_2026_07_28() -> None:
    """What docs/interop.md says of ag2's handles, which no wire of the pack's has: minted, returned, continued."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Mcp-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "ask",  # 2026-07-28's routing headers, which mcp 2.3 checks against the body
    }
    with thirdparty_server(venv_of("ag2"), str(HERE / "_ag2_server.py")) as base, httpx.Client() as http:

        def ask(**arguments: str) -> dict[str, Any]:
            body = modern_request("tools/call", {"name": "ask", "arguments": {"message": "Hi.", **arguments}})
            answer = http.post(base + "/mcp/", json=body, headers=headers)
            assert answer.status_code == 200, answer.text
            result: dict[str, Any] = answer.json()["result"]
            return result

        first, other = ask(), ask()
        handle = first["_meta"]["ai.ag2/conversation"]
        continued = ask(conversation=handle)

    assert other["_meta"]["ai.ag2/conversation"] != handle  # a call naming none starts a new conversation
    assert continued["_meta"]["ai.ag2/conversation"] == handle
    assert any(handle in block["text"] for block in first["content"])  # in a text block too


def test_docs_interop_md_writes_down_each_outcome_these_tests_assert() -> None:
    assert outcome_tables("fast-agent 0.5.3") == [FAST_AGENT_OUTCOME]
    assert outcome_tables("ag2 1.2.1") == []  # no check runs

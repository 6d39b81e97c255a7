"""What a command shows of a server's answer: escaped, cut short, and read for a 2025-only refusal.

Two copies are held to the same cases: ``mcp-sessions create``'s and the conformance pack's, a
distribution of its own that imports nothing of mcp_sessions.
"""

from __future__ import annotations

import json
import unicodedata
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_sessions._cli import _create as middleware_answers
from mcp_sessions_conformance import _answers as pack_answers
from mcp_sessions_conformance._answers import json_printable

ACTING = {"Cc", "Cf", "Cs", "Zl", "Zp"}
COPIES = pytest.mark.parametrize("answers", [middleware_answers, pack_answers], ids=["mcp_sessions", "pack"])


@COPIES
@given(st.text())
def test_nothing_a_terminal_acts_on_is_left(answers: ModuleType, text: str) -> None:
    shown = answers.printable(text)

    assert not [char for char in shown if unicodedata.category(char) in ACTING]
    assert shown == text or any(unicodedata.category(char) in ACTING for char in text)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
        ("\x1b[2J", "\\x1b[2J"),
        ("\u009b31m", "\\x9b31m"),
        ("a\u202eb\x7f\x00\r\n\t", "a\\u202eb\\x7f\\x00\\r\\n\\t"),
        ("\ud800", "\\ud800"),
        ("plain, é, 日本, 🙂", "plain, é, 日本, 🙂"),
    ],
)
@COPIES
def test_printable_writes_what_it_escapes_as_python_does(answers: ModuleType, text: str, shown: str) -> None:
    assert answers.printable(text) == shown


@given(
    st.recursive(
        st.text() | st.integers() | st.none(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)
    )
)
def test_json_printable_is_the_same_json_and_shows_nothing_acting(value: object) -> None:
    text = json_printable(json.dumps(value, indent=2, ensure_ascii=False))

    assert json.loads(text) == value
    assert not [char for char in text if char not in "\n" and unicodedata.category(char) in ACTING]


@COPIES
def test_an_excerpt_is_one_bounded_line(answers: ModuleType) -> None:
    assert answers.excerpt(b'{"error":\n  {"message": "x"}}') == '{"error": {"message": "x"}}'
    long = answers.excerpt(b"y" * 100_000)
    assert long == "y" * answers.EXCERPT_CHARS + "…"
    assert answers.excerpt(b"\xff\xfe\x1b[2J") == "\ufffd\ufffd\\x1b[2J"


@pytest.mark.parametrize(
    ("status", "body", "refusal"),
    [
        (
            400,
            '{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Bad Request: Missing session ID"}}',
            True,
        ),
        (
            400,
            '{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},"id":null}',
            True,
        ),
        (400, '{"error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}', True),
        (400, "Bad Request: Unsupported protocol version: 2026-07-28", True),
        (404, '{"error":{"code":-32601,"message":"Method not found"}}', False),
        (400, '{"error":{"code":-32602,"message":"Invalid params"}}', False),
        (404, "Not Found: Invalid or expired session ID", False),
    ],
)
@COPIES
def test_a_2025_only_refusal_is_told_from_others(answers: ModuleType, status: int, body: str, refusal: bool) -> None:
    assert answers.handshake_only(status, body) is refusal

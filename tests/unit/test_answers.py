"""What a command shows of a server's answer: escaped, cut short, and read for a 2025-only refusal."""

from __future__ import annotations

import json
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_sessions._wire.answers import EXCERPT_CHARS, excerpt, handshake_only, json_printable, printable

ACTING = {"Cc", "Cf", "Cs", "Zl", "Zp"}


@given(st.text())
def test_nothing_a_terminal_acts_on_is_left(text: str) -> None:
    shown = printable(text)

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
def test_printable_writes_what_it_escapes_as_python_does(text: str, shown: str) -> None:
    assert printable(text) == shown


@given(
    st.recursive(
        st.text() | st.integers() | st.none(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)
    )
)
def test_json_printable_is_the_same_json_and_shows_nothing_acting(value: object) -> None:
    text = json_printable(json.dumps(value, indent=2, ensure_ascii=False))

    assert json.loads(text) == value
    assert not [char for char in text if char not in "\n" and unicodedata.category(char) in ACTING]


def test_an_excerpt_is_one_bounded_line() -> None:
    assert excerpt(b'{"error":\n  {"message": "x"}}') == '{"error": {"message": "x"}}'
    long = excerpt(b"y" * 100_000)
    assert long == "y" * EXCERPT_CHARS + "…"
    assert excerpt(b"\xff\xfe\x1b[2J") == "\ufffd\ufffd\\x1b[2J"


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
def test_a_2025_only_refusal_is_told_from_others(status: int, body: str, refusal: bool) -> None:
    assert handshake_only(status, body) is refusal

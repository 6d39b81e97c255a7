"""Content capture: what a tools/call's span may record of its arguments and result, redacted and bounded."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_sessions import KeySet
from mcp_sessions._otel._span import _SECRET, MAX_CONTENT_BYTES, REDACTED, TRUNCATED, bounded_content
from mcp_sessions.handles import _format as fmt

KEYS = KeySet.from_secret("a-secret-that-is-long-enough-for-hs256-0123456789")
SESSION_TOKEN, _ = KEYS.mint_session_token(ttl=60)
STATE_TOKEN = KEYS.sign_state("s" * 24, {"cart": ["apple", "pear"]})
LONG_STATE_TOKEN = KEYS.sign_state("s" * 24, {"notes": "n" * 2000})


def handle(prefix: str, random: bytes, tag: bytes) -> str:
    return fmt.encode(prefix, fmt.pack(flags=fmt.SESSION_FLAG, hint=3, expires_at=2_000_000_000, random=random), tag)


prefixes = st.from_regex(fmt.PREFIX_SHAPE, fullmatch=True)
handles = st.builds(handle, prefixes, st.binary(min_size=10, max_size=10), st.binary(min_size=11, max_size=11))
bearers = st.one_of(handles, st.sampled_from([SESSION_TOKEN, STATE_TOKEN, LONG_STATE_TOKEN]))
# Text a bearer value may sit in: words, token characters that run into it, JSON's own escapes.
fillers = st.text(alphabet=st.sampled_from('ab_-.Z9 "\\/\n{}:,é😀'), max_size=12)


FOUND: list[str] = []
"""The bearers put in the value being drawn: the strategies below append each, the test empties it before its draw.
One strategy, built once: a new one for each example (closing over a list of its own) cost hypothesis its
validation again each time, more than half of the test's CPU."""


@st.composite
def strings_with_bearers(draw: st.DrawFn) -> str:
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        bearer = draw(bearers)
        FOUND.append(bearer)
        parts += [draw(fillers), bearer]
    return "".join([*parts, draw(fillers)])


JSON_WITH_BEARERS = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), strings_with_bearers()),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(strings_with_bearers(), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_no_token_or_handle_survives_in_any_json(data: st.DataObject) -> None:
    FOUND.clear()
    value = data.draw(JSON_WITH_BEARERS)
    found = list(FOUND)
    text, whole = bounded_content(value)
    assert len(text.encode()) <= MAX_CONTENT_BYTES
    for bearer in found:
        assert bearer not in text
        for part in bearer.split("."):  # no segment of a token either: a header is public, a signature is not
            assert len(part) < 20 or part not in text
    assert _SECRET.search(text) is None
    if whole:
        json.loads(text)  # a whole value is JSON: viewers render it as such


@settings(max_examples=100, deadline=None)
@given(handles)
def test_the_handle_shape_matches_every_handle_the_format_makes(minted: str) -> None:
    assert re.fullmatch(fmt.pattern(minted.split("_", 1)[0]), minted)
    assert _SECRET.fullmatch(minted)


def test_a_bearer_cut_by_the_bound_leaves_no_part_of_itself() -> None:
    for pad in range(MAX_CONTENT_BYTES - len(SESSION_TOKEN) - 20, MAX_CONTENT_BYTES + 20, 7):
        text, _ = bounded_content({"padding": "x " * (pad // 2), "token": SESSION_TOKEN + "-tail"})
        assert SESSION_TOKEN.rsplit(".", 1)[1][:12] not in text
        assert len(text.encode()) <= MAX_CONTENT_BYTES


def test_a_long_value_is_cut_at_the_bound_with_the_marker() -> None:
    text, whole = bounded_content({"text": "é" * 10_000})
    assert not whole
    assert text.endswith(TRUNCATED)
    assert MAX_CONTENT_BYTES - 4 <= len(text.encode()) <= MAX_CONTENT_BYTES
    huge, _ = bounded_content({"data": "A" * 5_000_000})  # one run of token characters, far past the bound
    assert len(huge.encode()) <= MAX_CONTENT_BYTES


OPAQUE = "an-opaque-session-value-of-forty-chars-xyz"  # a token of the call's own, of no shape a pattern finds


@pytest.mark.parametrize(
    ("value", "known", "expected"),
    [
        ({"city": "Paris"}, (), '{"city":"Paris"}'),
        ({"sessionId": SESSION_TOKEN}, (), f'{{"sessionId":"{REDACTED}"}}'),
        ({"note": f"my token is {STATE_TOKEN}."}, (), f'{{"note":"my token is {REDACTED}"}}'),
        ({"snake_case_identifier_that_is_long_enough": 1}, (), '{"snake_case_identifier_that_is_long_enough":1}'),
        ({"lone": "\ud800"}, (), '{"lone":"\\ud800"}'),
        ({"x": OPAQUE}, (OPAQUE,), f'{{"x":"{REDACTED}"}}'),  # the call's own tokens, whatever their shape
    ],
)
def test_what_is_kept_and_what_is_redacted(value: object, known: tuple[str, ...], expected: str) -> None:
    assert bounded_content(value, known) == (expected, True)

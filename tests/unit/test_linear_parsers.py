"""The parsers and redactors that read client strings take time linear in their input: nothing here is timed.

Two checks, both deterministic. First, the shape of every regular expression these modules hold: a pattern
that is a flat sequence of single characters (a literal, a class), each repeated a fixed number of times but
for at most one, which is bounded or else the whole pattern, leaves the matcher no choice to backtrack
through: each start position costs at most the pattern's width (times its one bounded range) or the length of
one run of its class, which a search then steps over. ``linear`` checks that shape on the parse tree that
``re.compile`` builds, and is shown to refuse the patterns these modules used to hold (``OLD_PATTERNS``). The
rest of each parser is ``str`` methods (``split``, ``partition``, ``strip``, ``in``), each one pass. Second,
each parser or redactor agrees with a reference written for clarity (a grammar transcribed as a regular
expression, a run-by-run scan with ``itertools.groupby``) on generated inputs shaped like the attacks: runs of
whitespace before a stray quote, ``eyJ`` repeated with no dot after it, handles, long runs, and the attacks.
"""

from __future__ import annotations

import importlib
import re
import types
from itertools import groupby
from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_sessions import KeySet
from mcp_sessions._otel import _span as _redact
from mcp_sessions._otel._span import MAX_CONTENT_BYTES, REDACTED, TRUNCATED, bounded_content
from mcp_sessions.handles import _format as fmt
from mcp_sessions.sources import _host
from mcp_sessions.sources._host import MAX_BAGGAGE_BYTES, MAX_BAGGAGE_MEMBERS, baggage_member

# The parser re.compile itself uses (typeshed does not describe it).
_PARSER: Any = importlib.import_module("re._parser")
_CHARACTER = {"LITERAL", "NOT_LITERAL", "IN", "ANY"}
_REPEAT = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}

MEMBER = "gen_ai.conversation.id"
MAX_MEMBER_BYTES = 4096  # OpenTelemetry's W3C baggage propagator: the most bytes of one list-member
KEYS = KeySet.from_secret("a-secret-that-is-long-enough-for-hs256-0123456789")
SESSION_TOKEN, _ = KEYS.mint_session_token(ttl=60)
BASE64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
SPAN_VALUE_CHARS = 256  # the most characters of a client-chosen string a span keeps (docs/observability.md)


def linear(pattern: re.Pattern[str]) -> bool:
    """Whether ``pattern`` is flat: single characters, at most one repeated a variable number of times (bounded,
    or else alone)."""
    items = [(op.name, argument) for op, argument in _PARSER.parse(pattern.pattern, pattern.flags)]
    variable: list[int] = []
    for name, argument in items:
        if name in _REPEAT:
            low, high, body = argument
            if len(body) != 1 or body[0][0].name not in _CHARACTER:
                return False
            if low != high:
                variable.append(high)
        elif name not in _CHARACTER:
            return False
    if not variable:
        return True
    return len(variable) == 1 and (variable[0] != _PARSER.MAXREPEAT or len(items) == 1)


# Patterns that backtrack, or rescan, superlinearly on some input: what these modules held before, and two more.
OLD_PATTERNS = [
    # The baggage member (empty value between two runs of optional whitespace).
    r"[ \t]*([!#$%&'*+\-.^_`|~0-9A-Za-z]+)[ \t]*=[ \t]*([!#-+\--:<-\[\]-~]*)[ \t]*"
    r"(?:;[ \t]*[!#$%&'*+\-.^_`|~0-9A-Za-z]+[ \t]*(?:=[ \t]*[!#-+\--:<-\[\]-~]*[ \t]*)?)*",
    # Content capture's secret (every eyJ scanned to the end of its run), and the status redaction's JWS.
    r"eyJ[A-Za-z0-9_-]*\.|[a-z][a-z0-9]{0,3}_[A-Za-z0-9_-]{34}[AEIMQUYcgkosw048]",
    r"eyJ[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*)*",
    # OpenTelemetry's baggage delimiter, as re.split uses it: every space rescanned from each start.
    r"[ \t]*,[ \t]*",
    r"(a+)+b",
]


@pytest.mark.parametrize("pattern", OLD_PATTERNS)
def test_the_shape_check_refuses_patterns_that_backtrack(pattern: str) -> None:
    assert not linear(re.compile(pattern))


@pytest.mark.parametrize("pattern", [r"[A-Za-z0-9_-]+", r"[A-Za-z0-9_.\-]{37,}", fmt.pattern("bsk")[1:-1], r"a_b"])
def test_the_shape_check_accepts_flat_patterns(pattern: str) -> None:
    assert linear(re.compile(pattern))


@pytest.mark.parametrize("module", [_host, _redact], ids=lambda module: module.__name__)
def test_every_pattern_that_reads_client_strings_is_linear(module: types.ModuleType) -> None:
    patterns = [value for value in vars(module).values() if isinstance(value, re.Pattern)]
    assert [pattern.pattern for pattern in patterns if not linear(pattern)] == []


# -- W3C baggage -----------------------------------------------------------------------------------

# The Recommendation's list-member, transcribed (quadratic at worst: a reference for short inputs only):
# OWS key OWS "=" OWS value OWS *( ";" OWS key OWS [ "=" OWS value OWS ] )
_OWS = r"[ \t]*"
_KEY = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_VALUE = r"[!#-+\--:<-\[\]-~]*"
W3C_MEMBER = re.compile(
    rf"{_OWS}({_KEY}){_OWS}={_OWS}({_VALUE}){_OWS}(?:;{_OWS}{_KEY}{_OWS}(?:={_OWS}{_VALUE}{_OWS})?)*"
)


def reference_member(baggage: str, key: str) -> str | None:
    """The first ``key`` member's raw value, from baggage every member of which is well-formed and within bounds."""
    if len(baggage) > MAX_BAGGAGE_BYTES or not baggage.isascii():
        return None
    members = baggage.split(",")
    if len(members) > MAX_BAGGAGE_MEMBERS or any(len(member) > MAX_MEMBER_BYTES for member in members):
        return None
    matches = [W3C_MEMBER.fullmatch(member) for member in members]
    if any(match is None for match in matches):
        return None
    return next((match[2] for match in matches if match is not None and match[1] == key), None)


# Pieces a member is made of, and what breaks one: OWS, delimiters, quotes, backslashes, non-ASCII.
baggage_pieces = st.sampled_from(
    [MEMBER, "k", "p", "=", "v", "conv-1", "%2F", "==", ";", ",", " ", "\t", "  ", '"', "\\", "é", "\n", "(k)"]
)
baggages = st.lists(baggage_pieces, max_size=24).map("".join)


@settings(max_examples=500, deadline=None)
@given(baggages)
def test_a_baggage_member_is_read_as_the_grammar_reads_it(baggage: str) -> None:
    expected = reference_member(baggage, MEMBER)
    read = baggage_member(baggage)
    assert read == (None if expected is None else unquote(expected, errors="replace"))


@pytest.mark.parametrize(
    ("baggage", "value"),
    [
        # The attack: an empty value, 8,100 spaces, a stray quote (as a header, and as _meta["baggage"]).
        (f"{MEMBER}=" + " " * 8100 + '"', None),
        (f"{MEMBER}=" + " " * 4000 + '"', None),
        (f"{MEMBER}=conv-1;p=" + "\t" * 4000 + ";q", "conv-1"),
        (f"{MEMBER} =" + " " * 4000 + "conv-1" + " " * 60, "conv-1"),
        # A list-member longer than OpenTelemetry's propagator keeps: the whole baggage is ignored.
        (f"{MEMBER}=conv-1,k=" + "v" * (MAX_MEMBER_BYTES - 2), "conv-1"),
        (f"{MEMBER}=conv-1,k=" + "v" * (MAX_MEMBER_BYTES - 1), None),
    ],
)
def test_the_attacks_and_the_member_bound(baggage: str, value: str | None) -> None:
    assert baggage_member(baggage) == value


# -- content capture ---------------------------------------------------------------------------------

_RUN_CHARS = BASE64URL + "."
_SHORTEST_RUN = 37  # the shortest handle: a one-letter prefix, "_", 35 characters


def holds_handle(run: str) -> bool:
    """Whether a handle (handles/_format.py: a prefix, "_", a canonical payload) is somewhere in ``run``."""
    for end in (index for index, char in enumerate(run) if char == "_"):
        payload = run[end + 1 : end + 1 + fmt.PAYLOAD_CHARS]
        prefixes = (run[end - size : end] for size in range(1, fmt.MAX_PREFIX_CHARS + 1) if size <= end)
        if fmt.decode(payload) is not None and any(fmt.PREFIX_SHAPE.fullmatch(prefix) for prefix in prefixes):
            return True
    return False


def reference_content(text: str) -> str:
    """One string of captured content: cut outside a run, then each run long enough holding eyJ or a handle redacted."""
    if len(text) > MAX_CONTENT_BYTES:
        text = text[:MAX_CONTENT_BYTES].rstrip(_RUN_CHARS) + TRUNCATED
    kept = []
    for in_run, chars in groupby(text, key=lambda char: char in _RUN_CHARS):
        run = "".join(chars)
        secret = in_run and len(run) >= _SHORTEST_RUN and ("eyJ" in run or holds_handle(run))
        kept.append(REDACTED if secret else run)
    return "".join(kept)


def handle(prefix: str, random: bytes) -> str:
    return fmt.encode(prefix, fmt.pack(flags=0, hint=1, expires_at=2_000_000_000, random=random), b"\x07" * 11)


content_pieces = st.one_of(
    st.sampled_from(["eyJ", "eyJ" * 20, ".", "_", "-", "a", "Z9", " ", "/", '"', "é", "A" * 36, "x" * 40, "bsk_"]),
    st.builds(handle, st.from_regex(fmt.PREFIX_SHAPE, fullmatch=True), st.binary(min_size=10, max_size=10)),
    st.just(SESSION_TOKEN),
)
contents = st.lists(content_pieces, max_size=30).map("".join)


@settings(max_examples=500, deadline=None)
@given(contents)
def test_captured_content_is_redacted_as_the_reference_scan_says(text: str) -> None:
    assert _redact._redacted_text(text, ()) == reference_content(text)


def test_the_content_attack_is_redacted_whole() -> None:
    text, _ = bounded_content({"a": ["eyJ" * 1365] * 300})  # 1.2 MiB of arguments, no dot anywhere
    assert text.startswith(f'{{"a":["{REDACTED}","{REDACTED}"')
    assert "eyJ" not in text


# -- span values -------------------------------------------------------------------------------------


def reference_span_value(text: str) -> str:
    """A client-chosen string on a span: cut outside a run, then each run holding eyJ or 32 characters long redacted."""
    if len(text) > SPAN_VALUE_CHARS:
        text = text[: SPAN_VALUE_CHARS - len(TRUNCATED)].rstrip(BASE64URL) + TRUNCATED
    kept = []
    for in_run, chars in groupby(text, key=lambda char: char in BASE64URL):
        run = "".join(chars)
        kept.append(REDACTED if in_run and (len(run) >= 32 or "eyJ" in run) else run)
    return "".join(kept)


@settings(max_examples=500, deadline=None)
@given(st.lists(content_pieces, max_size=30).map("".join))
def test_a_span_value_is_redacted_as_the_reference_scan_says(text: str) -> None:
    assert _redact.redacted_string(text) == reference_span_value(text)

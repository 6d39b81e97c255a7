"""What the property tests under tests/ feed the code that reads attacker-controlled bytes.

Hypothesis settings (``FUZZ``: derandomized and bounded), the tokens and states of one deployment, and
strategies for JSON values, JSON-RPC messages, encoded bodies and messages with repeated member names.
"""

from __future__ import annotations

import json
import time
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from _mcp import MODERN, SESSION_KEY
from conftest import SECRET
from mcp_sessions import KeySet
from mcp_sessions._session import digest_of

PATH_NAMES = ("params", "_meta", SESSION_KEY, "sessionId", "state")

# Report one bug a test, shrunk: hunting and shrinking every distinct bug at once can take minutes.
FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    report_multiple_bugs=False,
    suppress_health_check=list(HealthCheck),
)

KEYS = KeySet.from_secret(SECRET)
NOW = time.time()
VALID = [KEYS.mint_session_token(ttl=3600)[0] for _ in range(3)]
REVOKED = KEYS.mint_session_token(ttl=3600)[0]  # revoked in every store below
BOUND = KEYS.mint_session_token(ttl=3600, extra_claims={"pbh": "bound-to-someone"})[0]  # no principal here
# Bound to alice, as a session she created while signed in: usable by alice only.
ALICE = KEYS.mint_session_token(ttl=3600, extra_claims={"pbh": digest_of("alice", KEYS.audience)})[0]
EXPIRED = KEYS.mint_session_token(ttl=60, now=NOW - 3600)[0]
FOREIGN = KeySet.from_secret(SECRET, audience="elsewhere").mint_session_token(ttl=3600)[0]
SIDS = {token: KEYS.verify_session_token(token).session_id for token in [*VALID, REVOKED, BOUND, ALICE]}
STATES = {token: KEYS.sign_state(SIDS[token], {"mode": "m"}) for token in VALID}
TOKENS = [*VALID, REVOKED, BOUND, ALICE, EXPIRED, FOREIGN, "a.b.c", "sess-abc123", ""]


# What a real client sends with every POST: the wrapped server (and so the guard) refuses one without them.
CLIENT_HEADERS = [(b"host", b"127.0.0.1:8000"), (b"accept", b"application/json, text/event-stream")]
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}


def usable(token: Any, state: Any = None, user: str | None = None) -> bool:
    """Independently of the middleware: would this session metadata name a live session of this deployment,
    for this caller (``user``, the name a request was authenticated as)?"""
    if token == ALICE:
        return user == "alice" and state is None
    if token not in VALID:
        return False
    return state is None or state == STATES[token]


# -- strategies --------------------------------------------------------------------------------

# Text with lone surrogates too: JSON carries them as escapes (\ud800), and json.loads returns them.
# (st.text() never yields surrogates, whatever its alphabet: join the characters by hand.)
surrogates = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])
texts = st.lists(
    st.integers(min_value=0, max_value=7).flatmap(lambda i: surrogates if i == 7 else st.characters()), max_size=8
).map("".join)
leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3), max_leaves=10
)


def mostly(well_formed: st.SearchStrategy[Any], anything: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Well-formed three times in four, so that the examples reach the session checks (and shrink towards it)."""
    return st.integers(min_value=0, max_value=3).flatmap(lambda i: anything if i == 3 else well_formed)


session_values = mostly(
    st.fixed_dictionaries(
        {"sessionId": st.sampled_from(TOKENS) | texts},
        optional={"state": st.sampled_from([*STATES.values(), "x.y.z"]) | json_values, "expiresAt": json_values},
    ),
    json_values,
)
metas = mostly(st.fixed_dictionaries({SESSION_KEY: session_values}, optional={"traceparent": texts}), json_values)
params = mostly(
    st.fixed_dictionaries(
        {"_meta": metas}, optional={"name": st.sampled_from(["t", "count"]) | json_values, "arguments": json_values}
    ),
    json_values,
)
methods = st.sampled_from(["tools/call", "sessions/create", "sessions/delete", "notifications/progress"])
MISSING: Any = object()


def message(jsonrpc: Any, method: Any, request_id: Any, params: Any) -> dict[str, Any]:
    built = {"jsonrpc": jsonrpc, "method": method, "id": request_id, "params": params}
    return {name: value for name, value in built.items() if value is not MISSING}


messages = st.builds(
    message,
    mostly(st.just("2.0"), json_values),
    mostly(methods, texts),
    mostly(st.integers() | texts, st.just(MISSING)) | json_values,  # MISSING: a notification
    mostly(params, st.just(MISSING)),
)
bodies_json = messages | st.lists(messages, min_size=1, max_size=3) | json_values


# The strategies a composite draws from are built once, here, not in it: one built at each draw is validated
# again by hypothesis at each draw, a tenth of the fuzz tests' CPU (the examples are the same).
encodings = mostly(st.just("utf-8"), st.sampled_from(["utf-8-sig", "utf-16-le", "utf-16-be", "utf-32"]))


@st.composite
def encoded(draw: st.DrawFn, values: st.SearchStrategy[Any]) -> bytes:
    """A JSON value as bytes in any encoding ``json.loads(bytes)`` accepts (what the SDK runs on 2026-07-28)."""
    value = draw(values)
    ascii_only = draw(st.booleans())
    text = json.dumps(value, ensure_ascii=ascii_only)
    encoding = draw(encodings)
    return text.encode(encoding, "surrogatepass")


def parse_like_the_sdk(body: bytes) -> Any:
    """What ``json.loads(bytes)`` reads, or a sentinel when it reads nothing."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return NOT_JSON


NOT_JSON: Any = object()


# -- (a) the JSON-RPC reader ----------------------------------------------------------------------


class Pairs(list[tuple[str, Any]]):
    """A JSON object written member by member, so that a name can appear twice."""


def expected_decision(message: Pairs) -> tuple[str, Any]:
    """The rules of docs/wire.md, walked independently: ("none" | "invalid" | "session", metadata).

    Returns "repeated" when a name on the path repeats but the body names no session anywhere:
    either answer is fine then (no session can be confused).
    """
    obj: Any = message
    for name in PATH_NAMES[:3]:
        if not isinstance(obj, Pairs):
            return ("none", None)
        names = [n for n, _ in obj]
        if names.count(name) > 1:
            return ("invalid" if _names_anywhere(message, SESSION_KEY) else "repeated", None)
        obj = dict(obj).get(name)
        if name == SESSION_KEY and obj is None:
            return ("none", None)
    if not isinstance(obj, Pairs):
        return ("invalid", None)
    names = [n for n, _ in obj]
    if names.count("sessionId") > 1 or names.count("state") > 1:
        return ("invalid", None)
    session = dict(obj)
    if type(session.get("sessionId")) is not str:
        return ("invalid", None)
    if session.get("state") is not None and type(session["state"]) is not str:
        return ("invalid", None)
    return ("session", session)


def _names_anywhere(value: Any, name: str) -> bool:
    if isinstance(value, Pairs):
        return any(n == name or _names_anywhere(v, name) for n, v in value)
    if isinstance(value, list):
        return any(_names_anywhere(v, name) for v in value)
    return False


def write(value: Any, escapes: list[bool]) -> str:
    """JSON text; member names are sometimes written with a \\u escape (``escapes`` decides, in turn)."""
    if isinstance(value, Pairs):
        members = []
        for name, member in value:
            escaped = escapes.pop() if escapes else False
            written = f'"\\u{ord(name[0]):04x}{name[1:]}"' if escaped else json.dumps(name)
            members.append(f"{written}:{write(member, escapes)}")
        return "{" + ",".join(members) + "}"
    if isinstance(value, list):
        return "[" + ",".join(write(v, escapes) for v in value) + "]"
    return json.dumps(value)


def pairs_of(names: st.SearchStrategy[str], values: st.SearchStrategy[Any]) -> st.SearchStrategy[Pairs]:
    return st.lists(st.tuples(names, values), max_size=4).map(Pairs)


session_pairs = pairs_of(
    st.sampled_from(["sessionId", "state", "expiresAt"]),
    st.sampled_from([*TOKENS, *STATES.values()]) | json_values,
)
meta_pairs = pairs_of(st.sampled_from([SESSION_KEY, "traceparent", "x"]), session_pairs | json_values)
params_pairs = pairs_of(st.sampled_from(["_meta", "name", "arguments"]), meta_pairs | json_values)


message_pairs = pairs_of(st.sampled_from(["params", "x"]), params_pairs | json_values)
escape_choices = st.lists(st.booleans(), max_size=12)


@st.composite
def pair_messages(draw: st.DrawFn) -> tuple[Pairs, str]:
    message = Pairs([("jsonrpc", "2.0"), ("id", 7), ("method", "tools/call")])
    message += draw(message_pairs)
    escapes = draw(escape_choices)
    return message, write(message, escapes)

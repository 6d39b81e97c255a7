"""Property tests of everything that reads attacker-controlled bytes: the JSON-RPC reader, the token verifier, and
the whole middleware through direct ASGI calls. The SSE rewriter has its own in tests/unit/test_sse.py.

Hypothesis runs derandomized (the same examples on every run) and bounded; the file takes a few seconds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from hypothesis import event, given, settings
from hypothesis import strategies as st
from starlette.authentication import SimpleUser
from starlette.requests import Request

from _mcp import LEGACY, MODERN, SESSION_KEY, AnswersProbes, b64, hs_jws
from asgi._fuzz import (
    ALICE,
    CLIENT_HEADERS,
    ENVELOPE,
    FUZZ,
    KEYS,
    NOT_JSON,
    NOW,
    PATH_NAMES,
    REVOKED,
    SIDS,
    STATES,
    TOKENS,
    VALID,
    Pairs,
    bodies_json,
    encoded,
    expected_decision,
    json_values,
    messages,
    mostly,
    pair_messages,
    parse_like_the_sdk,
    texts,
    usable,
)
from conftest import SECRET, signer_of
from mcp_sessions import InvalidToken, KeySet, MCPSessionMiddleware, SessionKey, get_session
from mcp_sessions._wire import jsonrpc
from mcp_sessions.profiles import DRAFT
from mcp_sessions.profiles._carriers import InvalidSessionMeta
from mcp_sessions.stores import MemoryStore

from ._direct import Receiver, Sender, http_scope


@FUZZ
@given(body=st.binary(max_size=300) | encoded(bodies_json))
def test_loads_never_raises(body: bytes) -> None:
    jsonrpc.loads(body)


@FUZZ
@given(body=encoded(bodies_json))
def test_loads_reads_every_body_the_sdk_reads_and_reads_it_the_same(body: bytes) -> None:
    """A body the server would parse but the middleware would not is a body the middleware never checks."""
    expected = parse_like_the_sdk(body)
    if expected is not NOT_JSON:
        assert jsonrpc.loads(body) == expected


@FUZZ
@given(message=st.dictionaries(st.sampled_from([*PATH_NAMES, "id", "x"]), json_values) | messages)
def test_session_meta_raises_only_invalid_session_meta(message: dict[str, Any]) -> None:
    try:
        meta = DRAFT.carrier.read(message)
    except InvalidSessionMeta:
        return
    assert meta is None or type(meta.token) is str


@FUZZ
@given(case=pair_messages())
def test_session_meta_follows_the_rules_even_with_repeated_names(case: tuple[Pairs, str]) -> None:
    message, text = case
    expected, session = expected_decision(message)
    parsed = jsonrpc.loads(text.encode("utf-8", "surrogatepass"))
    assert isinstance(parsed, dict)
    try:
        meta = DRAFT.carrier.read(parsed)
    except InvalidSessionMeta:
        assert expected in ("invalid", "repeated")
        return
    assert expected in ("none", "session", "repeated")
    if expected == "none":
        assert meta is None
    elif expected == "session":
        assert meta is not None
        assert meta.token == session["sessionId"]


@FUZZ
@given(case=pair_messages(), modern=st.booleans())
def test_the_middleware_decides_as_the_rules_say(case: tuple[Pairs, str], modern: bool) -> None:
    message, text = case
    expected, session = expected_decision(message)
    headers = [(b"content-type", b"application/json")]
    if modern:
        headers.append((b"mcp-protocol-version", MODERN.encode()))
    middleware = MCPSessionMiddleware(AnswersProbes(Downstream()), keys=KEYS, store=store())
    outcome = run(middleware, text.encode("utf-8", "surrogatepass"), headers)
    if expected == "invalid":
        assert (outcome.status, outcome.code, outcome.forwarded) == (400 if modern else 200, -32600, False)
    elif expected == "none":
        assert outcome.forwarded
        assert outcome.session is None
    elif expected == "session" and usable(session.get("sessionId"), session.get("state")):
        assert outcome.forwarded
        assert outcome.session == SIDS[session["sessionId"]]
    elif expected == "session":
        assert (outcome.status, outcome.code, outcome.forwarded) == (200, -32043, False)
    else:
        assert outcome.code == -32600 or (outcome.forwarded and outcome.session is None)


# -- (b) the token verifier --------------------------------------------------------------------------

ED_KEYS = KeySet([SessionKey.from_private_key(ed25519.Ed25519PrivateKey.generate(), kid="ed-1")])
# ES256 is left out of the mutation property on purpose: an ECDSA signature (r, s) has a twin (r, n - s) that
# verifies too. Random mutations never find it; tests/e2e/test_attacks.py shows it, docs/security.md explains it.
MINTED = {
    "hs256": (KEYS, KEYS.mint_session_token(ttl=3600)[0]),
    "eddsa": (ED_KEYS, ED_KEYS.mint_session_token(ttl=3600)[0]),
}
BASE64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def verify_or_invalid(verify: Callable[[], Any]) -> Any:
    """The verifier's answer, or None when it raised InvalidToken: anything else escaping fails the test."""
    try:
        return verify()
    except InvalidToken:
        return None


segments = st.binary(max_size=60).map(b64) | st.text(BASE64URL, max_size=60)
headers = st.fixed_dictionaries(
    {},
    optional={
        "alg": st.sampled_from(["HS256", "ES256", "EdDSA", "none", "HS512"]) | json_values,
        "kid": st.sampled_from([signer_of(KEYS).kid, "ed-1"]) | json_values,
        "typ": st.sampled_from(["mcp-session+jwt", "mcp-session-state+jwt", "JWT"]) | json_values,
        "crit": json_values,
        "jku": json_values,
    },
)
claim_sets = st.fixed_dictionaries(
    {},
    optional={
        "iss": st.just("mcp-sessions") | json_values,
        "aud": st.just("mcp-sessions") | json_values,
        "sid": st.just("A" * 24) | json_values,
        "iat": st.just(int(NOW)) | json_values,
        "exp": st.just(int(NOW) + 600) | json_values,
        "nbf": json_values,
        "st": json_values,
    },
)


@FUZZ
@given(token=texts | st.text(max_size=3000) | st.tuples(segments, segments, segments).map(".".join))
def test_arbitrary_text_is_only_ever_an_invalid_token(token: str) -> None:
    assert verify_or_invalid(lambda: KEYS.verify_session_token(token)) is None
    assert verify_or_invalid(lambda: KEYS.verify_state("A" * 24, token)) is None


@FUZZ
@given(header=headers, payload=claim_sets | json_values, signature=segments)
def test_arbitrary_headers_and_claims_are_only_ever_an_invalid_token(header: Any, payload: Any, signature: str) -> None:
    token = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}.{signature}"
    assert verify_or_invalid(lambda: KEYS.verify_session_token(token)) is None
    assert verify_or_invalid(lambda: KEYS.verify_state("A" * 24, token)) is None


@FUZZ
@given(header=headers, payload=claim_sets)
def test_signed_with_our_key_any_claims_give_typed_claims_or_an_invalid_token(header: Any, payload: Any) -> None:
    """Even a validly signed token with hostile claims never escapes as anything but InvalidToken."""
    token = hs_jws(header, payload, SECRET.encode())
    claims = verify_or_invalid(lambda: KeySet.from_secret(SECRET).verify_session_token(token))
    if claims is not None:
        assert type(claims.session_id) is str
        assert type(claims.issued_at) is int
        assert type(claims.expires_at) is int
        assert header.get("typ") == "mcp-session+jwt"
        assert header.get("alg") == "HS256"
    state = verify_or_invalid(lambda: KeySet.from_secret(SECRET).verify_state("A" * 24, token))
    assert state is None or isinstance(json.loads(state), dict)


@st.composite
def mutations(draw: st.DrawFn, token: str) -> str:
    """``token`` with one to three edits: bit flips, replacements, cuts, insertions, appends, parts swapped."""
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        kind = draw(st.sampled_from(["flip", "replace", "cut", "insert", "append", "truncate", "swap", "dots"]))
        position = draw(st.integers(min_value=0, max_value=max(len(token) - 1, 0)))
        if kind == "flip" and token:
            flipped = ord(token[position]) ^ (1 << draw(st.integers(min_value=0, max_value=6)))
            token = token[:position] + chr(flipped) + token[position + 1 :]
        elif kind == "replace" and token:
            token = token[:position] + draw(st.sampled_from(BASE64URL)) + token[position + 1 :]
        elif kind == "cut":
            token = token[:position] + token[position + draw(st.integers(min_value=1, max_value=8)) :]
        elif kind == "insert":
            token = token[:position] + draw(st.text(BASE64URL + ".=", min_size=1, max_size=4)) + token[position:]
        elif kind == "append":
            token += draw(st.text(BASE64URL + ".=", min_size=1, max_size=8))
        elif kind == "truncate":
            token = token[:position]
        elif kind == "swap":
            parts = token.split(".")
            token = ".".join(draw(st.permutations(parts)))
        else:
            token = token.replace(".", draw(st.sampled_from(["", "..", "_", "%2E"])), 1)
    return token


@FUZZ
@given(data=st.data(), algorithm=st.sampled_from(sorted(MINTED)))
def test_no_mutation_of_a_valid_session_id_verifies(data: st.DataObject, algorithm: str) -> None:
    keys, token = MINTED[algorithm]
    mutated = data.draw(mutations(token))
    verifier = KeySet(keys.keys, issuer=keys.issuer, audience=keys.audience)  # an empty cache
    claims = verify_or_invalid(lambda: verifier.verify_session_token(mutated))
    assert (claims is not None) == (mutated == token)


@FUZZ
@given(data=st.data())
def test_no_mutation_of_a_valid_state_verifies(data: st.DataObject) -> None:
    token = STATES[VALID[0]]
    mutated = data.draw(mutations(token))
    state = verify_or_invalid(lambda: KeySet.from_secret(SECRET).verify_state(SIDS[VALID[0]], mutated))
    assert (state is not None) == (mutated == token)


# -- (c) the whole middleware, through direct ASGI calls ----------------------------------------------

DOCUMENTED_STATUSES = {200, 202, 400, 404, 413, 503}
# The server's own refusals, which the guard repeats: Host, Origin (text bodies), Accept, Content-Type.
SERVER_STATUSES = {421, 403, 406, 415}


class Downstream:
    """Records what reaches the application, and answers one JSON-RPC result."""

    def __init__(self, result: Any = None, *, indent: int | None = None) -> None:
        self.result = {} if result is None else result
        self.indent = indent
        self.calls: list[tuple[dict[str, Any], bytes, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = await Request(scope, receive).body()
        session = get_session()
        self.calls.append((scope, body, None if session is None else session.token))
        parsed = parse_like_the_sdk(body)
        request_id = parsed.get("id") if isinstance(parsed, dict) else None
        payload = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": self.result}, indent=self.indent).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


class Outcome:
    def __init__(self, downstream: Downstream, sent: Sender) -> None:
        self.status, self.headers, self.body = sent.status, dict(sent.headers), sent.body  # one response start
        length = self.headers.get(b"content-length")  # whoever answered, a length that is there is the body's
        assert length is None or int(length) == len(self.body), (length, len(self.body))
        self.forwarded = bool(downstream.calls)
        self.session = None
        if downstream.calls and (token := downstream.calls[-1][2]) is not None:
            self.session = SIDS.get(token, token)
        is_json = self.headers.get(b"content-type") == b"application/json"
        answer = json.loads(self.body) if self.body and is_json and not self.forwarded else None
        self.code = answer["error"]["code"] if isinstance(answer, dict) and "error" in answer else None


def store(max_sessions: int = 100) -> MemoryStore:
    """A store where REVOKED was deleted; with ``max_sessions=1`` that entry fills it, so creation answers 503."""
    memory = MemoryStore(max_sessions=max_sessions)
    anyio.run(lambda: memory.revoke(SIDS[REVOKED], expires_at=NOW + 3600))
    return memory


def run(
    middleware: MCPSessionMiddleware,
    body: bytes,
    headers: list[tuple[bytes, bytes]],
    *,
    chunks: list[int] | None = None,
    method: str = "POST",
    user: str | None = None,
) -> Outcome:
    cuts = sorted({min(c, len(body)) for c in chunks or []})
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    scope = http_scope(method, headers=headers)
    if user is not None:  # as Starlette's AuthenticationMiddleware leaves it
        scope["user"] = SimpleUser(user)
    sender = Sender()
    anyio.run(middleware, scope, Receiver(*pieces), sender)
    probes = middleware.app
    assert isinstance(probes, AnswersProbes)
    downstream = probes.app
    assert isinstance(downstream, Downstream)
    return Outcome(downstream, sender)


content_types = st.sampled_from(
    [b"application/json"] * 4
    + [b"application/json; charset=utf-8", b"APPLICATION/JSON", b"application/jsonx", b"text/plain"]
)


# What requests() draws from, built once (as asgi._fuzz's composites' are: one built at each draw is validated again).
request_bodies = mostly(
    encoded(messages),
    st.one_of(encoded(st.lists(messages, min_size=1, max_size=3)), encoded(json_values), st.binary(max_size=200)),
)
request_content_types = st.lists(content_types, min_size=1, max_size=2)
versions = st.sampled_from([None, MODERN, LEGACY, "garbage"])
header_values = st.sampled_from([*TOKENS, "sessions/create", "tools/call"])
hosts = mostly(st.just(b"127.0.0.1:8000"), st.sampled_from([b"evil.example", b""]))
accepts = mostly(st.just(CLIENT_HEADERS[1][1]), st.sampled_from([b"text/html", b"*/*"]))
origins = st.sampled_from([b"http://localhost:3000", b"https://evil.example"])


@st.composite
def requests(draw: st.DrawFn) -> tuple[bytes, list[tuple[bytes, bytes]], list[int], str]:
    body = draw(request_bodies)
    headers = [(b"content-type", value) for value in draw(request_content_types)]
    version = draw(versions)
    if version is not None:
        headers.append((b"mcp-protocol-version", version.encode()))
    for name in ("mcp-session-id", "mcp-method"):
        if draw(st.booleans()):
            value = draw(header_values)
            headers.append((name.encode(), value.encode()))
    headers.append((b"host", draw(hosts)))
    headers.append((b"accept", draw(accepts)))
    if draw(st.integers(min_value=0, max_value=7)) == 0:
        headers.append((b"origin", draw(origins)))
    headers = draw(st.permutations(headers))
    chunks = draw(st.lists(st.integers(min_value=0, max_value=len(body)), max_size=4))
    return body, headers, chunks, draw(st.sampled_from(["POST"] * 7 + ["GET"]))


@settings(FUZZ, max_examples=300)
@given(
    request=requests(),
    require_session=st.booleans(),
    max_body_size=mostly(st.just(4 * 1024 * 1024), st.just(128)),
    max_sessions=st.sampled_from([1, 100]),
    result=json_values,
    user=st.sampled_from([None, None, "alice", "bob"]),
)
def test_the_middleware_never_raises_and_never_forwards_an_unverified_session(
    request: tuple[bytes, list[tuple[bytes, bytes]], list[int], str],
    require_session: bool,
    max_body_size: int,
    max_sessions: int,
    result: Any,
    user: str | None,
) -> None:
    body, headers, chunks, method = request
    downstream = Downstream(result)
    middleware = MCPSessionMiddleware(
        AnswersProbes(downstream),
        keys=KEYS,
        store=store(max_sessions),
        require_session=require_session,
        max_body_size=max_body_size,
    )
    outcome = run(middleware, body, headers, chunks=chunks, method=method, user=user)
    event(f"forwarded, session={outcome.session is not None}" if outcome.forwarded else f"answered {outcome.status}")
    if not outcome.forwarded:
        # The middleware answered itself.
        assert outcome.status in DOCUMENTED_STATUSES | SERVER_STATUSES
        if outcome.status in (421, 403):
            assert outcome.body in (b"Invalid Host header", b"Invalid Origin header")
        elif outcome.body:
            assert outcome.headers[b"content-type"] == b"application/json"
            answer = json.loads(outcome.body)
            for element in answer if isinstance(answer, list) else [answer]:
                assert element["jsonrpc"] == "2.0"
                assert "error" in element or "result" in element
        if outcome.status == 503:
            assert b"retry-after" in outcome.headers
        return
    [(_, received, session_token)] = downstream.calls
    assert received == body  # replayed byte for byte
    if session_token is not None:  # a live, unexpired session of this deployment, bound to no one or this caller
        assert session_token in VALID or (session_token == ALICE and user == "alice")
    # Starlette, and so the SDK, reads the first Content-Type; json.loads(bytes) is how the SDK parses.
    content_type = next((value for name, value in headers if name == b"content-type"), b"")
    if method != "POST" or not content_type.lower().startswith(b"application/json"):
        return
    parsed = parse_like_the_sdk(body)
    for element in parsed if isinstance(parsed, list) else [parsed]:
        if not (isinstance(element, dict) and element.get("jsonrpc") == "2.0" and type(element.get("method")) is str):
            continue
        element_params = element.get("params")
        meta = element_params.get("_meta") if isinstance(element_params, dict) else None
        session = meta.get(SESSION_KEY) if isinstance(meta, dict) else None
        if session is None:
            continue
        assert isinstance(session, dict), element
        assert usable(session.get("sessionId"), session.get("state"), user), element


@FUZZ
@given(
    request_id=texts | json_values,
    case=st.sampled_from(["create", "required", "forged", "invalid-meta", "forged-with-header"]),
    modern=st.booleans(),
)
def test_every_answer_of_the_middleware_repeats_the_request_id(request_id: Any, case: str, modern: bool) -> None:
    """Whatever the id (lone surrogates included: JSON escapes them), the middleware's own answer carries it back.

    Behind a server that takes every request: what the ``mcp`` SDK refuses first (a lone surrogate its parser
    reads, an id that is not a string or an integer) is its answer, tested against it in test_guard_differential.
    """
    method = "sessions/create" if case == "create" else "tools/call"
    params: dict[str, Any] = {"name": "count", "arguments": {}, "_meta": dict(ENVELOPE) if modern else {}}
    headers = [(b"content-type", b"application/json"), *CLIENT_HEADERS]
    if modern:
        headers += [(b"mcp-protocol-version", MODERN.encode()), (b"mcp-method", method.encode())]
        headers += [(b"mcp-name", b"count")] if method == "tools/call" else []
    if case in ("forged", "forged-with-header"):
        params["_meta"][SESSION_KEY] = {"sessionId": "a.b.c"}
    if case == "forged-with-header":
        headers.append((b"mcp-session-id", VALID[0].encode()))
    if case == "invalid-meta":
        params["_meta"][SESSION_KEY] = request_id
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
    middleware = MCPSessionMiddleware(AnswersProbes(Downstream()), keys=KEYS, require_session_tools={"count"})
    outcome = run(middleware, body, headers)
    if case == "invalid-meta" and (request_id is None or isinstance(request_id, dict)):
        return  # null is no session, and an object can be valid metadata: other tests cover both
    assert not outcome.forwarded
    assert json.loads(outcome.body)["id"] == json.loads(body)["id"]  # "\ud800\udc00" on the wire is one character


@pytest.mark.parametrize("indent", [None, 1], ids=["compact", "pretty"])
def test_a_lone_surrogate_in_a_result_still_gets_its_echo(indent: int | None) -> None:
    """A result may carry a lone surrogate (a JSON escape, as json.dumps writes it): the echo still goes on."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"_meta": {SESSION_KEY: {"sessionId": VALID[0]}}}}
    ).encode()
    downstream = Downstream({"text": "\ud800"}, indent=indent)
    outcome = run(
        MCPSessionMiddleware(AnswersProbes(downstream), keys=KEYS), body, [(b"content-type", b"application/json")]
    )
    answer = json.loads(outcome.body)
    assert answer["result"]["text"] == "\ud800"
    assert answer["result"]["_meta"][SESSION_KEY]["sessionId"] == VALID[0]

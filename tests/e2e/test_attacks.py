"""The attack and bad-input table, end to end: one hostile input a row, to the real ``MCPServer``, in process.

Four deployments serve the same recording tools: ``hs`` (``secret=``, the
default), ``es`` (an ES256 ``KeySet``), ``auth`` (Starlette's
``AuthenticationMiddleware`` before the session middleware, so sessions are
bound to the principal) and ``down`` (``hs`` on a store whose backend is
unreachable). Each row is one raw HTTP request and its exact
outcome: HTTP status, JSON-RPC error code (``None`` for a result) and how many
times a tool ran. Every row runs with JSON and with SSE responses, and every
row checks that the answer is never a 500 and that no token ever reaches a log
record. docs/security.md explains the threat model these rows pin down.
"""

from __future__ import annotations

import hashlib
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, NoReturn
from urllib.parse import urlsplit

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from jwt.algorithms import ECAlgorithm
from mcp.server.mcpserver import MCPServer
from starlette.types import Scope

from _mcp import (
    DROP,
    LEGACY,
    MODERN,
    NOT_FOUND_MESSAGE,
    answer,
    b64,
    era_session,
    hs_jws,
    jwt_claims,
    jwt_header,
    legacy_request,
    members,
    modern_headers,
    modern_request,
    resigned,
    unb64,
    with_claims,
)
from _users import StaticVerifier, bearer_auth, signed_in
from conftest import SECRET, in_process, serve, signer_of
from mcp_sessions import KeySet, MCPSessionMiddleware, SessionKey, get_session
from mcp_sessions.stores import SessionStore, SessionStoreUnavailable

KEY = "io.modelcontextprotocol/session"
SESSION_TYP = "mcp-session+jwt"
STATE_TYP = "mcp-session-state+jwt"
OURS = SECRET.encode()
ATTACKER_SECRET = b"attacker-controlled-secret-of-32-bytes-or-more"
ES_PRIVATE = ec.generate_private_key(ec.SECP256R1())
ES_KID = "es-1"
HS_KEYS = KeySet.from_secret(SECRET)
HS_KID = signer_of(HS_KEYS).kid
ES_KEYS = KeySet([SessionKey.from_private_key(ES_PRIVATE, kid=ES_KID)])
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551

# -- the servers ---------------------------------------------------------------------------

_runs_lock = threading.Lock()
RUNS: list[tuple[str, str | None]] = []


def runs() -> int:
    with _runs_lock:
        return len(RUNS)


def build_server() -> MCPServer:
    """An MCPServer whose tools record every run, and the session each one saw."""
    mcp = MCPServer("attacks")

    def ran(name: str) -> str:
        session = get_session()
        with _runs_lock:
            RUNS.append((name, None if session is None else session.id))
        return "none" if session is None else session.id

    @mcp.tool()
    async def record() -> str:
        """Record the run; answer the session's stable id, or 'none'."""
        return ran("record")

    @mcp.tool()
    async def record_required() -> str:
        """The same, for a tool the middleware requires a session for."""
        return ran("record_required")

    @mcp.tool()
    async def set_mode(mode: str) -> str:
        """Keep ``mode`` in the client-held state."""
        ran("set_mode")
        session = get_session()
        assert session is not None
        session.state = {**session.state, "mode": mode}
        return mode

    @mcp.tool()
    async def get_mode() -> str:
        """The mode in the client-held state, or 'unset'."""
        ran("get_mode")
        session = get_session()
        return "no session" if session is None else str(session.state.get("mode", "unset"))

    return mcp


class UnavailableStore(SessionStore):
    """A store whose backend is down: every call raises the interface's own retryable error."""

    def __init__(self) -> None:
        self.calls = 0

    async def _fail(self, *args: Any, **kwargs: Any) -> NoReturn:
        self.calls += 1
        raise SessionStoreUnavailable("backend unreachable")

    create = touch = revoke = get = set = delete = incr = update = items = _fail


DOWN = UnavailableStore()


def build_app(deployment: str, json_response: bool) -> Any:
    server = build_server()
    mcp_app = server.streamable_http_app(streamable_http_path="/mcp", json_response=json_response, stateless_http=True)
    required = {"record_required"}
    if deployment == "hs":
        return MCPSessionMiddleware(mcp_app, secret=SECRET, require_session_tools=required)
    if deployment == "down":
        return MCPSessionMiddleware(mcp_app, secret=SECRET, require_session_tools=required, store=DOWN, retry_after=7)
    if deployment == "es":
        return MCPSessionMiddleware(mcp_app, keys=ES_KEYS, require_session_tools=required)
    return signed_in(server, mcp_app, require_session_tools=required)


@pytest.fixture(scope="module", params=["json", "sse"])
def servers(request: pytest.FixtureRequest) -> Iterator[dict[str, httpx.Client]]:
    with ExitStack() as stack:
        yield {
            name: stack.enter_context(in_process(build_app(name, json_response=request.param == "json")))
            for name in ("hs", "es", "auth", "down")
        }


class Canary:
    """A listening loopback socket: any attempt to fetch a ``jku`` or ``x5u`` URL would connect to it."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def touched(self) -> bool:
        # The kernel completes a handshake without accept(): a connection attempt leaves the socket readable.
        readable, _, _ = select.select([self.sock], [], [], 0)
        return bool(readable)


@pytest.fixture(scope="module")
def canary() -> Iterator[Canary]:
    canary = Canary()
    with canary.sock:
        yield canary


# -- tokens built by hand --------------------------------------------------------------------


def hs_header(**changes: Any) -> dict[str, Any]:
    return members({"alg": "HS256", "kid": HS_KID, "typ": SESSION_TYP, **changes})


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    payload = {"iss": "mcp-sessions", "aud": "mcp-sessions", "sid": "AttackTableSid0123456789", "iat": now}
    return members({**payload, "exp": now + 600, **changes})


def es_signed(payload: dict[str, Any], key: Any, **header: Any) -> str:
    return jwt.encode(payload, key, algorithm="ES256", headers={"kid": ES_KID, "typ": SESSION_TYP, **header})


def malleated(token: str) -> str:
    """The same ES256 signature spelled (r, n - s): ECDSA verifies both."""
    head, payload, signature = token.split(".")
    raw = unb64(signature)
    s = int.from_bytes(raw[32:], "big")
    return f"{head}.{payload}.{b64(raw[:32] + (P256_ORDER - s).to_bytes(32, 'big'))}"


def sized(token: str, size: int) -> str:
    """A well-formed session id of about ``size`` characters, validly signed: only its size is wrong."""
    return resigned(token, OURS, pad="x" * (size * 3 // 4))


def principal_hash(principal: str, audience: str = "mcp-sessions") -> str:
    """The ``pbh`` claim, recomputed from public inputs only: an unkeyed digest."""
    digest = hashlib.sha256(b"mcp-sessions principal\x00%s\x00%s" % (audience.encode(), principal.encode()))
    return b64(digest.digest())


# -- requests --------------------------------------------------------------------------------


@dataclass
class Request:
    """One HTTP request as sent on the wire, and the deployment it goes to."""

    body: bytes
    headers: list[tuple[str, str]]
    deployment: str = "hs"


def rpc(
    method: str,
    params: dict[str, Any] | None = None,
    session: Any = None,
    *,
    era: str = "modern",
    deployment: str = "hs",
    user: str | None = None,
    request_id: Any = 1,
    meta: dict[str, Any] | None = None,
    **extra_headers: str,
) -> Request:
    """A request of either era; ``session`` is the raw value of the session metadata (None: sessionless)."""
    if era == "legacy":
        message = legacy_request(method, params, session=session, id=request_id, meta=meta)
        return bare(json.dumps(message).encode(), deployment=deployment, **extra_headers)
    message = modern_request(method, params, session=session, id=request_id, meta=meta)
    headers = modern_headers(message, **extra_headers)
    if user is not None:
        headers["X-User"] = user
    return Request(json.dumps(message).encode(), list(headers.items()), deployment)


def call(
    session: Any = None, *, tool: str = "record", arguments: dict[str, Any] | None = None, **options: Any
) -> Request:
    """A ``tools/call`` (2026-07-28 unless ``era="legacy"``)."""
    return rpc("tools/call", {"name": tool, "arguments": arguments or {}}, session, **options)


def legacy_call(session: Any = None, **options: Any) -> Request:
    return call(session, era="legacy", **options)


def bare(body: bytes, *, version: str = LEGACY, deployment: str = "hs", **extra_headers: str) -> Request:
    """A body given byte for byte with no Mcp-Method: a 2025-era request, or a batch of ``version``."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    headers["MCP-Protocol-Version"] = version
    headers.update({name.replace("_", "-"): value for name, value in extra_headers.items()})
    return Request(body, list(headers.items()), deployment)


def batch(*messages: dict[str, Any], version: str = LEGACY, deployment: str = "hs") -> Request:
    return bare(json.dumps(list(messages)).encode(), version=version, deployment=deployment)


def raw_call(body: bytes, *, method: str = "tools/call", tool: str = "record", **extra_headers: str) -> Request:
    """A 2026-07-28 request (a ``tools/call`` unless ``method`` says otherwise) whose body is given byte for byte."""
    headers = modern_headers({"method": method, "params": {"name": tool}}, **extra_headers)
    return Request(body, list(headers.items()))


def mirrored(build: Callable[[Context], Request]) -> Callable[[Context], Request]:
    """``build``'s request with its session id repeated in Mcp-Session-Id, as clients do where it can be a header."""

    def build_mirrored(ctx: Context) -> Request:
        request = build(ctx)
        session = json.loads(request.body)["params"]["_meta"].get(KEY)
        session_id = session.get("sessionId") if isinstance(session, dict) else None
        if isinstance(session_id, str) and session_id and all(0x21 <= ord(c) <= 0x7E for c in session_id):
            request.headers.append(("Mcp-Session-Id", session_id))
        return request

    return build_mirrored


def envelope(session_members: str, *, tool: str = "record", arguments: str = "{}", request_id: str = "1") -> str:
    """A 2026-07-28 ``tools/call`` body with ``session_members`` written verbatim into ``params._meta``."""
    return (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":{{"name":"{tool}",'
        f'"arguments":{arguments},"_meta":{{"io.modelcontextprotocol/protocolVersion":"{MODERN}",'
        f'"io.modelcontextprotocol/clientCapabilities":{{}}{session_members}}}}}}}'
    )


@dataclass
class Context:
    """What a row needs to build its request: live sessions of the servers under test."""

    servers: dict[str, httpx.Client]
    canary: Canary
    tokens: list[str] = field(default_factory=list)

    def post(self, request: Request) -> httpx.Response:
        return self.servers[request.deployment].post("/mcp", content=request.body, headers=request.headers)

    def token(self, token: str) -> str:
        """Remember a token the row uses, so that the log check looks for it."""
        self.tokens.append(token)
        return token

    def session(self, deployment: str = "hs", *, user: str | None = None) -> dict[str, Any]:
        user_header = {} if user is None else {"X-User": user}
        return {"sessionId": self.token(era_session(self.servers[deployment], "/mcp", MODERN, **user_header))}

    def set_mode(self, session: dict[str, Any], mode: str) -> dict[str, Any]:
        """The session with the state that ``set_mode(mode)`` gave back in the echo."""
        answer = reply(self.post(call(session, tool="set_mode", arguments={"mode": mode})))
        echo = answer["result"]["_meta"][KEY]
        assert echo["sessionId"] == session["sessionId"]
        return {"sessionId": session["sessionId"], "state": self.token(echo["state"])}

    def deleted(self, session: dict[str, Any]) -> dict[str, Any]:
        response = self.post(delete(session))
        assert response.json()["result"] == {"resultType": "complete"}, response.text
        return session

    def forged(self, token: str) -> dict[str, Any]:
        return {"sessionId": self.token(token)}


def reply(response: httpx.Response) -> Any:
    """The JSON-RPC answer of a response (JSON or SSE), or None for an empty body."""
    return answer(response) if response.content else None


def code_of(answer: Any) -> int | None:
    if answer is None or "error" not in answer:
        return None
    code: int = answer["error"]["code"]
    return code


# -- the table -------------------------------------------------------------------------------

NESTED = "[" * 100_000 + "]" * 100_000
NESTED_500 = "[" * 500 + "]" * 500


def _key_confusion(encoding: str) -> Callable[[Context], Request]:
    """HS256 keyed with the ES256 key's public bytes: the classic algorithm confusion."""

    def build(ctx: Context) -> Request:
        public = ES_PRIVATE.public_key()
        key = {
            "pem": public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo),
            "der": public.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo),
            "point": public.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint),
            "jwk": ECAlgorithm.to_jwk(public).encode(),
        }[encoding]
        return call(ctx.forged(hs_jws(hs_header(kid=ES_KID), claims(), key)), deployment="es")

    return build


def _attacker_jwk(ctx: Context) -> Request:
    jwk = {"kty": "oct", "k": b64(ATTACKER_SECRET), "kid": HS_KID, "alg": "HS256"}
    return call(ctx.forged(hs_jws(hs_header(jwk=jwk), claims(), ATTACKER_SECRET)))


def _attacker_url(member: str, kid: str = HS_KID) -> Callable[[Context], Request]:
    def build(ctx: Context) -> Request:
        header = hs_header(kid=kid, **{member: f"{ctx.canary.url}/{member}.json"})
        return call(ctx.forged(hs_jws(header, claims(), ATTACKER_SECRET)))

    return build


def _ours_plus_headers(key: bytes) -> Callable[[Context], Request]:
    """A real session id with jku, x5u and jwk added, signed again with ``key``."""

    def build(ctx: Context) -> Request:
        jwk = {"kty": "oct", "k": b64(key), "kid": HS_KID}
        header = {"jku": f"{ctx.canary.url}/jwks.json", "x5u": f"{ctx.canary.url}/cert.pem", "jwk": jwk}
        return call(ctx.forged(resigned(ctx.session()["sessionId"], key, header=header)))

    return build


def _es_attacker_jwk(ctx: Context) -> Request:
    attacker = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(ECAlgorithm.to_jwk(attacker.public_key()))
    return call(ctx.forged(es_signed(claims(), attacker, jwk=jwk, jku=f"{ctx.canary.url}/jwks.json")), deployment="es")


def _es_ours_resigned(ctx: Context) -> Request:
    attacker = ec.generate_private_key(ec.SECP256R1())
    token = ctx.session("es")["sessionId"]
    head, payload = jwt_header(token), jwt_claims(token)
    jwk = json.loads(ECAlgorithm.to_jwk(attacker.public_key()))
    token = jwt.encode(payload, attacker, algorithm="ES256", headers={**head, "jwk": jwk, "x5u": ctx.canary.url})
    return call(ctx.forged(token), deployment="es")


def _es_alg(alg: str) -> Callable[[Context], Request]:
    def build(ctx: Context) -> Request:
        head, payload, signature = ctx.session("es")["sessionId"].split(".")
        header = {**json.loads(unb64(head)), "alg": alg}
        return call(ctx.forged(f"{b64(json.dumps(header).encode())}.{payload}.{signature}"), deployment="es")

    return build


def _other_deployment(*, issuer: str | None = None, audience: str | None = None) -> Callable[[Context], Request]:
    """A session id minted by another deployment that shares the secret but not the audience or issuer."""

    def build(ctx: Context) -> Request:
        keys = KeySet.from_secret(SECRET, issuer=issuer or "mcp-sessions", audience=audience or "mcp-sessions")
        return call(ctx.forged(keys.mint_session_token(ttl=600)[0]))

    return build


REQUIRED_CLAIMS = ("iss", "aud", "sid", "iat", "exp")


def _es_malleated(ctx: Context) -> Request:
    return call(ctx.forged(malleated(ctx.session("es")["sessionId"])), deployment="es")


def _header_signed(digest: Any, **changes: Any) -> Callable[[Context], Request]:
    """Signed with the deployment's own secret, but with another HMAC than the key is pinned to."""
    return lambda ctx: call(ctx.forged(hs_jws(hs_header(**changes), claims(), OURS, digest=digest)))


def _aud_list_with_ours(ctx: Context) -> Request:
    """RFC 7519: an audience list that contains ours is ours. Only a holder of the key can write one."""
    return call(ctx.forged(resigned(ctx.session()["sessionId"], OURS, aud=["other-deployment", "mcp-sessions"])))


def _claims(**changes: Any) -> Callable[[Context], Request]:
    """A session id signed with the deployment's own secret, with claims that must not pass."""
    return lambda ctx: call(ctx.forged(hs_jws(hs_header(), claims(**changes), OURS)))


def _unsigned(alg: str, signature: bytes = b"") -> Callable[[Context], Request]:
    return lambda ctx: call(ctx.forged(hs_jws(hs_header(alg=alg), claims(), OURS, signature=signature)))


def _header(**changes: Any) -> Callable[[Context], Request]:
    return lambda ctx: call(ctx.forged(hs_jws(hs_header(**changes), claims(), OURS)))


def _signature(mangle: Callable[[str], str]) -> Callable[[Context], Request]:
    return lambda ctx: call(ctx.forged(mangle(ctx.session()["sessionId"])))


def _sized(size: int) -> Callable[[Context], Request]:
    return lambda ctx: call(ctx.forged(sized(ctx.session()["sessionId"], size)))


def _nested(depth_body: str, session: bool) -> Callable[[Context], Request]:
    def build(ctx: Context) -> Request:
        member = (
            f',"{KEY}":{{"sessionId":"{ctx.token(hs_jws(hs_header(kid="nope"), claims(), OURS))}"}}' if session else ""
        )
        return raw_call(envelope(member, arguments=f'{{"deep":{depth_body}}}').encode())

    return build


def _legacy_nested(ctx: Context) -> Request:
    """The 2025-era path: a forged session, and a deeply nested member after it."""
    request = legacy_call(ctx.forged(hs_jws(hs_header(kid="nope"), claims(), OURS)))
    request.body = request.body[:-1] + b',"deep":' + NESTED.encode() + b"}"
    return request


def _state_of_another_session(ctx: Context) -> Request:
    other = ctx.set_mode(ctx.session(), "other")
    return call({**ctx.session(), "state": other["state"]}, tool="get_mode")


def _edited_state(ctx: Context) -> Request:
    session = ctx.set_mode(ctx.session(), "user")
    return call({**session, "state": ctx.token(with_claims(session["state"], st={"mode": "admin"}))}, tool="get_mode")


def _state_resigned_by_attacker(ctx: Context) -> Request:
    session = ctx.set_mode(ctx.session(), "user")
    forged = resigned(session["state"], ATTACKER_SECRET, st={"mode": "admin"})
    return call({**session, "state": ctx.token(forged)}, tool="get_mode")


def _state_of_a_deleted_session(ctx: Context) -> Request:
    return call(ctx.deleted(ctx.set_mode(ctx.session(), "x")), tool="get_mode")


def _state_of_another_key_set(ctx: Context) -> Request:
    session = ctx.session()
    other = ES_KEYS.sign_state(jwt_claims(session["sessionId"])["sid"], {"mode": "admin"})
    return call({**session, "state": ctx.token(other)}, tool="get_mode")


# The principal binding, at the token level (tests/e2e/test_principal.py has the behaviour).
def _bound(ctx: Context) -> str:
    return str(ctx.session("auth", user="alice")["sessionId"])


def _unbound(ctx: Context) -> str:
    return str(ctx.session("auth")["sessionId"])


def _auth(make: Callable[[Context], str], user: str | None) -> Callable[[Context], Request]:
    return lambda ctx: call(ctx.forged(make(ctx)), deployment="auth", user=user)


def _pbh_added(ctx: Context) -> str:
    return with_claims(_unbound(ctx), pbh=principal_hash("alice"))


def _pbh_added_resigned(ctx: Context) -> str:
    return resigned(_unbound(ctx), ATTACKER_SECRET, pbh=principal_hash("alice"))


def _pbh_edited(value: Any) -> Callable[[Context], str]:
    return lambda ctx: with_claims(_bound(ctx), pbh=value)


def _header_mismatch(header: Callable[[Context], str]) -> Callable[[Context], Request]:
    return lambda ctx: call(ctx.session(), mcp_session_id=header(ctx))


def _header_valid_meta_forged(ctx: Context) -> Request:
    return call(ctx.forged("a.b.c"), mcp_session_id=ctx.session()["sessionId"])


def _twice(members: Callable[[str, str], str]) -> Callable[[Context], Request]:
    return _body_twice(lambda a, b: envelope(members(a, b)))


def _body_twice(body: Callable[[str, str], str]) -> Callable[[Context], Request]:
    """A body naming two live sessions, written verbatim: two parsers may keep different copies of a repeated
    member (RFC 8259 leaves it open), so a request that names its session twice is refused, not guessed at."""

    def build(ctx: Context) -> Request:
        a, b = ctx.session()["sessionId"], ctx.session()["sessionId"]
        return raw_call(body(a, b).encode())

    return build


SLASH_ESCAPED_KEY = KEY.replace("/", "\\/")  # JSON's escape of "/": the same name


def _member(token: str, key: str = KEY) -> str:
    return f'"{key}":{{"sessionId":{json.dumps(token)}}}'


def _header_twice(same: bool) -> Callable[[Context], Request]:
    """The session in ``_meta``, and Mcp-Session-Id sent twice: its token both times, or another's the second."""

    def build(ctx: Context) -> Request:
        session = ctx.session()
        second = session if same else ctx.session()
        request = call(session)
        request.headers += [("Mcp-Session-Id", session["sessionId"]), ("Mcp-Session-Id", second["sessionId"])]
        return request

    return build


def _key_twice_escaped(a: str, b: str) -> str:
    return f',"{KEY}":{{"sessionId":"{a}"}},"io.modelcontextprotocol\\u002fsession":{{"sessionId":"{b}"}}'


def _session_id_twice_escaped(a: str, b: str) -> str:
    return f',"{KEY}":{{"sessionId":"{a}","session\\u0049d":"{b}"}}'


def _encoded(
    encode: Callable[[bytes], bytes], tool: str = "record", forged: bool = True
) -> Callable[[Context], Request]:
    """A request whose body is valid JSON for ``json.loads(bytes)`` (what the SDK runs) in another encoding."""

    def build(ctx: Context) -> Request:
        session = ctx.forged(hs_jws(hs_header(), claims(), ATTACKER_SECRET)) if forged else None
        request = call(session, tool=tool)
        request.body = encode(request.body)
        return request

    return build


def _surrogate_in_a_string(body: bytes) -> bytes:
    """A lone surrogate written raw (ED A0 80) in a string the middleware does not care about."""
    return body.replace(b'"arguments": {}', b'"arguments": {}, "note": "\xed\xa0\x80"')


def _duplicate_content_type(ctx: Context) -> Request:
    """Two Content-Type headers: Starlette (and so the SDK) reads the first one."""
    request = call(ctx.forged(hs_jws(hs_header(), claims(), ATTACKER_SECRET)))
    request.headers = [(n, v) for n, v in request.headers if n.lower() != "content-type"]
    request.headers[:0] = [("Content-Type", "application/json"), ("Content-Type", "text/plain")]
    return request


def _lone_surrogate_session_id(header: str | None = None) -> Callable[[Context], Request]:
    body = envelope(f',"{KEY}":{{"sessionId":"\\ud800"}}').encode()
    return lambda ctx: raw_call(body) if header is None else raw_call(body, mcp_session_id=header)


def _lone_surrogate_request_id(ctx: Context) -> Request:
    return raw_call(envelope("", tool="record_required", request_id='"\\udfff"').encode(), tool="record_required")


CREATE = legacy_request("sessions/create")
CREATE_WITH_ARRAY_PARAMS = b'{"jsonrpc":"2.0","id":1,"method":"sessions/create","params":[1]}'


def delete(session: Any, **options: Any) -> Request:
    return rpc("sessions/delete", session=session, request_id=2, **options)


def legacy_create(session: Any) -> Request:
    return rpc("sessions/create", session=session, era="legacy")


def _batch_with_delete(ctx: Context) -> Request:
    deletion = legacy_request("sessions/delete", id="d", session=ctx.session())
    return batch(legacy_request("tools/call", RECORD, id="t", session=ctx.session()), deletion)


def _batch_with_invalid_session(ctx: Context) -> Request:
    good = legacy_request("tools/call", RECORD, id=1, session=ctx.session())
    bad = legacy_request("tools/call", RECORD, id=2, session={"sessionId": "sess-invalid"})
    return batch(good, bad, legacy_request("tools/call", RECORD, id=3))


def _batch_with_create(version: str) -> Callable[[Context], Request]:
    return lambda ctx: batch(CREATE, legacy_request("tools/call", RECORD, id=2), version=version)


@dataclass(frozen=True)
class Row:
    """One input and its exact outcome; ``reason`` is what the middleware logs for a -32043."""

    id: str
    build: Callable[[Context], Request]
    status: int
    code: int | None
    runs: int
    reason: str | None = None


def accepted(id: str, build: Callable[[Context], Request]) -> Row:
    return Row(id, build, 200, None, 1)


def not_found(id: str, build: Callable[[Context], Request], reason: str) -> Row:
    return Row(id, build, 200, -32043, 0, reason)


def invalid(id: str, build: Callable[[Context], Request]) -> Row:
    return Row(id, build, 400, -32600, 0)


ALG = "algorithm not allowed for this key"
KID = "unknown key id"
SIG = "bad signature"
SHAPE = "not a compact JWS"
TYP = "wrong token type"
TIME = "iat, exp and nbf must be integers"
NOW = int(time.time())
PUBLIC_KEY_FORMS = ("pem", "der", "point", "jwk")
WRONG_TYPES = [("an-array", ["a.b.c"]), ("a-number", 42), ("a-string", "a.b.c"), ("true", True), ("false", False)]
BOM = b"\xef\xbb\xbf"
OTHER_KEYS = KeySet.from_secret("another-deployment-secret-0123456789abcdef")
RECORD = {"name": "record", "arguments": {}}
FIVE_MB = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"record","pad":"%s"}}' % (b"x" * 5 * 1024**2)
GARBAGE_IDS = [
    ("garbage", "sess-abc123", SHAPE),
    ("jws-shaped-garbage", "a.b.c", "unreadable header"),
    ("empty", "", SHAPE),
    ("oversized", "eyJ" + "A" * 10_000 + ".e30.AAAA", "oversized"),
    ("control-chars", "\x00\x1b[31m\n", SHAPE),
]


def _other_secrets(ctx: Context) -> dict[str, Any]:
    return ctx.forged(OTHER_KEYS.mint_session_token(ttl=600)[0])


ROWS: list[Row] = [
    # Baselines: done right, the same requests run the tool.
    accepted("baseline-hs", lambda c: call(c.session())),
    accepted("baseline-es", lambda c: call(c.session("es"), deployment="es")),
    accepted("baseline-bound-session-by-its-creator", _auth(_bound, "alice")),
    # alg none, and algorithms the key is not pinned to.
    not_found("alg-none-unsigned", _unsigned("none"), SHAPE),
    not_found("alg-none-junk-sig", _unsigned("none", b"x"), ALG),
    not_found("alg-None-unsigned", _unsigned("None"), SHAPE),
    not_found("alg-HS512-same-secret", _header_signed(hashlib.sha512, alg="HS512"), ALG),
    not_found("alg-HS384-same-secret", _header_signed(hashlib.sha384, alg="HS384"), ALG),
    not_found("alg-ES256-on-an-hs-kid", lambda c: call(c.forged(es_signed(claims(), ES_PRIVATE, kid=HS_KID))), ALG),
    not_found("alg-ES384-on-the-es-kid", _es_alg("ES384"), ALG),
    not_found("alg-HS256-on-the-es-kid", _es_alg("HS256"), ALG),
    not_found("alg-none-on-the-es-kid", _es_alg("none"), ALG),
    # HS256 keyed with the public key of the ES256 key set (key confusion).
    *(not_found(f"hs256-keyed-with-es-public-{form}", _key_confusion(form), ALG) for form in PUBLIC_KEY_FORMS),
    # Hostile kid.
    not_found("kid-unknown", _header(kid="hs-000000000000"), KID),
    not_found("kid-path-traversal", _header(kid="../../../../../../etc/passwd"), KID),
    not_found("kid-path-dev-null", _header(kid="/dev/null"), KID),
    not_found("kid-sql-ish", _header(kid="' OR '1'='1' --"), KID),
    not_found("kid-sql-union", _header(kid="x' UNION SELECT 'secret"), KID),
    not_found("kid-nul-byte", _header(kid=HS_KID + "\x00"), KID),
    not_found("kid-1000-chars", _header(kid="k" * 1000), KID),
    not_found("kid-100k-chars-refused-by-size", _header(kid="k" * 100_000), "oversized"),
    not_found("kid-object", _header(kid={"$ne": None}), "unreadable header"),
    # jku, x5u and an embedded jwk: never fetched (the canary sees no connection), never trusted.
    not_found("jwk-embedded-attacker-key", _attacker_jwk, SIG),
    not_found("jku-attacker-url-our-kid", _attacker_url("jku"), SIG),
    not_found("jku-attacker-url-attacker-kid", _attacker_url("jku", "attacker"), KID),
    not_found("x5u-attacker-url", _attacker_url("x5u"), SIG),
    not_found("ours-plus-jku-x5u-jwk-resigned-by-attacker", _ours_plus_headers(ATTACKER_SECRET), SIG),
    accepted("ours-plus-jku-x5u-jwk-signed-with-our-key-is-ignored", _ours_plus_headers(SECRET.encode())),
    not_found("es-jwk-embedded-attacker-key", _es_attacker_jwk, SIG),
    not_found("es-ours-plus-jwk-x5u-resigned-by-attacker", _es_ours_resigned, SIG),
    # ECDSA signatures are malleable: (r, n - s) spells the same session another way (docs/security.md).
    accepted("es-malleated-signature-is-the-same-session", _es_malleated),
    # typ, compared exactly.
    not_found("typ-JWT", _header(typ="JWT"), TYP),
    not_found("typ-missing", _header(typ=DROP), TYP),
    not_found("typ-state", _header(typ=STATE_TYP), TYP),
    not_found("typ-uppercase", _header(typ=SESSION_TYP.upper()), TYP),
    not_found("typ-full-media-type", _header(typ="application/" + SESSION_TYP), TYP),
    not_found("a-state-token-as-session-id", lambda c: call(c.forged(c.set_mode(c.session(), "x")["state"])), TYP),
    # Audience and issuer: another deployment with the same secret.
    not_found("other-deployment-audience", _other_deployment(audience="other-deployment"), "wrong audience"),
    not_found("other-deployment-issuer", _other_deployment(issuer="https://other.example"), "wrong issuer"),
    not_found("aud-list-without-ours", _claims(aud=["other-deployment"]), "wrong audience"),
    accepted("aud-list-with-ours-signed-with-our-key", _aud_list_with_ours),
    # Time.
    not_found("expired", lambda c: call(c.forged(HS_KEYS.mint_session_token(ttl=60, now=NOW - 3600)[0])), "expired"),
    not_found("exp-extended-by-edit", _signature(lambda t: with_claims(t, exp=NOW + 10**8)), SIG),
    not_found("not-yet-valid-iat", _claims(iat=NOW + 3600), "not yet valid"),
    not_found("not-yet-valid-nbf", _claims(nbf=NOW + 3600), "not yet valid"),
    # Missing claims, and claims of the wrong type (numeric strings).
    *(not_found(f"missing-{name}", _claims(**{name: DROP}), f"missing claim {name}") for name in REQUIRED_CLAIMS),
    not_found("exp-numeric-string", _claims(exp=str(NOW + 3600)), TIME),
    not_found("iat-numeric-string", _claims(iat=str(NOW)), TIME),
    not_found("nbf-numeric-string", _claims(nbf=str(NOW)), TIME),
    not_found("exp-float", _claims(exp=NOW + 3600.5), TIME),
    not_found("exp-true", _claims(exp=True), TIME),
    not_found("sid-number", _claims(sid=123456789012345678901234), "malformed sid claim"),
    not_found("sid-path-traversal", _claims(sid="../../../../etc/passwd00"), "malformed sid claim"),
    # The signature, mangled.
    not_found("signature-trailing-junk", _signature(lambda t: t + "AAAA"), SIG),
    not_found("signature-one-extra-char", _signature(lambda t: t + "A"), SIG),
    not_found("signature-padding", _signature(lambda t: t + "="), SHAPE),
    not_found("signature-double-padding", _signature(lambda t: t + "=="), SHAPE),
    not_found("signature-fourth-part", _signature(lambda t: t + ".AAAA"), SHAPE),
    # 43 characters carry 256 bits: cutting 3 leaves 30 whole bytes, so the base64 stays canonical.
    not_found("signature-truncated", _signature(lambda t: t[:-3]), SIG),
    not_found("signature-stripped", _signature(lambda t: t.rsplit(".", 1)[0] + "."), SHAPE),
    not_found("signature-standard-base64", _signature(lambda t: t[:-2] + "+/"), SHAPE),
    not_found("payload-edited-sid", _signature(lambda t: with_claims(t, sid="BBBBBBBBBBBBBBBBBBBBBBBB")), SIG),
    # Size, refused before decoding, and nesting, bounded.
    not_found("token-1MB-reaches-the-size-check", _sized(1024 * 1024), "oversized"),
    Row("token-8MB-is-over-the-body-limit", _sized(8 * 1024 * 1024), 413, -32600, 0),
    Row("deeply-nested-body-no-session", _nested(NESTED, session=False), 400, -32700, 0),
    Row("deeply-nested-body-forged-session", _nested(NESTED, session=True), 400, -32700, 0),
    not_found("nested-500-forged-session", _nested(NESTED_500, session=True), KID),
    Row("legacy-deeply-nested-forged-session", _legacy_nested, 400, -32700, 0),
    invalid("nested-session-metadata", lambda c: raw_call(envelope(f',"{KEY}":{NESTED_500}').encode())),
    # Revocation.
    not_found("replayed-after-delete", lambda c: call(c.deleted(c.session())), "revoked"),
    not_found("replayed-after-delete-with-valid-state", _state_of_a_deleted_session, "revoked"),
    not_found("legacy-replayed-after-delete", lambda c: legacy_call(c.deleted(c.session())), "revoked"),
    # Client-held state.
    not_found("state-of-another-session", _state_of_another_session, "state: state belongs to another session"),
    not_found("state-edited", _edited_state, "state: " + SIG),
    not_found("state-resigned-by-attacker", _state_resigned_by_attacker, "state: " + SIG),
    not_found("state-of-another-key-set", _state_of_another_key_set, "state: " + KID),
    # The principal binding: pbh cannot be added, stripped or edited, and the token cannot be re-signed.
    not_found("unbound-token-with-alices-pbh-added", _auth(_pbh_added, "alice"), SIG),
    not_found("unbound-token-with-pbh-added-resigned-by-attacker", _auth(_pbh_added_resigned, "alice"), SIG),
    not_found("bound-token-pbh-stripped-used-anonymously", _auth(_pbh_edited(DROP), None), SIG),
    not_found("bound-token-pbh-stripped-used-by-bob", _auth(_pbh_edited(DROP), "bob"), SIG),
    not_found("bound-token-pbh-edited-to-bobs", _auth(_pbh_edited(principal_hash("bob")), "bob"), SIG),
    not_found("bound-token-pbh-null", _auth(_pbh_edited(None), "bob"), SIG),
    # Mcp-Session-Id against _meta on 2026-07-28.
    Row("header-names-another-live-session", _header_mismatch(lambda c: c.session()["sessionId"]), 400, -32020, 0),
    Row("header-is-the-state-token", _header_mismatch(lambda c: c.set_mode(c.session(), "x")["state"]), 400, -32020, 0),
    Row("header-valid-meta-forged", _header_valid_meta_forged, 400, -32020, 0),
    # Session metadata said twice; repeated names elsewhere are the server's business.
    invalid("session-key-twice", _twice(lambda a, b: f",{_member(a)},{_member(b)}")),
    invalid("same-session-twice", _twice(lambda a, b: f",{_member(a)},{_member(a)}")),
    invalid(
        "session-key-twice-one-slash-escaped",
        _twice(lambda a, b: f",{_member(a)},{_member(b, SLASH_ESCAPED_KEY)}"),
    ),
    invalid("session-key-twice-one-unicode-escaped", _twice(_key_twice_escaped)),
    invalid("sessionId-twice", _twice(lambda a, b: f',"{KEY}":{{"sessionId":"{a}","sessionId":"{b}"}}')),
    invalid("sessionId-twice-one-unicode-escaped", _twice(_session_id_twice_escaped)),
    invalid("state-twice", _twice(lambda a, b: f',"{KEY}":{{"sessionId":"{a}","state":"x","state":"y"}}')),
    # The last copy a parser keeps is a _meta without the 2026 envelope: the SDK's refusal, as the SDK answers it.
    Row(
        "_meta-twice",
        _body_twice(lambda a, b: envelope(f",{_member(a)}")[:-2] + f',"_meta":{{{_member(b)}}}}}}}'),
        400,
        -32602,
        0,
    ),
    Row(
        "params-twice",
        _body_twice(
            lambda a, b: envelope(f",{_member(a)}")[:-1] + f',"params":{{"name":"record","_meta":{{{_member(b)}}}}}}}'
        ),
        400,
        -32602,
        0,
    ),
    accepted(
        "repeated-names-in-params-are-the-servers",
        lambda c: raw_call(
            envelope(
                f",{_member(c.session()['sessionId'])}", arguments='{},"extra":{"state":1,"nested":{"state":2}}'
            ).encode()
        ),
    ),
    Row("mcp-session-id-twice-differing", _header_twice(same=False), 400, -32020, 0),
    accepted("mcp-session-id-twice-the-same", _header_twice(same=True)),
    # Session metadata of the wrong type.
    *(invalid(f"session-metadata-is-{name}", (lambda v: lambda c: call(v))(value)) for name, value in WRONG_TYPES),
    invalid("sessionId-is-an-array", lambda c: call({"sessionId": [c.session()["sessionId"]]})),
    invalid("state-is-a-number", lambda c: call({**c.session(), "state": 1})),
    Row("legacy-session-metadata-is-a-number", lambda c: legacy_call(42), 200, -32600, 0),
    # Bodies that json.loads(bytes), which the SDK runs on 2026-07-28, reads as JSON: the middleware must read them.
    not_found("utf8-bom-body-forged-session", _encoded(lambda b: BOM + b), SIG),
    Row("utf8-bom-body-required-tool", _encoded(lambda b: BOM + b, "record_required", forged=False), 200, -32044, 0),
    not_found("utf16-body-forged-session", _encoded(lambda b: b.decode().encode("utf-16-le")), SIG),
    not_found("utf32-body-forged-session", _encoded(lambda b: b.decode().encode("utf-32")), SIG),
    not_found("raw-surrogate-bytes-forged-session", _encoded(_surrogate_in_a_string), SIG),
    # Two Content-Type headers: Starlette, and so the SDK, reads the first.
    not_found("duplicate-content-type-json-first-forged-session", _duplicate_content_type, SIG),
    # A lone surrogate (a JSON escape) where the middleware answers: still an answer, never a 500.
    not_found("lone-surrogate-sessionId", _lone_surrogate_session_id(), SHAPE),
    Row("lone-surrogate-request-id-required-tool", _lone_surrogate_request_id, 200, -32044, 0),
    Row("lone-surrogate-sessionId-with-header", _lone_surrogate_session_id("a.b.c"), 400, -32020, 0),
    # Bad input from ordinary clients, which repeat a session id in Mcp-Session-Id where it can be a header value.
    accepted("baseline-hs-mirrored", mirrored(lambda c: call(c.session()))),
    accepted("baseline-legacy", lambda c: legacy_call(c.session())),
    accepted("sessionless", lambda c: call()),
    accepted("required-tool-with-session", mirrored(lambda c: call(c.session(), tool="record_required"))),
    accepted("with-valid-state", mirrored(lambda c: call(c.set_mode(c.session(), "fast")))),
    accepted("unknown-fields-in-session-metadata", mirrored(lambda c: call({**c.session(), "x": 1}))),
    accepted("header-without-metadata-is-ignored", lambda c: call(mcp_session_id=c.session()["sessionId"])),
    accepted("legacy-header-differs-is-ignored", lambda c: legacy_call(c.session(), mcp_session_id="transport-1")),
    not_found("sessionId-of-another-secret", mirrored(lambda c: call(_other_secrets(c))), KID),
    not_found("legacy-sessionId-of-another-secret", lambda c: legacy_call(_other_secrets(c)), KID),
    *(
        not_found(f"sessionId-{name}", mirrored((lambda v: lambda c: call({"sessionId": v}))(value)), reason)
        for name, value, reason in GARBAGE_IDS
    ),
    not_found("state-garbage", mirrored(lambda c: call({**c.session(), "state": "eyJrIjoidiJ9"})), "state: " + SHAPE),
    not_found("state-empty", mirrored(lambda c: call({**c.session(), "state": ""})), "state: " + SHAPE),
    Row("required-tool-without-session", lambda c: call(tool="record_required"), 200, -32044, 0),
    Row("required-tool-null-session", lambda c: call(tool="record_required", meta={KEY: None}), 200, -32044, 0),
    Row("legacy-required-tool-without-session", lambda c: legacy_call(tool="record_required"), 200, -32044, 0),
    Row("delete-without-session", lambda c: rpc("sessions/delete"), 200, -32044, 0),
    Row("header-garbage", lambda c: call(c.session(), mcp_session_id="x"), 400, -32020, 0),
    invalid("sessionId-is-a-number", lambda c: call({"sessionId": 12345})),
    invalid("sessionId-is-null", lambda c: call({"sessionId": None})),
    invalid("sessionId-missing", lambda c: call({"state": "s"})),
    invalid("state-is-an-object", mirrored(lambda c: call({**c.session(), "state": {"mode": "x"}}))),
    Row("legacy-session-metadata-is-a-string", lambda c: legacy_call("token"), 200, -32600, 0),
    # sessions/create and sessions/delete misused.
    invalid("create-with-session-metadata", mirrored(lambda c: rpc("sessions/create", session=c.session()))),
    Row("create-with-null-session-metadata-creates", lambda c: rpc("sessions/create", meta={KEY: None}), 200, None, 0),
    Row("legacy-create-with-session-metadata", lambda c: legacy_create({"sessionId": "x"}), 200, -32600, 0),
    invalid("create-params-not-an-object", lambda c: raw_call(CREATE_WITH_ARRAY_PARAMS, method="sessions/create")),
    Row("create-label-too-long", lambda c: rpc("sessions/create", {"label": "x" * 257}), 400, -32602, 0),
    Row("create-label-not-a-string", lambda c: rpc("sessions/create", {"label": 7}), 400, -32602, 0),
    Row("create-method-header-mismatch", lambda c: rpc("sessions/create", Mcp_Method="tools/list"), 400, -32020, 0),
    not_found("delete-unknown-session", mirrored(lambda c: delete({"sessionId": "sess-unknown"})), SHAPE),
    not_found("delete-of-another-secret", mirrored(lambda c: delete(_other_secrets(c))), KID),
    not_found("delete-twice", mirrored(lambda c: delete(c.deleted(c.session()))), "revoked"),
    # Batches: mcp 2.3 refuses every batch, so the middleware answers as the SDK does.
    Row("batch-with-sessions-create", _batch_with_create(LEGACY), 400, -32602, 0),
    Row("batch-with-sessions-delete", _batch_with_delete, 400, -32602, 0),
    Row("batch-with-an-invalid-session", _batch_with_invalid_session, 400, -32602, 0),
    Row("modern-batch-with-sessions-create", _batch_with_create(MODERN), 400, -32600, 0),
    # Notifications get no JSON-RPC answer.
    Row(
        "notification-invalid-session", mirrored(lambda c: call({"sessionId": "sess-x"}, request_id=None)), 202, None, 0
    ),
    Row("notification-sessions-create", lambda c: rpc("sessions/create", request_id=None), 202, None, 0),
    # Bodies.
    Row("body-5MB", lambda c: raw_call(FIVE_MB), 413, -32600, 0),
    Row("legacy-body-5MB", lambda c: bare(FIVE_MB), 413, -32600, 0),
    Row("invalid-json", lambda c: raw_call(b'{"jsonrpc":"2.0","id":1,"method":'), 400, -32700, 0),
    Row("legacy-invalid-json", lambda c: bare(b'{"jsonrpc": "2.0", "id": 1, "method"'), 400, -32700, 0),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_attack(servers: dict[str, httpx.Client], canary: Canary, caplog: pytest.LogCaptureFixture, row: Row) -> None:
    caplog.set_level(logging.DEBUG, logger="mcp_sessions")
    ctx = Context(servers, canary)
    request = row.build(ctx)
    before = runs()
    response = ctx.post(request)
    assert response.status_code != 500, response.text[:300]
    assert response.status_code == row.status, response.text[:300]
    answer = reply(response)
    assert code_of(answer) == row.code, response.text[:300]
    assert runs() - before == row.runs
    assert not canary.touched(), "a jku or x5u URL was fetched"
    if row.code not in (None, -32043):  # a refusal repeats no token (-32043 echoes the one sent, by design)
        assert not any(token in response.text for token in ctx.tokens), response.text[:300]
    if row.code == -32043:
        # The echo is the client's own token, cut to 256 characters; the reason stays in the log, with the sid only.
        sent = json.loads(request.body.decode(json.detect_encoding(request.body), "surrogatepass"))
        assert answer["error"]["data"] == {"sessionId": sent["params"]["_meta"][KEY]["sessionId"][:256]}
        rejections = [r.getMessage() for r in caplog.records if r.getMessage().startswith("session rejected: ")]
        assert [m.split(": ", 1)[1].rsplit(" (sid=", 1)[0] for m in rejections] == [row.reason]
    assert_no_token_logged(caplog, ctx.tokens)


def assert_no_token_logged(caplog: pytest.LogCaptureFixture, tokens: list[str]) -> None:
    logged = [r.getMessage() + repr(r.args) + (r.exc_text or "") for r in caplog.records] + [caplog.text]
    for token in tokens:
        signature = token.rsplit(".", 1)[-1]
        for text in logged:
            assert token not in text
            assert len(signature) < 16 or signature not in text


def test_every_row_is_refused_unless_it_says_otherwise() -> None:
    accepted = {row.id for row in ROWS if row.code is None}
    assert accepted == {
        "baseline-hs",
        "baseline-es",
        "baseline-bound-session-by-its-creator",
        "ours-plus-jku-x5u-jwk-signed-with-our-key-is-ignored",
        "aud-list-with-ours-signed-with-our-key",
        "es-malleated-signature-is-the-same-session",
        "baseline-hs-mirrored",
        "baseline-legacy",
        "sessionless",
        "required-tool-with-session",
        "with-valid-state",
        "unknown-fields-in-session-metadata",
        "header-without-metadata-is-ignored",
        "legacy-header-differs-is-ignored",
        "create-with-null-session-metadata-creates",
        "notification-invalid-session",
        "notification-sessions-create",
        "repeated-names-in-params-are-the-servers",
        "mcp-session-id-twice-the-same",
    }
    assert all(row.runs == 0 for row in ROWS if row.code is not None)
    assert all((row.reason is not None) == (row.code == -32043) for row in ROWS)
    assert len({row.id for row in ROWS}) == len(ROWS)


def test_session_not_found_repeats_what_was_sent_cut_to_256(servers: dict[str, httpx.Client], canary: Canary) -> None:
    sent = "eyJ" + "A" * 10_000 + ".e30.AAAA"
    response = Context(servers, canary).post(call({"sessionId": sent}, request_id=42))
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 42,
        "error": {"code": -32043, "message": NOT_FOUND_MESSAGE, "data": {"sessionId": sent[:256]}},
    }


def test_the_tool_sees_the_session_it_was_called_with(servers: dict[str, httpx.Client], canary: Canary) -> None:
    ctx = Context(servers, canary)
    session = ctx.session()
    before = runs()
    ctx.post(call(session)).raise_for_status()
    sid = HS_KEYS.verify_session_token(session["sessionId"]).session_id
    assert RUNS[before:] == [("record", sid)]


@pytest.mark.parametrize("json_response", [True, False], ids=["json", "sse"])
def test_content_length_over_the_limit_is_answered_before_the_body_is_sent(json_response: bool) -> None:
    """A raw socket declares 5 MB and sends none of it: the 413 comes back anyway."""
    with (
        serve(build_app("hs", json_response)) as base_url,
        socket.create_connection((urlsplit(base_url).hostname, urlsplit(base_url).port), timeout=10) as sock,
    ):
        sock.sendall(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Accept: application/json, text/event-stream\r\nContent-Length: 5242880\r\n\r\n"
        )
        received = b""
        while b"\r\n\r\n" not in received or not received.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    # uvicorn writes the phrase Python names: "Request Entity Too Large" before 3.13, "Content Too Large" since.
    assert head.split(b"\r\n")[0] == f"HTTP/1.1 413 {HTTPStatus(413).phrase}".encode()
    assert json.loads(body) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "Request body too large (limit 4194304 bytes)"},
    }


# -- the store is unavailable ----------------------------------------------------------------


def _genuine(ctx: Context) -> dict[str, Any]:
    """A session of this deployment, minted with its secret: sessions/create stores nothing, so it cannot fail."""
    return ctx.forged(HS_KEYS.mint_session_token(ttl=600)[0])


def _batch_while_down(ctx: Context) -> Request:
    element = legacy_request("tools/call", RECORD, id=1, session=_genuine(ctx))
    return batch(element, legacy_request("tools/call", RECORD, id=2), deployment="down")


STORE_ROWS = [
    Row("tool-call-with-session", mirrored(lambda c: call(_genuine(c), deployment="down")), 503, -32010, 0),
    Row("legacy-tool-call-with-session", lambda c: legacy_call(_genuine(c), deployment="down"), 503, -32010, 0),
    Row("delete", mirrored(lambda c: delete(_genuine(c), deployment="down")), 503, -32010, 0),
    Row("notification", mirrored(lambda c: call(_genuine(c), request_id=None, deployment="down")), 503, None, 0),
    # Sessionless traffic never needs the store, and neither does creating a session (it stores nothing).
    Row("create", lambda c: rpc("sessions/create", deployment="down"), 200, None, 0),
    Row("legacy-create", lambda c: rpc("sessions/create", era="legacy", deployment="down"), 200, None, 0),
    Row("sessionless-tool-call", lambda c: call(deployment="down"), 200, None, 1),
    Row("legacy-sessionless-tool-call", lambda c: legacy_call(deployment="down"), 200, None, 1),
    Row("required-tool-without-session", lambda c: call(tool="record_required", deployment="down"), 200, -32044, 0),
]


@pytest.mark.parametrize("row", STORE_ROWS, ids=[row.id for row in STORE_ROWS])
def test_store_unavailable(
    servers: dict[str, httpx.Client], canary: Canary, caplog: pytest.LogCaptureFixture, row: Row
) -> None:
    ctx = Context(servers, canary)
    request = row.build(ctx)
    before_runs, before_calls = runs(), DOWN.calls
    response = ctx.post(request)
    assert response.status_code == row.status, response.text[:300]
    assert code_of(reply(response)) == row.code, response.text[:300]
    assert runs() - before_runs == row.runs
    if row.status == 503:
        assert response.headers["retry-after"] == "7"
        assert DOWN.calls - before_calls == 1
        assert "-32043" not in response.text  # a temporary failure is never SESSION_NOT_FOUND
    else:
        assert "retry-after" not in response.headers
        assert DOWN.calls == before_calls
    assert_no_token_logged(caplog, ctx.tokens)


def test_a_batch_gets_the_servers_refusal_whatever_the_store(servers: dict[str, httpx.Client], canary: Canary) -> None:
    ctx = Context(servers, canary)
    request = _batch_while_down(ctx)
    before = runs()
    response = ctx.post(request)
    # mcp 2.3 refuses every batch: its refusal, not a retryable -32010, since a retry cannot succeed.
    assert response.status_code == 400
    assert code_of(reply(response)) == -32602
    assert "retry-after" not in response.headers
    assert runs() == before


def test_store_unavailable_answer_is_retryable_and_exact(servers: dict[str, httpx.Client], canary: Canary) -> None:
    response = Context(servers, canary).post(call(_genuine(Context(servers, canary)), request_id=9, deployment="down"))
    assert response.status_code == 503
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 9,
        "error": {"code": -32010, "message": "Session store unavailable, retry later"},
    }


# -- accepted on purpose: what the design allows ---------------------------------------------


def test_an_older_state_of_the_same_session_is_accepted(servers: dict[str, httpx.Client], canary: Canary) -> None:
    """Last-write-wins: state is signed and bound to the session, not versioned, so an older one still verifies."""
    ctx = Context(servers, canary)
    first = ctx.set_mode(ctx.session(), "reader")
    second = ctx.set_mode(first, "admin")
    assert second["state"] != first["state"]
    for session, mode in [(second, "admin"), (first, "reader"), (second, "admin")]:
        answer = reply(ctx.post(call(session, tool="get_mode")))
        assert answer["result"]["content"][0]["text"] == mode
        assert answer["result"]["_meta"][KEY]["state"] == session["state"]  # the echo repeats what was sent


def test_a_malleated_es256_id_is_the_same_session_and_deleting_either_ends_both(
    servers: dict[str, httpx.Client], canary: Canary
) -> None:
    ctx = Context(servers, canary)
    session = ctx.session("es")
    twin = {"sessionId": malleated(session["sessionId"])}
    assert twin != session
    sids = [reply(ctx.post(call(s, deployment="es")))["result"]["content"][0]["text"] for s in (session, twin)]
    assert sids[0] == sids[1] == jwt_claims(session["sessionId"])["sid"]
    ctx.post(delete(twin, deployment="es")).raise_for_status()
    for s in (session, twin):
        assert code_of(reply(ctx.post(call(s, deployment="es")))) == -32043


def test_pbh_is_an_unkeyed_digest_anyone_can_recompute(servers: dict[str, httpx.Client], canary: Canary) -> None:
    """Signed, not secret: whoever holds the token can test a guess of the principal offline."""
    ctx = Context(servers, canary)
    first, second = ctx.session("auth", user="alice"), ctx.session("auth", user="alice")
    assert jwt_claims(first["sessionId"])["pbh"] == principal_hash("alice")
    assert jwt_claims(second["sessionId"])["pbh"] == jwt_claims(first["sessionId"])["pbh"]  # linkable
    assert principal_hash("alice", audience="another-deployment") != principal_hash("alice")


def test_claims_are_readable_without_any_key(servers: dict[str, httpx.Client], canary: Canary) -> None:
    token = Context(servers, canary).session()["sessionId"]
    assert set(jwt_claims(token)) == {"iss", "aud", "sid", "iat", "exp", "mep"}  # mep: the endpoint it was minted at
    assert jwt_header(token) == {"alg": "HS256", "kid": HS_KID, "typ": SESSION_TYP}


# -- the mcp SDK's own bearer auth, with a principal= hook of ones own: the session work runs inside it ------


def test_a_principal_hook_binds_sessions_inside_the_sdk_bearer_auth() -> None:
    auth = bearer_auth()
    verifier: StaticVerifier = auth["token_verifier"]

    async def bearer_principal(scope: Scope) -> str | None:
        for name, value in scope["headers"]:
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                access = await verifier.verify_token(value[7:].decode("latin-1").strip())
                if access is not None:
                    return access.subject or access.client_id
        return None

    server = MCPServer("sdk-auth", **auth)
    ran: list[str] = []

    @server.tool()
    async def whoami() -> str:
        session = get_session()
        ran.append("whoami")
        return "none" if session is None else session.id

    app = MCPSessionMiddleware(server.streamable_http_app(), secret=SECRET, principal=bearer_principal)
    with in_process(app) as http:

        def post(body: dict[str, Any], bearer: str) -> httpx.Response:
            return http.post("/mcp", json=body, headers=modern_headers(body, Authorization=f"Bearer {bearer}"))

        created = post(modern_request("sessions/create"), "alice-token").json()["result"]["session"]
        assert jwt_claims(created["sessionId"])["pbh"] == principal_hash("alice")
        call_body = modern_request("tools/call", {"name": "whoami", "arguments": {}}, session=created)
        mine = post(call_body, "alice-token").json()
        assert mine["result"]["content"][0]["text"] == jwt_claims(created["sessionId"])["sid"]
        response = post(call_body, "bob-token")
        assert (response.status_code, code_of(response.json())) == (200, -32043)
        assert ran == ["whoami"]
        # Without a bearer, every session method gets the SDK's 401: tests/e2e/test_inside_server.py, both eras.

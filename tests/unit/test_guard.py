"""The guard, checked piece by piece against the mcp SDK functions it mirrors, and its options."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.server._streamable_http_modern import _write
from mcp.server.streamable_http import StreamableHTTPServerTransport, check_accept_headers
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.inbound import InboundLadderRejection, classify_inbound_request, decode_header_value
from mcp_types import methods as sdk_methods
from mcp_types.jsonrpc import PARSE_ERROR, ErrorData, JSONRPCError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic_core import from_json
from starlette.requests import Request
from starlette.types import Message

from conftest import SECRET
from mcp_sessions import Guard, MCPSessionMiddleware, Rejection
from mcp_sessions._guard import MAX_NESTING
from mcp_sessions._guard._checks import _accepts, _decode_header_value
from mcp_sessions._guard._parsers import _STRING_OR_BRACKET, nesting_of
from mcp_sessions._wire import jsonrpc
from mcp_sessions._wire.protocol import KNOWN_METHODS, LEGACY_VERSIONS, MODERN_VERSIONS

ACCEPT_BOTH = b"application/json, text/event-stream"
LEGACY_HEADERS = [(b"host", b"127.0.0.1:8000"), (b"accept", ACCEPT_BOTH), (b"content-type", b"application/json")]
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


def modern_headers(method: str, **extra: bytes) -> list[tuple[bytes, bytes]]:
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"accept", ACCEPT_BOTH),
        (b"content-type", b"application/json"),
        (b"mcp-protocol-version", b"2026-07-28"),
        (b"mcp-method", method.encode()),
    ]
    replaced = {name.replace("_", "-").encode(): value for name, value in extra.items()}
    return [(name, value) for name, value in headers if name not in replaced] + list(replaced.items())


def create(**changes: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "sessions/create", **changes}


# -- the constants are the SDK's ------------------------------------------------------------------------


def test_versions_and_methods_are_the_sdks() -> None:
    assert frozenset(HANDSHAKE_PROTOCOL_VERSIONS) == LEGACY_VERSIONS
    assert tuple(MODERN_PROTOCOL_VERSIONS) == MODERN_VERSIONS
    client_sent = sdk_methods.SPEC_CLIENT_METHODS | sdk_methods.SPEC_CLIENT_NOTIFICATION_METHODS
    assert client_sent == KNOWN_METHODS  # the wires' session methods are added per middleware


# -- the pieces, against the SDK's own functions ---------------------------------------------------------


@pytest.mark.parametrize(
    "accept",
    [
        "",
        "application/json",
        "text/event-stream",
        ACCEPT_BOTH.decode(),
        "*/*",
        "application/*",
        "text/*;q=0.1, application/json;q=0.9",
        " APPLICATION/JSON ; charset=utf-8 ,TEXT/EVENT-STREAM",
        "application/jsonx, text/event-streams",
        ",,,",
    ],
)
def test_accept_is_read_as_the_sdk_reads_it(accept: str) -> None:
    request = Request({"type": "http", "headers": [(b"accept", accept.encode())]})
    assert _accepts(accept) == check_accept_headers(request)


@pytest.mark.parametrize(
    "value",
    ["plain", "=?base64?aGk=?=", "=?base64?aGk?=", "=?base64?aGl=?=", "=?base64?/w==?=", "=?base64??=", "=?base64?x"],
)
def test_header_values_decode_as_the_sdk_decodes_them(value: str) -> None:
    assert _decode_header_value(value) == decode_header_value(value)


LADDER = [
    ({"params": {}}, {}),
    ({"params": None}, {}),
    ({"params": {"_meta": []}}, {}),
    ({"params": {"_meta": {}}}, {}),
    ({"params": {"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}}, {}),
    ({"params": {"_meta": ENVELOPE}}, {}),
    ({"params": {"_meta": ENVELOPE}}, {"mcp_protocol_version": b"2099-01-01"}),
    ({"params": {"_meta": {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}}}, {}),
    ({"method": "tools/call", "params": {"name": "a b", "_meta": ENVELOPE}}, {"mcp_name": b"a b"}),
    ({"method": "tools/call", "params": {"name": "a b", "_meta": ENVELOPE}}, {"mcp_name": b"=?base64?YSBi?="}),
    ({"method": "tools/call", "params": {"name": "a", "_meta": ENVELOPE}}, {}),
    ({"method": "tools/call", "params": {"name": 7, "_meta": ENVELOPE}}, {"mcp_name": b"7"}),
    ({"method": "resources/read", "params": {"uri": "x:y", "_meta": ENVELOPE}}, {"mcp_name": b"x:z"}),
    ({"method": "prompts/get", "params": {"_meta": ENVELOPE}}, {}),
]


@pytest.mark.parametrize(("changes", "extra"), LADDER)
def test_the_2026_ladder_is_the_sdks(changes: dict[str, Any], extra: dict[str, bytes]) -> None:
    message = create(**changes)
    headers = modern_headers(message["method"], **extra)
    verdict = classify_inbound_request(message, headers={n.decode(): v.decode("latin-1") for n, v in headers})
    refusal = Guard().check(headers, message)
    if isinstance(verdict, InboundLadderRejection):
        assert refusal is not None
        assert (refusal.code, refusal.message, refusal.status) == (verdict.code, verdict.message, 400)
        body = json.loads(refusal.body)
        assert body == {"jsonrpc": "2.0", "id": 1, "error": {"code": verdict.code, "message": verdict.message}} | (
            {} if verdict.data is None else {"error": {**body["error"], "data": verdict.data}}
        )
    else:
        assert refusal is None


# -- the SDK's JSON parsers, per era ----------------------------------------------------------------------


def nested(depth: int, message: dict[str, Any] | None = None) -> bytes:
    """``message`` (``create()`` by default) with an array in ``params`` nested so that the body is ``depth`` deep."""
    message = message or create()
    body = json.dumps({**message, "params": {**message.get("params", {}), "deep": "@"}}).encode()
    return body.replace(b'"@"', b"[" * (depth - 2) + b"]" * (depth - 2))


def bodies(message: dict[str, Any]) -> dict[str, bytes]:
    """``message`` written in ways the middleware reads (json.loads(bytes) does) and pydantic-core may not."""
    text = json.dumps({**message, "params": {**message.get("params", {}), "note": "@"}})
    return {
        "utf-8": text.encode(),
        "utf-8-bom": b"\xef\xbb\xbf" + text.encode(),
        **{name: text.encode(name.removesuffix("-with-bom")) for name in ["utf-16-le", "utf-16-be", "utf-16-with-bom"]},
        **{name: text.encode(name.removesuffix("-with-bom")) for name in ["utf-32-le", "utf-32-be", "utf-32-with-bom"]},
        "lone-surrogate-bytes": text.replace('"@"', '"\ud800"').encode("utf-8", "surrogatepass"),
        "lone-surrogate-escape": text.replace('"@"', '"\\ud800"').encode(),
        "float-beyond-range": text.replace('"@"', "1" * 4301 + ".5").encode(),
        "nested-201": nested(201, message),
        "nested-202": nested(202, message),
    }


READ_IN_2025 = {"utf-8", "nested-201"}  # pydantic-core's limit: 201 levels


def legacy_sdk_answer(body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
    """The 2025-era transport's answer to ``body`` if its parser refuses it, built by the SDK's own code."""
    try:
        from_json(body)
    except ValueError as exc:
        transport = StreamableHTTPServerTransport(mcp_session_id=None)
        response = transport._create_error_response(f"Parse error: {exc}", HTTPStatus.BAD_REQUEST, PARSE_ERROR)
        return response.status_code, response.raw_headers, bytes(response.body)
    return None


def modern_sdk_parse_error() -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The 2026-07-28 entry's answer to a body ``json.loads`` refuses, sent by the SDK's own ``_write``."""
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        raise AssertionError("the answer reads nothing")

    error = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=PARSE_ERROR, message="Parse error"))
    anyio.run(_write, error, {"type": "http"}, receive, send)
    return sent[0]["status"], sent[0]["headers"], sent[1]["body"]


def answer(refusal: Rejection | None) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
    return None if refusal is None else (refusal.status, list(refusal.headers), refusal.body)


@pytest.mark.parametrize("name", bodies(create()))
def test_the_2025_parser_refuses_what_the_sdks_refuses_with_its_bytes(name: str) -> None:
    body = bodies(create())[name]
    message = jsonrpc.loads(body)
    assert isinstance(message, dict)  # the middleware reads it: the guard alone stands between it and an answer
    expected = legacy_sdk_answer(body)
    assert (expected is None) is (name in READ_IN_2025)
    refusal = Guard().check(LEGACY_HEADERS, message, body=body)
    assert answer(refusal) == expected
    if refusal is not None:
        assert (refusal.code, refusal.reason) == (PARSE_ERROR, "parse_error")


@pytest.mark.parametrize("name", bodies(create()))
def test_the_2026_parser_reads_every_body_json_loads_reads_within_its_nesting_limit(name: str) -> None:
    body = bodies(create(params={"_meta": ENVELOPE}))[name]
    message = json.loads(body)  # what the 2026-07-28 entry runs
    refusal = Guard().check(modern_headers("sessions/create"), message, body=body)
    assert (refusal is None) is (nesting_of(body) <= MAX_NESTING), name


def test_the_2026_parser_refuses_nesting_past_a_limit_stricter_than_the_sdks() -> None:
    """json.loads's nesting limit depends on the stack and the release: the guard's own is lower than any."""
    message = create(params={"_meta": ENVELOPE})
    headers = modern_headers("sessions/create")
    too_deep = nested(MAX_NESTING + 1, message)
    json.loads(too_deep)  # the SDK reads it
    refusal = Guard().check(headers, message, body=too_deep)
    assert answer(refusal) == modern_sdk_parse_error()
    assert refusal is not None and (refusal.code, refusal.reason) == (PARSE_ERROR, "parse_error")
    assert Guard().check(headers, message, body=nested(MAX_NESTING, message)) is None
    for encoding in ("utf-8-sig", "utf-16", "utf-32-be"):  # read in every encoding json.loads reads
        text = nested(MAX_NESTING + 1, message).decode()
        assert Guard().check(headers, message, body=text.encode(encoding)) is not None


def depth(value: object) -> int:
    """How deep arrays and objects nest in a parsed value: the reference for :func:`nesting_of`."""
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


bracketed_values = st.recursive(
    st.none() | st.integers() | st.text(alphabet='[]{}"\\ab\u00e9\n'),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='[]{}"\\a', max_size=3), inner, max_size=3)
    ),
    max_leaves=20,
)


@given(bracketed_values, st.sampled_from(["utf-8", "utf-8-sig", "utf-16-le", "utf-32"]), st.booleans())
def test_nesting_is_counted_as_json_loads_reads_it(value: object, encoding: str, ascii_only: bool) -> None:
    body = json.dumps(value, ensure_ascii=ascii_only).encode(encoding)
    assert nesting_of(body) == depth(json.loads(body))


def test_nesting_is_counted_in_one_pass_over_a_body_that_would_make_a_pattern_rescan() -> None:
    """Strings full of brackets and escapes, and brackets in runs: each is one match, each byte read once."""
    for body in (json.dumps(["[" * 50_000, '\\"' * 50_000]).encode(), b"[" * 100_000 + b"]" * 100_000):
        matches = sum(1 for _ in _STRING_OR_BRACKET.finditer(body.decode()))
        assert matches <= body.count(b"[") + body.count(b"]") + 2 * body.count(b'"')


def test_the_parser_comes_after_the_headers_and_before_the_envelope() -> None:
    """The SDK's order: Host, Origin, Accept (and Content-Type on 2025), then the parser, then the message."""
    guard = Guard()
    body = bodies(create(jsonrpc="1.0"))["utf-16-le"]
    for headers, status in [
        ([(b"host", b"evil.example"), *LEGACY_HEADERS[1:]], 421),
        ([LEGACY_HEADERS[0], (b"accept", b"application/json"), LEGACY_HEADERS[2]], 406),
        ([*LEGACY_HEADERS[:2], (b"content-type", b"text/plain")], 415),
        (LEGACY_HEADERS, 400),
    ]:
        refusal = guard.check(headers, json.loads(body), body=body)
        assert refusal is not None and refusal.status == status
    assert refusal is not None and refusal.code == PARSE_ERROR  # not the envelope's -32602
    deep = nested(5000, create(jsonrpc="1.0"))
    refusal = guard.check(modern_headers("sessions/create", accept=b"text/event-stream"), None, body=deep)
    assert refusal is not None and refusal.status == 406
    refusal = guard.check(modern_headers("sessions/create"), [create()], body=deep)
    assert refusal is not None and refusal.code == PARSE_ERROR  # not the batch's -32600
    assert guard.check(LEGACY_HEADERS, create(), body=None) is None  # no body, no parser: as before


def test_a_subclass_that_overrides_check_must_take_the_body() -> None:
    with pytest.raises(TypeError, match=r"body="):

        class Forgetful(Guard):
            def check(self, headers: Any, message: Any) -> Rejection | None:  # type: ignore[override]
                return None

    class Forwarding(Guard):
        def check(self, headers: Any, message: Any, **options: Any) -> Rejection | None:
            return super().check(headers, message, **options)

    body = bodies(create())["utf-8-bom"]
    refusal = Forwarding().check(LEGACY_HEADERS, json.loads(body), body=body)
    assert refusal is not None and refusal.code == PARSE_ERROR


# -- options -------------------------------------------------------------------------------------------------


def test_the_defaults_are_the_sdks_defaults() -> None:
    """``Guard()`` is what ``streamable_http_app()`` turns on by itself: localhost only, both media types."""
    guard = Guard()
    message = create()
    assert guard.dns_rebinding_protection
    assert guard.check(LEGACY_HEADERS, message) is None
    for host in (b"localhost:1", b"[::1]:9", b"127.0.0.1:65535"):
        assert guard.check([*LEGACY_HEADERS[1:], (b"host", host)], message) is None
    for host in (b"mcp.example.com", b"127.0.0.1", b"localhost", b"", b"127.0.0.2:80"):
        refusal = guard.check([*LEGACY_HEADERS[1:], (b"host", host)], message)
        assert refusal is not None and (refusal.status, refusal.body) == (421, b"Invalid Host header"), host
    assert guard.check([*LEGACY_HEADERS[1:]], message) is not None  # no Host at all
    refusal = guard.check([*LEGACY_HEADERS, (b"origin", b"https://127.0.0.1:1")], message)
    assert refusal is not None and (refusal.status, refusal.body) == (403, b"Invalid Origin header")
    refusal = guard.check([*LEGACY_HEADERS[:1], (b"accept", b"application/json"), *LEGACY_HEADERS[2:]], message)
    assert refusal is not None and refusal.status == 406


def test_a_host_that_is_not_loopback_turns_protection_off_as_in_the_sdk() -> None:
    guard = Guard(host="0.0.0.0")
    assert not guard.dns_rebinding_protection
    headers = [(b"host", b"mcp.example.com"), (b"origin", b"https://anything"), *LEGACY_HEADERS[1:]]
    assert guard.check(headers, create()) is None


def test_the_sdks_transport_security_settings_are_taken_as_they_are() -> None:
    settings = TransportSecuritySettings(allowed_hosts=["mcp.example.com", "api.example.com:*"], allowed_origins=[])
    guard = Guard(transport_security=settings)
    for host, allowed in [
        (b"mcp.example.com", True),
        (b"mcp.example.com:443", False),
        (b"api.example.com:8443", True),
        (b"api.example.com", False),
        (b"127.0.0.1:8000", False),
    ]:
        headers = [(b"host", host), *LEGACY_HEADERS[1:]]
        assert (guard.check(headers, create()) is None) is allowed, host
    off = Guard(transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    assert off.check([(b"host", b"evil.example"), *LEGACY_HEADERS[1:]], create()) is None


def test_allow_lists_turn_protection_on() -> None:
    guard = Guard(allowed_hosts=["mcp.example.com"], allowed_origins=["https://app.example.com"])
    headers = [(b"host", b"mcp.example.com"), *LEGACY_HEADERS[1:]]
    assert guard.check([*headers, (b"origin", b"https://app.example.com")], create()) is None
    refusal = guard.check([*headers, (b"origin", b"https://evil.example")], create())
    assert refusal is not None and refusal.status == 403


def test_json_response_needs_only_json_in_accept() -> None:
    headers = [LEGACY_HEADERS[0], (b"accept", b"application/json"), LEGACY_HEADERS[2]]
    assert Guard(json_response=True).check(headers, create()) is None
    refusal = Guard(json_response=True).check([LEGACY_HEADERS[0], (b"accept", b"text/event-stream")], create())
    assert refusal is not None and json.loads(refusal.body)["error"]["message"] == (
        "Not Acceptable: Client must accept application/json"
    )


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"allowed_hosts": "mcp.example.com"}, TypeError),
        ({"allowed_origins": "https://a"}, TypeError),
        ({"transport_security": object()}, TypeError),
        ({"transport_security": TransportSecuritySettings(), "allowed_hosts": ["a"]}, ValueError),
        ({"allowed_hosts": [b"bytes"]}, TypeError),
        ({"modern_versions": "2026-07-28"}, TypeError),
    ],
)
def test_bad_options_fail_at_construction(options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        Guard(**options)


def test_the_middleware_takes_only_a_guard() -> None:
    with pytest.raises(TypeError, match=r"mcp_sessions\.Guard"):
        MCPSessionMiddleware(lambda *a: None, secret=SECRET, guard=TransportSecuritySettings())  # type: ignore[arg-type]


header_names = st.sampled_from(
    [b"host", b"origin", b"accept", b"content-type", b"mcp-protocol-version", b"mcp-method", b"mcp-name", b"x"]
)
header_values = st.binary(max_size=40) | st.sampled_from(
    [b"127.0.0.1:1", ACCEPT_BOTH, b"application/json", b"2026-07-28", b"2025-11-25", b"sessions/create"]
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=8,
)
messages = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "method": st.sampled_from(["sessions/create", "tools/call", "x"])},
    optional={"id": json_values, "params": json_values | st.fixed_dictionaries({"_meta": json_values})},
)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    headers=st.lists(st.tuples(header_names, header_values), max_size=8),
    message=messages | json_values,
    encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16-le", "utf-16-be", "utf-32", None]),
)
def test_the_guard_never_raises_and_answers_only_as_the_sdk_can(
    headers: list[tuple[bytes, bytes]], message: Any, encoding: str | None
) -> None:
    body = None if encoding is None else json.dumps(message).encode(encoding, "surrogatepass")
    refusal = Guard().check(headers, message, body=body)
    if refusal is None:
        return
    assert refusal.status in {202, 400, 403, 406, 415, 421}
    declared = dict(refusal.headers)
    assert declared[b"content-length"] == str(len(refusal.body)).encode()
    if declared.get(b"content-type") == b"application/json" and refusal.body:
        body = json.loads(refusal.body)
        assert body["jsonrpc"] == "2.0" and body["error"]["code"] == refusal.code

"""JSON-RPC helpers and the wire profile's tables."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcp_sessions._wire import jsonrpc
from mcp_sessions._wire.protocol import http_status
from mcp_sessions.profiles import DRAFT, Era
from mcp_sessions.profiles._carriers import InvalidSessionMeta, SessionRef

KEY = "io.modelcontextprotocol/session"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"a":1}', {"a": 1}),
        (b"[1,2]", [1, 2]),
        (b"null", None),
        ('{"é":"✓"}'.encode(), {"é": "✓"}),
        (b"", None),
        (b"{not json", None),
        (b"\xff\xfe\xfd", None),
        (b"[" * 100_000 + b"]" * 100_000, None),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, None),
    ],
    ids=["object", "array", "null", "utf8", "empty", "broken", "not-utf8", "deep-array", "deep-object"],
)
def test_loads(body: bytes, expected: Any) -> None:
    assert jsonrpc.loads(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        b'{"a":1,"a":2,"b":3}',
        b'{"a":NaN,"b":Infinity,"c":-Infinity}',
        b'{"a":1e400,"b":-0,"c":-0.0,"d":1E2,"e":0.1}',
        b'{"a":' + b"9" * 4300 + b"}",
        b'{"a":' + b"[" * 100 + b"]" * 100 + b"}",
        b'{"a":"\xed\xa0\x80"}',  # a lone surrogate, UTF-8 encoded
        b'{"a":"\\ud800"}',  # a lone surrogate, escaped
        b'\xef\xbb\xbf{"a":1}',
        '{"a":"é"}'.encode("utf-16"),
        '{"a":"é"}'.encode("utf-32-le"),
        b'{"a":1} ',
        b'{"\xc3\xa9":"\xf0\x9f\x98\x80"}',
    ],
)
def test_loads_reads_what_json_loads_reads_as_it_reads_it(body: bytes) -> None:
    """The one parser reads a body as ``json.loads(bytes)`` (the SDK's 2025-era transport) does."""
    assert repr(jsonrpc.loads(body)) == repr(json.loads(body))


DEPTH = jsonrpc.MAX_DEPTH


@pytest.mark.parametrize(
    ("body", "too_deep"),
    [
        (b"[" * DEPTH + b"]" * DEPTH, False),
        (b"[" * (DEPTH + 1) + b"]" * (DEPTH + 1), True),
        (b'{"a":' * (DEPTH + 1) + b"1" + b"}" * (DEPTH + 1), True),
        (b"[" * 4_000_000, True),  # unfinished, 4 MB deep: counted, never decoded
        (b'["' + b"[" * 100_000 + b'"]', False),  # brackets in a string nest nothing
        (b'["\\"' + b"{" * 100_000 + b'"]', False),  # nor after an escaped quote
        (b'"' + b'\\"[' * 100_000, False),  # a string that never ends: not JSON, not deep
    ],
    ids=["at-the-limit", "past-it", "objects-past-it", "4mb-unfinished", "in-a-string", "escaped-quote", "no-end"],
)
def test_read_refuses_a_nesting_past_its_limit_before_decoding(body: bytes, too_deep: bool) -> None:
    """The depth is counted in one pass outside strings: past :data:`MAX_DEPTH`, :class:`TooDeep`, never the
    decoder's ``RecursionError``."""
    try:
        jsonrpc.read(body)
    except jsonrpc.Unreadable as unread:
        assert isinstance(unread, jsonrpc.TooDeep) is too_deep
    else:
        assert not too_deep


@pytest.mark.parametrize(
    "body",
    [
        b'{"a":"\xff"}',
        b'{"a":"\xed\xa0\x80"}',  # a lone surrogate, UTF-8 encoded: another server reads three U+FFFD
        b'\xef\xbb\xbf{"a":1}',
        '{"a":"é"}'.encode("utf-16"),
        b"",
        b"{not json",
    ],
    ids=["invalid-byte", "surrogate-bytes", "bom", "utf-16", "empty", "broken"],
)
def test_a_strict_read_takes_utf8_json_alone(body: bytes) -> None:
    with pytest.raises(jsonrpc.Unreadable):
        jsonrpc.read(body, strict=True)


def test_dumps_is_compact_utf8() -> None:
    assert jsonrpc.dumps({"a": [1, "é"], "b": None}) == '{"a":[1,"é"],"b":null}'.encode()


def _message(session: Any = ..., *, meta: Any = ..., params: Any = ...) -> dict[str, Any]:
    if meta is ...:
        meta = {} if session is ... else {KEY: session}
    if params is ...:
        params = {"_meta": meta}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"jsonrpc": "2.0", "id": 1, "method": "x"}, None),
        (_message(params=None), None),
        (_message(params=[1, 2]), None),
        (_message(params="p"), None),
        (_message(meta=None), None),
        (_message(meta="m"), None),
        (_message(meta=[]), None),
        (_message(), None),
        (_message(None), None),
        (_message({"sessionId": "t"}), SessionRef("t", None)),
        (_message({"sessionId": "t", "state": "s"}), SessionRef("t", "s")),
        (_message({"sessionId": "t", "state": None}), SessionRef("t", None)),
        (_message({"sessionId": "", "extra": 1}), SessionRef("", None)),
    ],
    ids=["no-params", "params-null", "params-list", "params-string", "meta-null", "meta-string",
         "meta-list", "no-session", "session-null", "session", "with-state", "state-null", "empty-id-and-extra"],
)  # fmt: skip
def test_session_meta(message: dict[str, Any], expected: Any) -> None:
    assert DRAFT.carrier.read(message) == expected


@pytest.mark.parametrize(
    ("session", "message"),
    [
        ("token", "session metadata must be an object"),
        (["token"], "session metadata must be an object"),
        (1, "session metadata must be an object"),
        (False, "session metadata must be an object"),
        ({}, "needs a string sessionId"),
        ({"sessionId": None}, "needs a string sessionId"),
        ({"sessionId": 1}, "needs a string sessionId"),
        ({"sessionId": ["t"]}, "needs a string sessionId"),
        ({"sessionId": {"t": 1}}, "needs a string sessionId"),
        ({"sessionId": "t", "state": 1}, "session state must be a string"),
        ({"sessionId": "t", "state": {"mode": "x"}}, "session state must be a string"),
        ({"sessionId": "t", "state": False}, "session state must be a string"),
    ],
    ids=["string", "list", "int", "false", "empty", "id-null", "id-int", "id-list", "id-object", "state-int",
         "state-object", "state-false"],
)  # fmt: skip
def test_session_meta_of_the_wrong_shape(session: Any, message: str) -> None:
    with pytest.raises(InvalidSessionMeta, match=message):
        DRAFT.carrier.read(_message(session))


def test_error_and_result_frames() -> None:
    assert jsonrpc.error(3, -32043, "Session not found", {"sessionId": "x"}) == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32043, "message": "Session not found", "data": {"sessionId": "x"}},
    }
    assert jsonrpc.error("a", -32044, "Session required") == {
        "jsonrpc": "2.0",
        "id": "a",
        "error": {"code": -32044, "message": "Session required"},
    }
    assert jsonrpc.invalid_request(None, "nope") == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "nope"},
    }
    assert jsonrpc.result(1, {}) == {"jsonrpc": "2.0", "id": 1, "result": {}}


@pytest.mark.parametrize(
    ("element", "expected"),
    [({"id": 1}, 1), ({"id": "a"}, "a"), ({"id": 1.5}, 1.5), ({"id": None}, None), ({}, None),
     ({"id": True}, None), ({"id": [1]}, None), ({"id": {"a": 1}}, None), ("not an object", None), (7, None)],
    ids=["int", "str", "float", "null", "missing", "bool", "list", "object", "string-element", "int-element"],
)  # fmt: skip
def test_request_id_of(element: Any, expected: Any) -> None:
    assert jsonrpc.request_id_of(element) == expected
    assert type(jsonrpc.request_id_of(element)) is type(expected)


@pytest.mark.parametrize(
    ("version", "expected"),
    [(None, False), ("2024-11-05", False), ("2025-03-26", False), ("2025-06-18", False), ("2025-11-25", False),
     ("2026-07-28", True), ("2099-01-01", True), ("garbage", True)],
)  # fmt: skip
def test_era_of(version: str | None, expected: bool) -> None:
    assert (Era.of(version) is Era.MODERN) is expected


@pytest.mark.parametrize(
    ("code", "modern", "expected"),
    [(-32601, True, 404), (-32700, True, 400), (-32600, True, 400), (-32602, True, 400), (-32020, True, 400),
     (-32043, True, 200), (-32044, True, 200), (-32010, True, 503), (-32603, True, 200),
     (-32601, False, 200), (-32600, False, 200), (-32020, False, 200), (-32043, False, 200), (-32010, False, 503)],
)  # fmt: skip
def test_http_status(code: int, modern: bool, expected: int) -> None:
    assert http_status(code, modern=modern) == expected


def test_capability() -> None:
    assert DRAFT.capability.value(required=False) == {}
    assert DRAFT.capability.value(required=True) == {"required": True}

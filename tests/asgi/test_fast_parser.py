"""The fast parser (pydantic-core's ``from_json``, the one the ``mcp`` SDK reads requests with) reads
every body as the standard parser does, or refuses it (the planner then reads it with the standard one).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from asgi.test_fuzz import FUZZ, bodies_json, encoded, pair_messages
from mcp_sessions._wire import jsonrpc


def ordered(value: Any) -> Any:
    """A parsed value with objects as member lists and typed leaves: two parsers must agree on all of it."""
    if isinstance(value, dict):
        return [(name, ordered(member)) for name, member in value.items()]
    if isinstance(value, list):
        return [ordered(element) for element in value]
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


def standard(body: bytes) -> Any:
    """What the standard library reads; raises when it reads nothing."""
    return json.loads(body)


EDGE_BODIES = [
    b'{"a":1,"a":2,"b":3}',
    b'{"b":1,"a":2,"b":3}',
    b'{"a":NaN,"b":Infinity,"c":-Infinity}',
    b'{"a":1e400,"b":-0,"c":-0.0,"d":1E2,"e":0.1}',
    b'{"a":' + b"9" * 4300 + b"}",
    b'{"a":' + b"9" * 4301 + b"}",
    b'{"a":' + b"[" * 100 + b"]" * 100 + b"}",
    b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}",
    b'{"a":"\xed\xa0\x80"}',  # a lone surrogate, UTF-8 encoded: the standard parser (surrogatepass) reads it
    b'{"a":"\xff"}',
    b'{"a":1} ',
    b'{"a":1}x',
    b'{"a":1}\x00',
    b'{"\xc3\xa9":"\xf0\x9f\x98\x80"}',
    b"{}",
    b"{",
]


@pytest.mark.parametrize("body", EDGE_BODIES, ids=range(len(EDGE_BODIES)))
def test_the_fast_parser_reads_the_edge_cases_as_the_standard_one_or_not_at_all(body: bytes) -> None:
    try:
        fast = jsonrpc.fast_loads(body)
    except ValueError:
        return  # the lane declines, and the pipeline reads it with the standard parser
    assert ordered(fast) == ordered(standard(body))


@FUZZ
@given(
    body=st.binary(max_size=300)
    | encoded(bodies_json)
    | pair_messages().map(lambda case: case[1].encode("utf-8", "surrogatepass"))
)
def test_what_the_fast_parser_reads_the_standard_one_reads_the_same_way(body: bytes) -> None:
    """The lane reads requests and responses with the fast parser: never a value the standard one would not give."""
    try:
        fast = jsonrpc.fast_loads(body)
    except ValueError:
        event("the fast parser refuses")
        return
    event("both read it")
    assert ordered(fast) == ordered(standard(body))


def test_the_fast_parser_is_the_one_the_sdk_reads_requests_with() -> None:
    """pydantic-core is installed wherever the mcp SDK is: the lane then reads as the server does."""
    from pydantic_core import from_json

    assert jsonrpc.fast_loads is from_json

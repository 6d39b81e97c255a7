"""The seam's parts the other wires need: top-level carrier and echo, shared method names, openers, declarers."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from mcp_sessions._pipeline._echo import Target, advertise, annotate
from mcp_sessions._plan._plan import Planner
from mcp_sessions._wire.protocol import Era
from mcp_sessions.profiles import (
    DRAFT,
    PROFILES,
    SEP1364_ALT1,
    SEP1364_ALT2,
    STRAWMAN,
    InvalidSessionMeta,
    TopLevelCarrier,
    TopLevelEcho,
)

JSON = {b"content-type": b"application/json"}
ALL = (DRAFT, STRAWMAN, SEP1364_ALT1, SEP1364_ALT2)


def profile_of(message: dict[str, Any], profiles: Any = ALL) -> tuple[str, bool]:
    plan = Planner(profiles).plan(json.dumps(message).encode(), JSON, 0)
    assert plan is not None
    call = plan.calls[0]
    return call.profile.name, call.local is not None


def test_top_level_carrier_reads_strips_and_opens() -> None:
    carrier = TopLevelCarrier(member="sessionId", opening_methods=frozenset({"initialize"}))
    assert carrier.read({"method": "tools/list"}) is None
    assert carrier.read({"method": "tools/list", "sessionId": None}) is None
    assert carrier.read({"method": "initialize", "sessionId": None}) == ("", None, True)
    assert carrier.read({"method": "initialize"}) is None
    assert carrier.read({"method": "tools/list", "sessionId": "abc"}) == ("abc", None, False)
    with pytest.raises(InvalidSessionMeta):
        carrier.read({"method": "tools/list", "sessionId": 5})
    message = {"method": "x", "sessionId": None}
    assert carrier.strip(message) is True and message == {"method": "x"}
    assert carrier.strip(message) is False
    assert carrier.opens({"sessionId": None}, "initialize") and not carrier.opens({}, "initialize")


@pytest.mark.parametrize("order", list(itertools.permutations(ALL)), ids=lambda o: ",".join(p.name for p in o))
def test_each_message_goes_to_its_wire_whatever_the_order(order: Any) -> None:
    request = {"jsonrpc": "2.0", "id": 1}
    assert profile_of({**request, "method": "session/create", "params": {"hints": {}}}, order) == ("strawman", True)
    assert profile_of({**request, "method": "session/create", "params": {"capabilities": {}}}, order) == (
        "sep1364-alt1",
        True,
    )
    assert profile_of({**request, "method": "session/delete", "params": {"id": "x"}}, order) == ("strawman", True)
    assert profile_of({**request, "method": "session/delete", "params": {"sessionId": "x"}}, order) == (
        "sep1364-alt1",
        True,
    )
    assert profile_of({**request, "method": "terminate", "sessionId": "x"}, order) == ("sep1364-alt2", True)
    assert profile_of({**request, "method": "initialize", "sessionId": None}, order) == ("sep1364-alt2", False)
    assert profile_of({**request, "method": "sessions/create"}, order) == ("draft", True)
    meta = {"mcp/session": {"id": "x"}}
    assert profile_of({**request, "method": "tools/list", "params": {"_meta": meta}}, order) == ("strawman", False)


def test_an_ordinary_initialize_takes_the_first_wire() -> None:
    assert profile_of({"jsonrpc": "2.0", "id": 1, "method": "initialize"}) == ("draft", False)


def test_a_client_that_declared_the_strawman_gets_its_required_error() -> None:
    declared: dict[str, Any] = {"io.modelcontextprotocol/clientCapabilities": {"experimental": {"session": {}}}}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"_meta": declared}}
    assert profile_of(message) == ("strawman", False)
    assert profile_of(message, (DRAFT,)) == ("draft", False)


def test_only_the_draft_precomputes_nothing_extra() -> None:
    planner = Planner((DRAFT,))
    assert planner.strips is False
    assert (planner._openers, planner._declarers, planner._guarded) == ((), (), frozenset())
    assert Planner(ALL).strips is True


def test_top_level_echo_and_null_revocation() -> None:
    target = Target(SEP1364_ALT1, None, advertised=(), capability={}, era=Era.MODERN, operation=None, revoked=True)
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert annotate(target, message) is True and message["sessionId"] is None
    strawman = Target(STRAWMAN, None, advertised=(), capability={}, era=Era.MODERN, operation=None, revoked=True)
    message = {"jsonrpc": "2.0", "id": 1, "result": {"_meta": {"other": 1}}}
    assert annotate(strawman, message) is True
    assert message["result"]["_meta"] == {"other": 1, "mcp/session": None}
    echoed: dict[str, Any] = {"id": 1, "result": {}}
    TopLevelEcho("sessionId").attach(echoed, echoed["result"], "tok", None, "2026-01-01T00:00:00Z")
    assert echoed == {"id": 1, "result": {}, "sessionId": "tok"}


def test_capabilities_merge_where_a_wire_asks() -> None:
    result: dict[str, Any] = {"capabilities": {}}
    values = {p.name: p.capability.value(required=True) for p in ALL}
    for profile in ALL:
        advertise(result, profile, Era.LEGACY, value=values[profile.name])
    assert result["capabilities"]["sessions"] == {"required": True}
    assert result["capabilities"]["experimental"] == {
        "sessions": {"required": True},
        "session": {"version": 1, "features": ["create", "resume", "list", "delete"]},
    }
    assert SEP1364_ALT1.capability.value(required=False) == {"required": False}


def test_every_wire_is_registered_by_name() -> None:
    assert list(PROFILES) == ["draft", "strawman", "sep1364-alt1", "sep1364-alt2"]

"""The seam's parts the other wires need: top-level carrier and echo, shared method names, openers, declarers;
and the pipeline knowing wires only through it."""

from __future__ import annotations

import ast
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

import mcp_sessions
from mcp_sessions._pipeline._response import Target, advertise, annotate
from mcp_sessions._plan import Planner
from mcp_sessions._session import SessionNotFound
from mcp_sessions._wire.protocol import Era
from mcp_sessions.profiles import DRAFT, PROFILES, SEP1364_ALT1, SEP1364_ALT2, SESSION_META_KEY, STRAWMAN
from mcp_sessions.profiles._base import Claim
from mcp_sessions.profiles._carriers import InvalidSessionMeta, TopLevelCarrier, TopLevelEcho

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


def test_a_shared_method_name_in_no_wires_shape_goes_to_the_first_wire_that_has_it() -> None:
    """Answered there with that wire's -32602, before a client's declaration is read."""
    message = {"jsonrpc": "2.0", "id": 1, "method": "session/delete", "params": {}}
    assert profile_of(message) == ("strawman", True)
    assert profile_of(message, (SEP1364_ALT1, STRAWMAN)) == ("sep1364-alt1", True)


def test_what_the_pipeline_asks_of_a_wire_the_draft_answers_as_the_base_does() -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    assert DRAFT.claim(message, "tools/list") is None
    assert DRAFT.claim({**message, "params": {"_meta": {SESSION_META_KEY: {}}}}, "tools/list") == (
        Claim.NAMES,
        None,
    )
    assert DRAFT.claim(message, "sessions/create") == (Claim.CALLS, DRAFT.methods["sessions/create"])
    assert [DRAFT.header_names_session(era) for era in Era] == [era is Era.MODERN for era in Era]
    assert STRAWMAN.header_names_session(Era.LEGACY) is False and SEP1364_ALT2.header_names_session(Era.LEGACY)
    gone = SessionNotFound("revoked", None)
    assert DRAFT.unknown_session("tok", gone) is not None and STRAWMAN.unknown_session("tok", gone) is None
    assert DRAFT.gone_codes() < STRAWMAN.gone_codes()
    assert not DRAFT.echo_ends(None) and STRAWMAN.echo_ends(None) and not STRAWMAN.echo_ends({})
    assert [p.advertises("initialize", Era.LEGACY) for p in ALL] == [True, True, True, False]


PIPELINE = Path(mcp_sessions.__file__).parent
SEAM_FILES = [PIPELINE / "_middleware.py", PIPELINE / "_plan.py", *sorted((PIPELINE / "_pipeline").glob("*.py"))]
WIRE_NAMES = ("strawman", "sep1364", "header_every_era", "opening_methods", "declared", "unknown_is_no_session")


def names_in(tree: ast.AST) -> set[str]:
    """Every name the code spells: variables, attributes, imports, functions, classes, arguments, keywords."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.update((node.name, node.asname or ""))
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.keyword):
            found.add(node.arg or "")
    return found


@pytest.mark.parametrize("path", SEAM_FILES, ids=lambda path: path.name)
def test_the_pipeline_knows_one_wire_interface(path: Path) -> None:
    """No branch, field or name of a wire other than the interface's in the middleware or the pipeline."""
    names = names_in(ast.parse(path.read_text(encoding="utf-8")))
    assert names  # the file was read
    assert [n for n in names if any(wire in n.lower() for wire in WIRE_NAMES)] == []


def test_the_seam_check_finds_a_wire_name() -> None:
    tree = ast.parse("from .profiles import SEP1364_ALT1\nif call.profile.header_every_era:\n    declared = 1\n")
    assert {"SEP1364_ALT1", "header_every_era", "declared"} <= names_in(tree)


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

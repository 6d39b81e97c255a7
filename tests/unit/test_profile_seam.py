"""The plan (parse once, classify single and batch alike, find the wire each message speaks), and the seam: the
pipeline knows wires only through the profile interface; the draft is the one wire registered, the retired ones
are named as such."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

import mcp_sessions
from mcp_sessions._pipeline._response import advertise
from mcp_sessions._plan import Planner
from mcp_sessions.profiles import DRAFT, PROFILES, Era, WireProfile, profiles_from_names
from mcp_sessions.profiles._base import Capability, LocalMethod
from mcp_sessions.profiles._carriers import Echo, SessionCarrier

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


def test_the_draft_advertises_where_its_text_says() -> None:
    result: dict[str, Any] = {"capabilities": {}}
    assert advertise(result, DRAFT, Era.LEGACY, value=DRAFT.capability.value(required=True))
    assert result["capabilities"] == {"sessions": {"required": True}, "experimental": {"sessions": {"required": True}}}
    advertised = [DRAFT.advertises(m, era) for m in ("initialize", "server/discover") for era in Era]
    assert advertised == [True, False, True, True]


def test_the_draft_is_the_one_wire_registered() -> None:
    assert list(PROFILES) == ["draft"]


@pytest.mark.parametrize("name", ["strawman", "sep1364-alt1", "sep1364-alt2"])
def test_a_retired_wire_is_refused_by_name(name: str) -> None:
    with pytest.raises(ValueError, match=f"the session wire profile '{name}' was removed: .*use 'draft'"):
        profiles_from_names(f"draft,{name}")


JSON = {b"content-type": b"application/json"}


async def _answer(call: Any) -> dict[str, Any]:
    return {}


TOY = WireProfile(
    name="toy",
    carrier=SessionCarrier(meta_key="example.com/toy", id_member="id"),
    echo=Echo(meta_key="example.com/toy", id_member="id", expiry_member="expiry"),
    capability=Capability(per_request=(("toy",),), handshake=(("experimental", "toy"),)),
    methods={"toy/open": LocalMethod(needs_session=False, answer=_answer)},
    sessionless=frozenset({"toy/open"}),
    not_found=-32001,
    required=-32002,
    header_mismatch=-32020,
)


def plan(body: Any, *, headers: dict[bytes, bytes] | None = None, profiles: Any = (DRAFT,)) -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Planner(profiles).plan(raw, headers or JSON, 0)


def request(method: str, request_id: Any = 1, **params: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params:
        message["params"] = params
    return message


def test_the_era_comes_from_the_header_alone() -> None:
    assert plan(request("tools/list")).era is Era.LEGACY
    assert plan(request("tools/list"), headers={**JSON, b"mcp-protocol-version": b"2025-11-25"}).era is Era.LEGACY
    assert plan(request("tools/list"), headers={**JSON, b"mcp-protocol-version": b"2026-07-28"}).era is Era.MODERN


def test_local_methods_and_batches() -> None:
    (create,) = plan(request("sessions/create")).calls
    assert create.local is DRAFT.methods["sessions/create"]
    mixed = plan([request("tools/list"), 5, {"jsonrpc": "2.0", "method": "notifications/x"}])
    assert [c.method for c in mixed.calls] == ["tools/list", None, "notifications/x"]
    assert [c.is_request for c in mixed.calls] == [True, False, False]
    assert mixed.local is None


def test_the_first_wire_that_speaks_a_message_takes_it() -> None:
    profiles = (DRAFT, TOY)
    (toy_call,) = plan(request("toy/open"), profiles=profiles).calls
    assert (toy_call.profile, toy_call.local) == (TOY, TOY.methods["toy/open"])
    meta = {"_meta": {"example.com/toy": {"id": "x"}}}
    (by_key,) = plan(request("tools/call", **meta), profiles=profiles).calls
    assert by_key.profile is TOY
    (neither,) = plan(request("tools/call"), profiles=profiles).calls
    assert neither.profile is DRAFT  # the first wire is the default


def test_a_single_request_id_is_kept_as_sent_and_batch_ids_are_sanitised() -> None:
    (single,) = plan(request("tools/list", request_id=[1])).calls
    assert single.request_id == [1]
    (element,) = plan([request("tools/list", request_id=[1])]).calls
    assert element.request_id is None

"""The plan: parse once, classify single and batch alike, and find the wire each message speaks."""

from __future__ import annotations

import json
from typing import Any

from mcp_sessions._plan import Planner
from mcp_sessions._wire.protocol import Era
from mcp_sessions.profiles import DRAFT, WireProfile
from mcp_sessions.profiles._base import Capability, LocalMethod
from mcp_sessions.profiles._carriers import Echo, SessionCarrier

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

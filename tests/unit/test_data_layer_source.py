"""The data-layer source alone: "not mine", a verified session, or the wire's refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import SECRET
from mcp_sessions import KeySet
from mcp_sessions._plan import Planner
from mcp_sessions._session._service import SessionService
from mcp_sessions._wire import Refusal
from mcp_sessions.profiles import DRAFT
from mcp_sessions.profiles._carriers import SessionCarrier
from mcp_sessions.sources import DataLayerSource
from mcp_sessions.stores import MemoryStore

pytestmark = pytest.mark.anyio

assert isinstance(DRAFT.carrier, SessionCarrier)  # the draft names its session in params._meta
KEY = DRAFT.carrier.meta_key
SCOPE: dict[str, Any] = {"type": "http", "headers": []}


@pytest.fixture
def service() -> SessionService:
    return SessionService(keys=KeySet.from_secret(SECRET), store=MemoryStore(), ttl=3600, idle_ttl=None, principal=None)


async def resolve(service: SessionService, meta: Any, headers: dict[bytes, bytes] | None = None) -> Any:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}}
    if meta is not ...:
        message["params"]["_meta"] = {KEY: meta}
    plan = Planner([DRAFT]).plan(json.dumps(message).encode(), headers or {}, 0)
    assert plan is not None
    (call,) = plan.calls
    return await DataLayerSource(service).session_for(SCOPE, call, plan)


async def test_no_metadata_is_not_mine(service: SessionService) -> None:
    assert await resolve(service, ...) is None
    assert await resolve(service, None) is None


async def test_a_minted_session_resolves_to_its_stable_id(service: SessionService) -> None:
    minted = await service.mint(SCOPE, None)
    session = await resolve(service, {"sessionId": minted.token})
    assert session.id == minted.claims.session_id and session.token == minted.token


@pytest.mark.parametrize(
    ("meta", "code", "reason"),
    [({"sessionId": "a.b.c"}, -32043, "invalid_token"), ({"sessionId": 1}, -32600, "invalid_metadata"),
     ("token", -32600, "invalid_metadata")],
    ids=["forged", "id-not-string", "not-an-object"],
)  # fmt: skip
async def test_refusals_carry_the_wire_code_and_a_loggable_reason(
    service: SessionService, meta: Any, code: int, reason: str
) -> None:
    with pytest.raises(Refusal) as refused:
        await resolve(service, meta)
    assert (refused.value.code, refused.value.reason) == (code, reason)
    if code == -32043:
        assert refused.value.data == {"sessionId": "a.b.c"}


async def test_a_revoked_session_is_refused_under_its_stable_id(service: SessionService) -> None:
    minted = await service.mint(SCOPE, None)
    session = await resolve(service, {"sessionId": minted.token})
    assert await service.revoke(session)
    with pytest.raises(Refusal) as refused:
        await resolve(service, {"sessionId": minted.token})
    assert (refused.value.code, refused.value.reason, refused.value.session_id) == (-32043, "revoked", session.id)


async def test_the_header_must_match_on_the_per_request_era_only(service: SessionService) -> None:
    minted = await service.mint(SCOPE, None)
    other = {b"mcp-session-id": b"another"}
    assert await resolve(service, {"sessionId": minted.token}, other) is not None  # 2025: the server's own header
    with pytest.raises(Refusal) as refused:
        await resolve(service, {"sessionId": minted.token}, {**other, b"mcp-protocol-version": b"2026-07-28"})
    assert refused.value.code == -32020

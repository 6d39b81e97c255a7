"""The sources alone, pure, no server: host conversation keys, id bounds, digests and the options that turn them on;
the data-layer source's "not mine", a verified session, or the wire's refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from conftest import SECRET
from mcp_sessions import KeySet, SessionKey
from mcp_sessions._plan import Planner
from mcp_sessions._session._service import SessionService
from mcp_sessions._tokens import IdDigests
from mcp_sessions._wire import Refusal
from mcp_sessions.profiles import DRAFT
from mcp_sessions.profiles._carriers import SessionCarrier
from mcp_sessions.sources import DataLayerSource, HostKey
from mcp_sessions.sources._host import conversation_id, host_keys_from_config
from mcp_sessions.sources._named import TransportSource, is_transport_session_id
from mcp_sessions.stores import MemoryStore
from unit._conversations import KEYS, hosts

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("meta:acme/chat", (HostKey("meta:acme/chat", "meta", "acme/chat"),)),
        (" header:X-Chat , meta:k ", (HostKey("header:x-chat", "header", "x-chat"), HostKey("meta:k", "meta", "k"))),
        (["HEADER:x-a"], (HostKey("header:x-a", "header", "x-a"),)),
        ("", ()),
        (",,", ()),
    ],
)
def test_conversation_keys_parse(config: Any, expected: tuple[HostKey, ...]) -> None:
    assert host_keys_from_config(config) == expected


@pytest.mark.parametrize("config", ["acme", "meta:", "header:", "header:bad name", "cookie:x", "header:a:b"])
def test_bad_conversation_keys_name_the_option(config: str) -> None:
    with pytest.raises(ValueError, match=r"^conversation_keys: .* is not 'meta:KEY' or 'header:NAME'"):
        host_keys_from_config(config)


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("9f2c1e2a-1111-4a4a-8b8b-000000000000", True),
        ("v1/AbC+/=_-.:~@", True),
        ("x" * 256, True),
        ("x" * 257, False),
        ("", False),
        ("a b", False),
        ('a"b', False),
        ("a\\b", False),
        ("a,b", False),
        ("a;b", False),
        ("caf\u00e9", False),
        ("line\nbreak", False),
        (7, False),
        (None, False),
        (["a"], False),
    ],
)
def test_conversation_ids_are_bounded(value: Any, kept: bool) -> None:
    assert conversation_id(value) == (value if kept else None)


def test_the_first_matching_key_wins_whatever_the_order_in_meta() -> None:
    source = hosts(HostKey("meta:mine", "meta", "mine"))
    headers = {b"agent-session-id": b"goose-1"}

    assert (c := source.find(headers, {"sessionID": "oc", "vscode.conversationId": "vs"})) is not None
    assert (c.source, c.id) == ("vscode", "vs")
    assert (c := source.find(headers, {"sessionID": "oc"})) is not None
    assert (c.source, c.id) == ("goose", "goose-1")  # the header is tried before the later _meta keys
    assert (c := source.find(headers, {"mine": "m", "openai/session": "oa"})) is not None
    assert (c.source, c.id) == ("meta:mine", "m")
    assert (c := source.find({}, {"openai/session": "bad id", "sessionID": "oc"})) is not None
    assert (c.source, c.id) == ("opencode", "oc")  # an unusable id is skipped, not fatal
    assert source.find({}, None) is None
    assert source.find({b"content-type": b"application/json"}, {"progressToken": 1}) is None


def test_openai_subject_is_the_user() -> None:
    found = hosts().find({}, {"openai/session": "s-1", "openai/subject": "u-1"})
    assert found is not None
    assert found.user == "u-1"
    other = hosts().find({}, {"vscode.conversationId": "c", "openai/subject": "u-1"})
    assert other is not None
    assert other.user is None


def test_digests_are_keyed_stable_and_separate() -> None:
    digests = IdDigests(KEYS)
    again = IdDigests(KeySet.from_secret(SECRET))
    other = IdDigests(KeySet.from_secret(SECRET[::-1]))
    raw = b"0123456789abcdef0123456789abcdef"

    assert digests.transport(raw) == again.transport(raw) != other.transport(raw)
    assert digests.transport(raw).startswith("ts-")
    assert raw.decode() not in digests.transport(raw)
    assert digests.conversation("openai", "c", None) != digests.conversation("vscode", "c", None)
    assert digests.conversation("openai", "c", None) != digests.conversation("openai", "c", "principal")
    assert len(digests.conversation("openai", "c", None)) == 27


def test_digests_from_an_asymmetric_signer() -> None:
    key = SessionKey.from_private_key(ec.generate_private_key(ec.SECP256R1()), kid="ec-1")
    digests = IdDigests(KeySet([key]))
    assert digests.transport(b"abc") == IdDigests(KeySet([key])).transport(b"abc")


@pytest.mark.parametrize(
    ("value", "is_transport"),
    [(b"0123456789abcdef", True), (b"a.b.c", False), (b"", False), (b"x" * 257, False), (b"a.b", True)],
)
def test_what_can_be_a_transport_session_id(value: bytes, is_transport: bool) -> None:
    assert is_transport_session_id(value) is is_transport


def test_minted_transport_sessions_are_bounded() -> None:
    sessions = SessionService(keys=KEYS, store=MemoryStore(), ttl=60, idle_ttl=None, principal=None)
    source = TransportSource(sessions, IdDigests(KEYS), max_sessions=2)
    for raw in (b"one", b"two", b"three", b"a.b.c"):
        source.minted(raw)
    assert len(source) == 2


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


async def test_a_minted_session_resolves_to_its_stable_id_and_revoked_is_refused_under_it(
    service: SessionService,
) -> None:
    minted = await service.mint(SCOPE, None)
    session = await resolve(service, {"sessionId": minted.token})
    assert session.id == minted.claims.session_id
    assert session.token == minted.token
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

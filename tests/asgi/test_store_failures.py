"""The session methods, against every way a real store fails: the retryable -32010, or -32602, never 500.

The stores (tests/_failing_stores.py) are real and fail as deployments see them fail: a
``MemoryStore`` at its ``max_sessions``, a SQLite file that cannot grow, one that is
read-only, one whose write lock another connection holds, a redis-server that stopped.
Property: whatever the method, the era, the caller and its parameters, the
answer is what the store's failure allows: the documented result where the call needs
nothing the store cannot give, the retryable -32010 with HTTP 503 and ``Retry-After``
where it needs more, -32602 for a malformed parameter whatever the store; never a 500,
never an exception out of the middleware, even when a tool's own ``session.data`` write
is what failed. The same through a real server: tests/e2e/test_store_failures.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.authentication import SimpleUser
from starlette.requests import Request

from _failing_stores import HOUR, failing_stores, filled_memory
from _mcp import AnswersProbes
from asgi._fuzz import FUZZ
from conftest import SECRET
from mcp_sessions import KeySet, MCPSessionMiddleware, get_session
from mcp_sessions._session import digest_of
from mcp_sessions.stores import SessionStore, SessionStoreUnavailable

from ._direct import Receiver, Sender, call, dumps, http_scope, json_response, modern_headers, with_envelope

KEYS: Final = KeySet.from_secret(SECRET)
NOTE: Final = "n" * 5000  # more than a SQLite page: a full file has no room for it, whatever else it has
# What each store call needs of a store that fails in each way: "ok" it works, "down" it raises, "either" it
# may (a full SQLite file keeps room in its pages for some small rows; an idle clock moves only once a second).
NEEDS: Final = {
    "memory-full": {"read": "ok", "idle-touch": "down", "revoke": "ok", "data": "down"},
    "sqlite-full": {"read": "ok", "idle-touch": "either", "revoke": "either", "data": "down"},
    "sqlite-read-only": {"read": "ok", "idle-touch": "either", "revoke": "down", "data": "down"},
    "sqlite-locked": {"read": "ok", "idle-touch": "either", "revoke": "down", "data": "down"},
    "redis-stopped": {"read": "down", "idle-touch": "down", "revoke": "down", "data": "down"},
}
KINDS: Final = sorted(NEEDS)
OPERATIONS: Final = ["create", "create-bad", "delete", "peek", "remember"]
"""The calls, by name ("-bad": a malformed parameter; ``peek`` and ``remember``: tools in a session)."""


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SessionStore]]:
    """One store of each failing kind for the module."""
    with failing_stores(tmp_path_factory.mktemp("failing-stores")) as built:
        yield built


@dataclass
class Case:
    """One request: what it is, and what of the store answering it needs."""

    message: dict[str, Any]
    modern: bool = False
    needs: tuple[str, ...] = ()
    """The store calls the answer needs, in order ("idle-touch" is a "read" without ``idle_ttl``)."""
    malformed: bool = False
    """A parameter of the wrong shape: -32602, with no store call."""


DELETE: Final = ("idle-touch", "revoke")
TOOL_NEEDS: Final = {"peek": ("idle-touch",), "remember": ("idle-touch", "data")}
"""``peek`` reads nothing of the store; ``remember`` writes ``session.data``."""


def token(user: str | None) -> str:
    """A live session of ``user`` (creating one stores nothing, so it is live in every store)."""
    claims = None if user is None else {"pbh": digest_of(user, KEYS.audience)}
    return KEYS.mint_session_token(ttl=HOUR, extra_claims=claims)[0]


not_a_string: st.SearchStrategy[Any] = st.one_of(
    st.integers(), st.floats(allow_nan=False), st.booleans(), st.lists(st.text(), max_size=2), st.just({})
)


@st.composite
def cases(draw: st.DrawFn, operation: str, user: str | None) -> Case:
    named = {"_meta": {"io.modelcontextprotocol/session": {"sessionId": token(user)}}}
    match operation:
        case "create":
            case = Case({"method": "sessions/create", "params": {"label": draw(st.text(max_size=20))}})
        case "create-bad":
            label = draw(not_a_string | st.text(min_size=257, max_size=300))
            case = Case({"method": "sessions/create", "params": {"label": label}}, malformed=True)
        case "delete":
            case = Case({"method": "sessions/delete", "params": named}, needs=DELETE)
        case name:
            case = Case(
                {"method": "tools/call", "params": {"name": name, "arguments": {}, **named}}, needs=TOOL_NEEDS[name]
            )
    case.message = {"jsonrpc": "2.0", "id": draw(st.integers(0, 99)), **case.message}
    case.modern = draw(st.booleans())
    return case


def expected(case: Case, kind: str, idle_ttl: float | None) -> str:
    """The answer due: a "result", "invalid" (-32602), "unavailable" (-32010), or "either" of the last two."""
    if case.malformed:
        return "invalid"
    verdicts = {NEEDS[kind]["read" if need == "idle-touch" and idle_ttl is None else need] for need in case.needs}
    return "unavailable" if "down" in verdicts else "either" if "either" in verdicts else "result"


async def tools(scope: Any, receive: Any, send: Any) -> None:
    """A server whose ``remember`` tool writes ``session.data`` and lets a store failure out, as a raw app does."""
    received = json.loads(await Request(scope, receive).body())
    requests = received if isinstance(received, list) else [received]
    if any((request.get("params") or {}).get("name") == "remember" for request in requests):
        session = get_session()
        assert session is not None, "remember is called in a session"
        await session.data.set("note", NOTE)
    answers = [{"jsonrpc": "2.0", "id": request.get("id"), "result": {"content": []}} for request in requests]
    for message in json_response(answers if isinstance(received, list) else answers[0]):
        await send(message)


def ask(store: SessionStore, case: Case, user: str | None, idle_ttl: float | None) -> Sender:
    middleware = MCPSessionMiddleware(AnswersProbes(tools), keys=KEYS, store=store, idle_ttl=idle_ttl)
    message = with_envelope(case.message) if case.modern else case.message
    scope = http_scope(headers=modern_headers(message) if case.modern else None)
    if user is not None:  # as Starlette's AuthenticationMiddleware leaves it
        scope["user"] = SimpleUser(user)
    return anyio.run(call, middleware, dumps(message), scope)  # an exception out of it fails the test


def check(sender: Sender, expectation: str, request_id: int) -> None:
    """The answer is a documented one, and the one ``expectation`` (from :func:`expected`) allows."""
    assert sender.status != 500
    answer = sender.json()
    assert answer["jsonrpc"] == "2.0", answer
    assert answer["id"] == request_id, answer
    if "result" in answer:
        assert sender.status == 200
        outcome = "result"
    elif answer["error"]["code"] == -32010:
        assert sender.status == 503, sender.messages
        assert sender.header(b"retry-after") == b"1", sender.messages
        outcome = "unavailable"
    else:
        assert answer["error"]["code"] == -32602, answer
        outcome = "invalid"
    assert outcome == expectation or (expectation == "either" and outcome != "invalid"), (expectation, answer)


@pytest.mark.parametrize("user", [None, "alice"], ids=["anonymous", "signed-in"])
@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("kind", KINDS)
@settings(FUZZ, max_examples=5)
@given(data=st.data(), idle_ttl=st.sampled_from([None, HOUR]))
def test_a_failing_store_gets_the_retryable_error_and_bad_params_invalid_params(
    stores: dict[str, SessionStore],
    kind: str,
    operation: str,
    user: str | None,
    data: st.DataObject,
    idle_ttl: float | None,
) -> None:
    case = data.draw(cases(operation, user))
    check(ask(stores[kind], case, user, idle_ttl), expected(case, kind, idle_ttl), case.message["id"])


def remember(request_id: int, session: str) -> dict[str, Any]:
    meta = {"io.modelcontextprotocol/session": {"sessionId": session}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": "remember", "_meta": meta}}


@pytest.mark.anyio
async def test_a_batch_whose_tool_fails_to_write_gets_the_retryable_error_for_each_request() -> None:
    """A 2025-era server that takes batches: the whole batch is retried, so every request in it gets -32010."""
    middleware = MCPSessionMiddleware(AnswersProbes(tools), keys=KEYS, store=await filled_memory())
    session = token(None)
    sender = await call(middleware, dumps([remember(1, session), remember(2, session)]))
    assert sender.status == 503
    assert sender.header(b"retry-after") == b"1"
    assert [(answer["id"], answer["error"]["code"]) for answer in sender.json()] == [(1, -32010), (2, -32010)]


@pytest.mark.anyio
async def test_a_store_failure_after_the_app_started_its_response_is_the_apps_to_end() -> None:
    """Once the app has sent its response's start, a store failure is re-raised: no second response is sent."""

    async def answers_then_writes(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        session = get_session()
        assert session is not None
        await session.data.set("note", NOTE)

    middleware = MCPSessionMiddleware(AnswersProbes(answers_then_writes), keys=KEYS, store=await filled_memory())
    sender = Sender()
    with pytest.raises(SessionStoreUnavailable):
        await middleware(http_scope(), Receiver(dumps(remember(1, token(None)))), sender)
    assert [message["status"] for message in sender.starts] == [200]

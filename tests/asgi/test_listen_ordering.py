"""A listen stream that found no slot when it watched its session, and one when the SDK subscribed it, ends with it.

``ListenStream`` watches its session when it is built, before the SDK's ``ListenHandler`` calls the
bus's ``subscribe()``. A replica at ``max_sessions`` refuses the watch, and ``subscribe()`` then
refuses the listen, unless another session's stream ends in between and frees a slot: the listen
is then served without a watch. Driven here by direct ASGI calls in the transport's order, the slot
freed in that gap: the stream must still end at its session's deletion and at its expiry.
"""

from __future__ import annotations

import time
from typing import Literal

import anyio
import pytest
from starlette.types import Message

from conftest import SECRET
from mcp_sessions import KeySet
from mcp_sessions._pipeline import _forward
from mcp_sessions._pipeline._forward import ListenStream, final_frame
from mcp_sessions._session import Session, SessionService, current_session
from mcp_sessions.stores import MemoryStore
from mcp_sessions.subscriptions import SessionSubscriptionBus

from ._direct import Sender

pytestmark = pytest.mark.anyio

KEYS = KeySet.from_secret(SECRET)
CHECK_EVERY = 0.2
ENDS_WITHIN = 5.0
BODY: Message = {"type": "http.request", "body": b"{}", "more_body": False}


@pytest.mark.parametrize("end", ["deleted", "expired"])
async def test_a_stream_that_found_its_slot_only_at_subscribe_ends_with_its_session(
    end: Literal["deleted", "expired"], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_forward, "RECHECK_WITHOUT_IDLE_TTL", CHECK_EVERY)  # no idle_ttl: no idle expiry either
    bus = SessionSubscriptionBus(max_sessions=1)
    sessions = SessionService(keys=KEYS, store=MemoryStore(), ttl=3600, idle_ttl=None, principal=None, bus=bus)
    now = time.time()
    expires_at = int(now) + (2 if end == "expired" else 3600)  # 1 to 2 s from now
    session = Session(
        sessions, token="token", session_id="s1", issued_at=int(now), token_expires_at=expires_at, now=now
    )
    requests = [BODY]
    sender = Sender()

    async def receive() -> Message:
        if requests:
            return requests.pop()
        await anyio.sleep_forever()  # the client stays
        raise AssertionError("unreachable")

    other = bus.watch("s0", lambda: None)  # another session's stream holds the replica's one slot
    assert other is not None
    listen = ListenStream(bus, sessions, session, "listen-1", receive, sender)
    other()  # and ends before this listen reaches the SDK
    token = current_session.set(session)
    try:
        unsubscribe = bus.subscribe(lambda event: None)  # the SDK's ListenHandler: the freed slot is this one's
    finally:
        current_session.reset(token)
    assert await listen.receive() == BODY
    await listen.send({"type": "http.response.start", "status": 200, "headers": []})
    await listen.send({"type": "http.response.body", "body": b"event: message\r\ndata: {}\r\n\r\n", "more_body": True})
    with anyio.move_on_after(0.5):  # the positive control: open while its session lives
        await listen.receive()
        raise AssertionError("the stream ended while its session lived")
    if end == "deleted":
        assert await sessions.revoke(session)
    try:
        with anyio.fail_after(ENDS_WITHIN):
            assert await listen.receive() == {"type": "http.disconnect"}
    finally:
        unsubscribe()
        listen.close()
    assert sender.messages[-1] == {"type": "http.response.body", "body": final_frame("listen-1"), "more_body": False}

"""Answers that end with the token that let their request in: at its ``exp`` plus the leeway.

A draft SEP of the MCP transports working group, "Authorization Lifetime for Subscription Streams"
(2026-09-29, ``modelcontextprotocol/transports-wg``, ``proposals/XXXX-authorization-lifetime-for-subscription-
streams.md``), has a server, "together with any intermediary, such as an API gateway", write nothing to a
stream after its token's expiry. The gateway bounds every answer to a request a token let in, a stream or
not, by one deadline: the token's ``exp`` less the verifier's clock (the wall clock's, as PyJWT reads it),
taken to the event loop's clock once, as the request arrives, for one cancel scope around the app. No task, no
timer of its own: a request that ends first costs the scope's. At the deadline the app is cancelled (in front
of an upstream, its connection closed), and the answer ends as far as it got:

- not started: the 401 an expired token gets (``GatewayAuth.expired``);
- a ``subscriptions/listen`` stream whose client declares the SEP (its prototype's client capability, under
  ``experimental`` or ``extensions``): the SEP's last message, the error ``-32028`` "Authorization ended" with
  ``data.reason`` ``token_expiry`` in answer to the listen request, then the end of the body. The code is
  provisional in the SEP; a client of 2026-07-28 without the capability gets no message (SEP, section 5,
  rule 4);
- any other stream (a 2025 GET stream, a long call's events): the end of the body, between two events.

Only a listen request's body is kept, its first message (a body the server delivers in several is not read,
and its stream ends without the message).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..._asgi import header, sse_event
from ..._wire import jsonrpc
from ..._wire.protocol import MCP_METHOD_HEADER
from ..._wire.sse import between_events

AUTHORIZATION_ENDED: Final = -32028
"""The SEP's ``AuthorizationEnded`` error code (provisional there)."""
LIFETIME: Final = "io.modelcontextprotocol/subscription-lifetime"
"""The client capability that says a client speaks the SEP, as its prototype reads it."""
_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"


async def until_expiry(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, left: float, expired: Callable[[Scope], ASGIApp]
) -> None:
    """``app``'s answer, ended ``left`` seconds from now (its token's ``exp`` and the leeway, less the verifier's
    clock) as the module says."""
    answer = _Answer(scope, receive, send)
    with anyio.move_on_after(left) as deadline:
        await app(scope, answer.receive, answer.send)
    if not deadline.cancelled_caught or answer.ended:
        return
    if not answer.started:
        return await expired(scope)(scope, receive, send)
    last = answer.authorization_ended() if between_events(answer.tail) else b""
    await send({"type": "http.response.body", "body": last, "more_body": False})


class _Answer:
    """What a request's answer sent so far: whether it started and ended, its last bytes; a listen request."""

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self.started = self.ended = False
        self.tail = b"\n\n"
        self.request = b""
        listen = header(scope["headers"], MCP_METHOD_HEADER) == b"subscriptions/listen"
        self.receive = self._keeping if listen else receive

    async def _keeping(self) -> Message:
        message = await self._receive()
        self.request = self.request or message.get("body", b"")
        return message

    async def send(self, message: Message) -> None:
        # Counted once sent: a send the deadline cancels wrote nothing.
        await self._send(message)
        if message["type"] == "http.response.start":
            self.started = True
        elif message["type"] == "http.response.body":
            self.tail = (self.tail + message.get("body", b"")[-4:])[-4:]
            self.ended = not message.get("more_body", False)

    def authorization_ended(self) -> bytes:
        """The SEP's last message, as an event, for a listen request whose client speaks it; else nothing."""
        request = jsonrpc.loads(self.request)
        params = request.get("params") if isinstance(request, dict) else None
        declared = (jsonrpc.meta(params) or {}).get(_CAPABILITIES)
        if not isinstance(declared, dict) or jsonrpc.echoable_id(request.get("id")) is None:
            return b""
        kinds = (declared.get("experimental"), declared.get("extensions"))
        if not any(isinstance(kind, dict) and LIFETIME in kind for kind in kinds):
            return b""
        data = {"reason": "token_expiry"}
        ended = jsonrpc.error(request["id"], AUTHORIZATION_ENDED, "Authorization ended", data)
        return sse_event(ended)

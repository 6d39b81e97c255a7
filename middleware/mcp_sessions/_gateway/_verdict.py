"""The upstream decides: before the gateway answers a request itself, it asks the upstream whether it takes it.

The session pipeline answers some requests without forwarding them (``sessions/create``, a ``-32043``…). In a
server's own process it asks the server's transport first; across the network it asks the upstream, with a
probe: the request's own headers (``Authorization``, the protocol version, the transport session, ``Origin``)
and its own ``params``, as a request of a method no server has, ``mcp-sessions/probe``, so that the probe has
no effect. A server that answers "method not found" has accepted everything before its dispatch (its auth, its
protocol versions, its transport session, its envelope checks), and only then does the gateway answer. Any
other answer (a 401 with ``WWW-Authenticate``, a 400 for a protocol version it does not speak, a 404 for a
transport session it lost) is the client's answer, as the upstream sent it.

A session is bound to the caller the upstream accepted: by default to the digest of the ``Authorization``
credential it accepted (``credential_principal``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Final

from starlette.types import Scope

from .._guard import Guard, Rejection
from .._wire import jsonrpc
from .._wire.protocol import INVALID_PARAMS, MCP_METHOD_HEADER, METHOD_NOT_FOUND
from .._wire.sse import SSERewriter
from ._headers import header
from ._proxy import echoable_id, upstream_failed

if TYPE_CHECKING:
    from ._proxy import UpstreamAnswer, UpstreamProxy

__all__ = ["PROBE_METHOD", "UpstreamGuard", "credential_principal"]

PROBE_METHOD: Final = "mcp-sessions/probe"
_PROBE_ID: Final = "mcp-sessions-probe"
_MAX_ANSWER: Final = 256 * 1024


def credential_principal(scope: Scope) -> str | None:
    """The gateway's default principal hook: the ``Authorization`` credential (its scheme, any case, and value).

    The upstream checks it on every request (the gateway answers nothing the upstream has not
    accepted), and only its keyed digest is kept, in the session's token.
    """
    value = header(scope["headers"], b"authorization")
    if value is None:
        return None
    scheme, _, credential = value.decode("latin-1").strip().partition(" ")
    return f"{scheme.lower()} {credential.strip()}"


class UpstreamGuard(Guard):
    """The session pipeline's guard in a gateway: :meth:`verdict` asks the upstream (see the module)."""

    __slots__ = ("_proxy",)

    def __init__(self, proxy: UpstreamProxy) -> None:
        super().__init__(host="0.0.0.0")  # no check of its own: the upstream's verdict is the only one
        self._proxy = proxy

    async def verdict(self, scope: Scope, message: object, *, body: bytes) -> Rejection | None:
        """``None`` when the upstream takes the request up to its dispatch, else the upstream's answer.

        The probe has the request's own headers (``Mcp-Method`` naming the probe's method, without
        ``Mcp-Name``) and the id and params of its message (the first of a batch).
        """
        first = message[0] if isinstance(message, list) and message else message
        first = first if isinstance(first, dict) else {}
        probe_id = echoable_id(first.get("id"))
        if probe_id is None:
            probe_id = _PROBE_ID
        probe: dict[str, object] = {"jsonrpc": "2.0", "id": probe_id, "method": PROBE_METHOD}
        if isinstance(params := first.get("params"), dict):
            probe["params"] = params
        headers = [
            (name, PROBE_METHOD.encode() if name == MCP_METHOD_HEADER else value)
            for name, value in scope["headers"]
            if name != b"mcp-name"
        ]
        async with self._proxy.opened(scope, headers, jsonrpc.dumps(probe)) as answer:
            if isinstance(answer, Rejection):
                return answer  # the gateway's own: a host it does not serve, an upstream down, a session lost
            return await _judge(answer, probe_id)


async def _judge(answer: UpstreamAnswer, probe_id: str | int) -> Rejection | None:
    """Read the upstream's answer to the probe (JSON, or events until the probe's own), bounded, and judge it."""
    found: list[object] = []

    def collect(data: str) -> None:  # keeps the event that answers the probe; the event passes on unchanged
        if isinstance(message := _parsed(data), dict) and message.get("id") == probe_id:
            found.append(message)

    sse = (header(answer.headers, b"content-type") or b"").startswith(b"text/event-stream")
    events = SSERewriter(collect, once=False) if sse else None
    received = bytearray()
    async for chunk in answer.chunks:
        received += chunk
        if len(received) > _MAX_ANSWER:
            return upstream_failed(502, "The upstream's answer was too large", b"1", None)
        if events is not None:
            events.feed(chunk)
            if found:
                break
    if events is None:
        parsed = _parsed(received) if received else None
        found = parsed if isinstance(parsed, list) else [parsed]
    error = next((m.get("error") for m in found if isinstance(m, dict) and m.get("id") == probe_id), None)
    code = error.get("code") if isinstance(error, dict) else None
    if code == METHOD_NOT_FOUND or (code == INVALID_PARAMS and answer.status == 200):
        return None  # dispatched: the mcp SDK 1.x answers an unknown method -32602, in a 200 of the 2025 wire
    headers = [(n, v) for n, v in answer.headers if n != b"content-length"]
    headers.append((b"content-length", str(len(received)).encode()))
    message = error.get("message") if isinstance(error, dict) else None
    return Rejection(
        answer.status,
        tuple(headers),
        bytes(received),
        "upstream_refused",
        code if type(code) is int else None,
        message if isinstance(message, str) else None,
    )


def _parsed(data: str | bytes | bytearray) -> object:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None

"""The upstream decides: before the gateway answers a request itself, it asks the upstream whether it takes it.

The session pipeline answers some requests without forwarding them (``sessions/create``, a
``-32043``…). In a server's own process it asks the server's transport first; across the network
it asks the upstream, with a probe: the request's own headers (``Authorization``, the protocol
version, the transport session, ``Origin``) and its own ``params``, as a request of a method no
server has, ``mcp-sessions/probe``, so that the probe has no effect. A server that answers "method
not found" has accepted everything before its dispatch (its auth, its protocol versions, its
transport session, its envelope checks), and only then does the gateway answer. Any other answer
(a 401 with ``WWW-Authenticate``, a 400 for a protocol version it does not speak, a 404 for a
transport session it lost) is the client's answer, as the upstream sent it.

A session is bound to the caller the upstream accepted: by default to the digest of the
``Authorization`` credential it accepted (``credential_principal``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from starlette.types import Scope

from .._guard import Guard, Rejection
from .._wire import jsonrpc
from .._wire.protocol import INVALID_PARAMS, MCP_METHOD_HEADER, METHOD_NOT_FOUND
from .._wire.sse import SSERewriter
from ._answers import too_large

if TYPE_CHECKING:
    from ._proxy import UpstreamAnswer, UpstreamProxy

__all__ = ["PROBE_METHOD", "UpstreamGuard", "credential_principal"]

PROBE_METHOD: Final = "mcp-sessions/probe"
_PROBE_ID: Final = "mcp-sessions-probe"
_MAX_ANSWER: Final = 256 * 1024
_NAME_HEADER: Final = b"mcp-name"


def credential_principal(scope: Scope) -> str | None:
    """The gateway's default principal hook: the ``Authorization`` credential (its scheme, any case, and value).

    The upstream checks it on every request (the gateway answers nothing the upstream has not
    accepted), and only its keyed digest is kept, in the session's token.
    """
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, credential = value.decode("latin-1").strip().partition(" ")
            return f"{scheme.lower()} {credential.strip()}"
    return None


class UpstreamGuard(Guard):
    """The session pipeline's guard in a gateway: :meth:`verdict` asks the upstream (see the module)."""

    __slots__ = ("_proxy",)

    def __init__(self, proxy: UpstreamProxy) -> None:
        super().__init__(host="0.0.0.0")  # no check of its own: the upstream's verdict is the only one
        self._proxy = proxy

    async def verdict(self, scope: Scope, message: object, *, body: bytes) -> Rejection | None:
        """``None`` when the upstream takes the request up to its dispatch, else the upstream's answer."""
        probe, probe_id = _probe(message)
        async with self._proxy.asking(scope, _probe_headers(scope["headers"]), probe) as answer:
            if isinstance(answer, Rejection):
                return answer  # the gateway's own: a host it does not serve, an upstream down, a session lost
            return await _judge(answer, probe_id)


def _probe(message: object) -> tuple[bytes, str | int]:
    """The probe for a message (or the first of a batch): its id and params, and the probe's method."""
    first = message[0] if isinstance(message, list) and message else message
    first = first if isinstance(first, dict) else {}
    request_id = first.get("id")
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        request_id = _PROBE_ID
    probe: dict[str, object] = {"jsonrpc": "2.0", "id": request_id, "method": PROBE_METHOD}
    if isinstance(params := first.get("params"), dict):
        probe["params"] = params
    return jsonrpc.dumps(probe), request_id


def _probe_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The request's headers for its probe: ``Mcp-Method`` names the probe's method, ``Mcp-Name`` is gone."""
    probe_method = PROBE_METHOD.encode()
    return [
        (name, probe_method if name == MCP_METHOD_HEADER else value) for name, value in headers if name != _NAME_HEADER
    ]


async def _judge(answer: UpstreamAnswer, probe_id: str | int) -> Rejection | None:
    """Read the upstream's answer to the probe (JSON, or events until the probe's own), bounded, and judge it."""
    content_type = next((v for n, v in answer.headers if n == b"content-type"), b"")
    found: list[object] = []
    events = None
    if content_type.startswith(b"text/event-stream"):
        events = SSERewriter(lambda data: _collect(data, probe_id, found), once=False)
    received = bytearray()
    async for chunk in answer.chunks:
        received += chunk
        if len(received) > _MAX_ANSWER:
            return too_large()
        if events is not None:
            events.feed(chunk)
            if found:
                break
    if events is None:
        try:
            parsed = json.loads(received) if received else None
        except (ValueError, RecursionError):
            parsed = None
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


def _collect(data: str, probe_id: str | int, found: list[object]) -> None:
    """Keep the event that answers the probe; the event itself passes on unchanged."""
    try:
        message = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if isinstance(message, dict) and message.get("id") == probe_id:
        found.append(message)
    return None

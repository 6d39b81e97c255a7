"""Answering a request the middleware refuses: one error, a batch of errors, or the wrapped server's own answer.

Nothing of a refused request reaches the app; each call's span ends with the
refusal, and the rejection counter counts it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._asgi import send_accepted, send_json, send_status
from .._wire import Refusal, batch_refused, jsonrpc, store_unavailable
from .._wire.protocol import SESSION_STORE_UNAVAILABLE, Era, http_status

if TYPE_CHECKING:
    from asgiref.typing import ASGISendCallable
    from starlette.types import Send

    from .._otel import Operation
    from .._plan import Plan
    from .._verdict import Rejection


class Refuser:
    """The refusals of one middleware instance (they share its ``Retry-After``)."""

    __slots__ = ("_retry_after",)

    def __init__(self, retry_after: bytes) -> None:
        self._retry_after = retry_after

    async def refuse(self, plan: Plan, send: ASGISendCallable) -> None:
        """Answer a request with a refused call: one error, or for a batch an error per element."""
        unavailable = False
        for call in plan.calls:
            if call.method is not None and (refusal := call.refusal) is not None:
                unavailable = unavailable or refusal.code == SESSION_STORE_UNAVAILABLE
                if call.operation is not None:
                    attributes = {"mcp_sessions.reason": refusal.reason, "mcp.method.name": call.method}
                    call.operation.telemetry.sessions_rejected.add(1, attributes)
        if not plan.batch:
            call = plan.calls[0]
            refusal = call.refusal
            assert refusal is not None
            end_with(call.operation, refusal)
            if not call.is_request:
                # Notifications get no JSON-RPC answer; they simply never reach the app.
                return await send_status(send, 503 if unavailable else 202, self._retry_after)
            retry_after = self._retry_after if refusal.retry_after is None else str(refusal.retry_after).encode()
            return await send_json(
                send, http_status(refusal.code, plan.era), refusal.frame(call.request_id), retry_after
            )
        errors = []
        others = batch_refused()  # one for every element without a refusal of its own
        if unavailable:
            others = Refusal(SESSION_STORE_UNAVAILABLE, "Session store unavailable", reason="store_unavailable")
        for call in plan.calls:
            refusal = others if unavailable else call.refusal or others
            end_with(call.operation, refusal)
            if call.is_request or call.method is None:
                errors.append(refusal.frame(call.request_id))
        return await self._send_batch(send, errors, 503 if unavailable else _batch_refused_status(plan.era))

    async def store_failed(self, plan: Plan, error: Exception, send: ASGISendCallable) -> None:
        """Answer -32010 for a store failure the app let out before it answered (a tool's ``session.data``)."""
        refusal = store_unavailable(error)
        for call in plan.calls:
            if call.method is not None:
                call.refusal = refusal
        await self.refuse(plan, send)

    async def refuse_local_methods_in_batch(self, plan: Plan, send: ASGISendCallable) -> None:
        """A batch with a session method: -32600 for every element, nothing forwarded."""
        errors = [
            jsonrpc.invalid_request(call.request_id, "session methods are not allowed in a batch")
            for call in plan.calls
            if call.is_request or not isinstance(call.message, dict)
        ]
        await self._send_batch(send, errors, _batch_refused_status(plan.era))

    async def too_large(self, send: ASGISendCallable, limit: int) -> None:
        """413, with a JSON-RPC error body: the request was never read to the end."""
        reject = jsonrpc.invalid_request(None, f"Request body too large (limit {limit} bytes)")
        await send_json(send, 413, reject, self._retry_after)

    async def _send_batch(self, send: ASGISendCallable, errors: list[dict[str, object]], status: int) -> None:
        if not errors:
            return await send_accepted(send)
        await send_json(send, status, errors, self._retry_after)


async def reject(plan: Plan, rejection: Rejection, send: Send) -> None:
    """Answer as the wrapped server would have (its guard refused the request), ending each call's span."""
    for call in plan.calls:
        if (operation := call.operation) is not None:
            operation.refused(rejection.status, rejection.code, rejection.message)
            operation.end()
    await rejection.send(send)


def end_with(operation: Operation | None, refusal: Refusal) -> None:
    """End a call's span as refused."""
    if operation is not None:
        operation.fail(refusal.code, refusal.message)
        operation.end()


def _batch_refused_status(era: Era) -> int:
    """A batch answered here is one error response: 400 on the 2026-07-28 path, as -32600 is."""
    return 400 if era is Era.MODERN else 200

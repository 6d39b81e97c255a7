"""The answers the middleware gives itself, never forwarded: the server's own refusal, ours, a local method's
result, a refused handle's ``isError`` result.

Nothing of a refused request reaches the app; each call's span ends with the refusal, and the rejection counter
counts it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Receive, Scope, Send

from .._asgi import send_json, send_status
from .._plan import body_of
from .._wire import Refusal, batch_refused, jsonrpc, store_unavailable
from .._wire.jsonrpc import hashable_id
from .._wire.protocol import SESSION_STORE_UNAVAILABLE, http_status
from ..handles import answer_elements, send_answers
from ..profiles import Era, LocalCall
from ._probe import Rejection, ask_server
from ._response import Target, annotate

if TYPE_CHECKING:
    from .._otel import Operation
    from .._plan import Call, Plan
    from .._session import SessionService
    from ._forward import Forwarder


class Answers:
    """What one middleware answers itself: the server's own refusal first, then ours, or a local method's result
    (they share its ``Retry-After``)."""

    def __init__(
        self,
        app: ASGIApp,
        sessions: SessionService,
        forwarder: Forwarder,
        *,
        retry_after: int,
        probe_timeout: float,
        fronts_upstream: bool,
    ) -> None:
        """``fronts_upstream`` (a gateway's): a client that leaves ends the probe of its request."""
        self._app = app
        self._sessions = sessions
        self._forwarder = forwarder
        self._retry_after = str(retry_after).encode()
        self._probe_timeout = probe_timeout
        self._fronts_upstream = fronts_upstream

    async def before_sessions(self, scope: Scope, plan: Plan, body: bytes, receive: Receive, send: Send) -> bool:
        """Answer, before any session work, what needs none: the server's own refusal of a batch (the
        2026-07-28 server refuses every batch: no token is verified, no store touched for it), a batch with
        a session method (-32600 each), a session method as a notification (202, no effect)."""
        local = plan.local
        if not plan.batch and (local is None or local.is_request):
            return False  # a session method as a request: answered once its session is resolved
        has_local = local is not None or any(call.local is not None for call in plan.calls)
        if (has_local or plan.era is Era.MODERN) and (
            rejection := await self._server_refusal(scope, plan, body, receive)
        ) is not None:  # 2026-07-28 has no batches; a 2025-era server may take one: it decides when it answers
            await rejection.send(send)
            return True
        if local is not None:  # a notification: it never reaches the app
            await send_status(send, 202, b"")
            return True
        if has_local:
            await self._refuse_local_methods_in_batch(plan, send)
            return True
        return False  # a batch the server may take: each call's session is resolved

    async def answer(self, scope: Scope, receive: Receive, send: Send, plan: Plan, body: bytes) -> None:
        """What the middleware answers itself: the server's own refusal first, then ours, or a local result."""
        if (rejection := await self._server_refusal(scope, plan, body, receive)) is not None:
            return await reject(plan, rejection, send)  # what the wrapped server would answer, not ours
        if plan.refused:
            return await self.refuse(plan, send)
        if (local := plan.local) is not None:
            return await self._answer_local(scope, plan, local, send)
        return await answer_refused_handles(plan, self._forwarder.targets(plan), send)

    async def _server_refusal(self, scope: Scope, plan: Plan, body: bytes, receive: Receive) -> Rejection | None:
        """The app's own answer if it refuses a request the middleware would answer itself (``_probe.py``);
        ``receive`` is the client's, its body read: the probe ends when the client leaves."""
        call = plan.calls[0]
        if plan.era is Era.LEGACY and call.method == "initialize":
            return None  # it opens a 2025 transport session: no probe stands for it, so a refused one is not asked
        return await ask_server(
            self._app,
            scope,
            body_of(plan),
            body,
            hidden=self._forwarder.hidden,
            client=receive if self._fronts_upstream else None,
            seconds=self._probe_timeout,
            retry_after=self._retry_after,
        )

    async def _answer_local(self, scope: Scope, plan: Plan, call: Call, send: Send) -> None:
        """Run a local method's answer function and send what it returns."""
        assert call.local is not None
        local = LocalCall(
            scope=scope,
            message=call.message,
            profile=call.profile,
            era=plan.era,
            sessions=self._sessions,
            session=call.session,
            operation=call.operation,
        )
        try:
            result = await call.local.answer(local)
        except Refusal as refusal:
            call.refusal = refusal
            plan.refused = True
            return await self.refuse(plan, send)
        if plan.era is Era.MODERN:
            result["resultType"] = "complete"
        await send_json(send, 200, jsonrpc.result(call.request_id, result), self._retry_after)
        if call.operation is not None:
            call.operation.end()

    async def refuse(self, plan: Plan, send: Send) -> None:
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
            status = http_status(refusal.code, modern=plan.era is Era.MODERN)
            return await send_json(send, status, refusal.frame(call.request_id), retry_after)
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

    async def store_failed(self, plan: Plan, error: Exception, send: Send) -> None:
        """Answer -32010 for a store failure the app let out before it answered (a tool's ``session.data``)."""
        refusal = store_unavailable(error)
        for call in plan.calls:
            if call.method is not None:
                call.refusal = refusal
        await self.refuse(plan, send)

    async def _refuse_local_methods_in_batch(self, plan: Plan, send: Send) -> None:
        """A batch with a session method: -32600 for every element, nothing forwarded."""
        errors = [
            jsonrpc.invalid_request(call.request_id, "session methods are not allowed in a batch")
            for call in plan.calls
            if call.is_request or not isinstance(call.message, dict)
        ]
        await self._send_batch(send, errors, _batch_refused_status(plan.era))

    async def _send_batch(self, send: Send, errors: list[dict[str, object]], status: int) -> None:
        if not errors:
            return await send_status(send, 202, b"")
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


async def answer_refused_handles(plan: Plan, targets: dict[Any, Target], send: Send) -> None:
    """Answer calls a handle refused with their ``isError`` result; the tool never runs.

    In a batch, the other elements are refused as a whole (-32600), as for an invalid session.
    """
    answers = answer_elements(
        [call.message for call in plan.calls],
        {index: call.answer for index, call in enumerate(plan.calls) if call.answer is not None},
        era=plan.era,
        batch=plan.batch,
    )
    for call, answer in zip(plan.calls, answers, strict=True):
        if answer.refusal is not None:
            end_with(call.operation, answer.refusal)
            continue
        if answer.frame is not None and (target := targets.get(hashable_id(call.request_id))) is not None:
            annotate(target, answer.frame)  # the session echo, and the operation learns of the tool error
        if call.operation is not None:
            call.operation.end()
    await send_answers(send, answers, batch=plan.batch, accept=plan.headers.get(b"accept", b""))

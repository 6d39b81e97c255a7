"""MCPSessionMiddleware: the pipeline, and nothing else.

read (bounded) → plan (parse once, classify, wire per message) → resolve (the
session sources) → refuse, answer locally, or forward with the body replayed →
response rewriting. Each step lives in ``_pipeline/`` (``_plan.py`` for planning); see ``docs/architecture.md``.
The lifespan passes through :func:`watch_lifespan`.

References: the data-layer sessions draft (transports-wg PR #20, 2026-03-13
revision) as condensed in the project's wire page, MCP 2026-07-28 Streamable
HTTP, and ASGI 3 (HTTP connection scope).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Unpack

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._asgi import AtEndpoints, Replay, headers_of, read_body, too_large
from ._config import SessionsConfig, SessionsOptions
from ._otel import Telemetry
from ._pipeline import (
    Answers,
    Forwarder,
    Resolver,
    check_handles,
    error_answer,
    record_user,
    start_operations,
)
from ._plan import Planner, json_rpc_headers
from ._session import SessionService
from ._tokens import IdDigests
from ._wire import jsonrpc
from ._wire.protocol import PARSE_ERROR
from .sources import (
    DataLayerSource,
    HostConversationSource,
    SourceContext,
    TransportSource,
    build_chain,
    data_off_explainer,
)
from .stores import SessionStore

logger = logging.getLogger("mcp_sessions")


class MCPSessionMiddleware(AtEndpoints):
    """Data-layer sessions for any Streamable HTTP MCP server.

    Answers the session methods of the enabled wires itself (for the draft,
    ``sessions/create`` and ``sessions/delete``), verifies the session each
    request names, exposes it to the application
    (:func:`mcp_sessions.get_session`), and echoes it in results. Requests
    without a session pass through unchanged unless the policy requires one.

    Pass a :class:`SessionsConfig` as ``config=``, or its options as keywords.
    """

    def __init__(
        self, app: ASGIApp, *, config: SessionsConfig | None = None, **options: Unpack[SessionsOptions]
    ) -> None:
        if config is None:
            config = SessionsConfig(**options)
        elif options:
            raise TypeError(f"pass {', '.join(sorted(options))} in the SessionsConfig, not beside it")
        self.app = app
        self.config = config
        self.keys = config.keys
        self.store = config.store
        self.at_endpoint = not config.placement
        sessions = self._sessions = _service(config)
        digests = IdDigests(config.keys)
        context = SourceContext(
            sessions,
            digests,
            config.host_keys,
            config.conversation_data,
            config.adopt_transport_sessions,
            config.max_conversations_per_caller,
        )
        chain = build_chain(config.sources, context)
        # A session method acts on a data-layer session, whatever the chain holds.
        host = next((s for s in chain if isinstance(s, HostConversationSource)), None)
        explain = None if host is None else data_off_explainer(host)
        self._resolver = Resolver(
            chain, data_layer=DataLayerSource(sessions), requires=config.requires, explain=explain
        )
        self._planner = Planner(config.profiles, strict=config.fronts_upstream)
        self._telemetry = Telemetry(
            tracer_provider=config.tracer_provider,
            meter_provider=config.meter_provider,
            trace_mode=config.trace_mode,
            known_methods={method for profile in config.profiles for method in profile.methods},
            transport_digest=digests.transport,
            trace_user=config.trace_user,
            principal=config.principal,
            user_digest=digests.user,
            conversation_digest=digests.conversation,
        )
        self._forwarder = Forwarder(
            config.profiles,
            capability={p.name: p.capability.value(required=config.require_all) for p in config.profiles},
            transport=next((s for s in chain if isinstance(s, TransportSource)), None),
            sessions=sessions,
            telemetry=self._telemetry,
            at_endpoint=self.at_endpoint,
            hides=config.fronts_upstream,
            max_response_size=config.max_response_size,
        )
        self._answers = Answers(
            app,
            sessions,
            self._forwarder,
            retry_after=config.retry_after,
            probe_timeout=config.probe_timeout,
            fronts_upstream=config.fronts_upstream,
        )
        self._paths = config.paths
        if config.placement:
            # At the endpoint, the work is placed; the store is this outer middleware's, which sees the lifespan.
            inside = config.replace(placement=False, owns_store=False)
            if self.place(lambda inner: MCPSessionMiddleware(inner, config=inside)):
                self._paths = frozenset()  # what reaches this outer middleware is an ordinary route's
        self._max_body = config.max_body_size
        self._handles = config.handles

    @classmethod
    def from_env(
        cls, app: ASGIApp, /, *, environ: Mapping[str, str] | None = None, **options: Unpack[SessionsOptions]
    ) -> MCPSessionMiddleware:
        """The middleware configured by :meth:`SessionsConfig.from_env` (``MCP_SESSIONS_*`` variables)."""
        return cls(app, config=SessionsConfig.from_env(environ=environ, **options))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.passes(scope):
            if scope["type"] == "lifespan":
                send = watch_lifespan(send, self.store, owns_store=self.config.owns_store, flush=self._telemetry.flush)
            return await self.app(scope, receive, send)
        headers = json_rpc_headers(scope, self._paths)
        if headers is None:  # not a JSON POST to the MCP path: the app's, untouched
            return await self._forwarder.pass_through(self.app, scope, receive, send, headers_of(scope))
        traced = self._telemetry.enabled()  # asked once: whether an OpenTelemetry SDK records this request
        start_ns = time.time_ns() if traced else 0
        body = await read_body(receive, headers.get(b"content-length"), self._max_body)
        if type(body) is not bytes:  # gone (the client disconnected: nothing to forward), or too large
            return None if body is None else await too_large(send, self._max_body)
        replay = Replay(body, receive)
        try:
            plan = self._planner.plan(body, headers, start_ns)
        except jsonrpc.Unreadable as unread:  # what the middleware cannot read, it cannot check: never forwarded
            return await error_answer(400, PARSE_ERROR, str(unread), "unreadable").send(send)
        if plan is None:  # not JSON-RPC: the app answers it
            return await self._forwarder.pass_through(self.app, scope, replay, send, headers)
        answers_first = plan.batch or plan.local is not None  # a batch, or a method the middleware answers
        if answers_first and await self._answers.before_sessions(scope, plan, body, receive, send):
            return None
        plan.traced = traced
        await self._resolver.resolve(scope, plan)
        if self._handles is not None:
            await check_handles(self._handles, self._sessions, scope, plan)
        if plan.traced:
            start_operations(self._telemetry, scope, plan, capture=self.config.capture_content)
            if self._telemetry.users is not None:
                await record_user(self._telemetry.users, scope, plan)
        if plan.refused or plan.local is not None or plan.answered:
            return await self._answers.answer(scope, receive, send, plan, body)
        exchange = self._forwarder.prepare(scope, replay, send, plan)
        if exchange is None:  # nothing to add, observe or attach
            return await self.app(scope, replay, send)
        with exchange:
            await self.app(exchange.scope, exchange.receive, exchange.send)
        if exchange.store_failure is not None:  # a tool's session.data write: refused, retryable
            await self._answers.store_failed(plan, exchange.store_failure, send)


def _service(config: SessionsConfig) -> SessionService:
    """The session machinery one middleware shares across its wires, as configured."""
    return SessionService(
        limit=config.create_limit,
        keys=config.keys,
        store=config.store,
        ttl=config.ttl,
        idle_ttl=config.idle_ttl,
        principal=config.principal,
        on_create=config.on_create,
        binds_endpoint=config.binds_endpoint,
        bus=config.subscriptions,
    )


def watch_lifespan(send: Send, store: SessionStore, *, owns_store: bool, flush: Callable[[], None]) -> Send:
    """The lifespan's ``send``: every message passes on untouched, after what it calls for.

    ``flush`` (the telemetry's) runs when the app's shutdown is over, before the server hears of it: uvicorn
    then ends the process by re-raising the SIGTERM it caught, and no exit handler (the OpenTelemetry SDK's
    flush) runs after that. It blocks, so it runs in a thread; it never raises.
    """

    async def lifespan_send(message: Message) -> None:
        if message["type"] == "lifespan.startup.complete":
            await _check(store)
        elif message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
            if owns_store and message["type"] == "lifespan.shutdown.complete":
                try:
                    await store.aclose()
                except Exception:
                    logger.exception("could not close the session store")
            await asyncio.to_thread(flush)
        await send(message)

    return lifespan_send


async def _check(store: SessionStore) -> None:
    """Warn at startup, not at the first request, when the store does not answer (the app still starts)."""
    try:
        async with asyncio.timeout(5):
            await store.ping()
    except Exception as exc:
        logger.warning(
            "the session store does not answer at startup (%s: %s): requests that need it will get -32010 "
            "until it does; store.ping() is the readiness check",
            type(exc).__name__,
            exc,
        )

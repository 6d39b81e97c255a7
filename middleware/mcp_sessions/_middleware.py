"""MCPSessionMiddleware: the pipeline, and nothing else.

read (bounded) → plan (parse once, classify, wire per message) → resolve (the
session sources) → refuse, answer locally, or forward with the body replayed →
response rewriting. Each step lives in ``pipeline/`` (``plan/`` for planning);
see ``docs/architecture.md``.

References: the data-layer sessions draft (transports-wg PR #20, 2026-03-13
revision) as condensed in the project's wire page, MCP 2026-07-28 Streamable
HTTP, and ASGI 3 (HTTP connection scope).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, Unpack

from starlette.types import ASGIApp, Receive, Scope, Send

from ._asgi import Replay, read_body, send_accepted
from ._config import SessionsConfig, SessionsOptions
from ._inside import EndpointPaths, is_transport, place_at_endpoints, route_path
from ._lifespan import watch_lifespan
from ._otel import Telemetry
from ._pipeline import (
    Exchange,
    Forwarder,
    LocalAnswers,
    Refuser,
    Resolver,
    TransportSessions,
    answer_refused_handles,
    body_of,
    check_handles,
    headers_of,
    reject,
    start_operations,
)
from ._plan import Plan, Planner
from ._policy import never
from ._session import HeaderSession, SessionNotFound, SessionService
from ._tokens import IdDigests
from ._verdict import Rejection, ask_server
from ._wire import Refusal
from ._wire.protocol import MCP_SESSION_ID_HEADER, Era
from .sources import (
    DataLayerSource,
    HostConversationSource,
    SourceContext,
    TransportSource,
    build_chain,
    data_off_explainer,
    is_transport_session_id,
)

if TYPE_CHECKING:
    from asgiref.typing import ASGIReceiveCallable, ASGISendCallable


_JSON_CONTENT_TYPE: Final = b"application/json"


class MCPSessionMiddleware:
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
        self._transport = next((s for s in chain if isinstance(s, TransportSource)), None)
        requires = None if config.requires is never else config.requires
        # A session method acts on a data-layer session, whatever the chain holds.
        host = next((s for s in chain if isinstance(s, HostConversationSource)), None)
        explain = None if host is None else data_off_explainer(host)
        self._resolver = Resolver(chain, data_layer=DataLayerSource(sessions), requires=requires, explain=explain)
        self._planner = Planner(config.profiles)
        mapped = TransportSessions() if any(p.header_every_era for p in config.profiles) else None
        capability = {p.name: p.capability.value(required=config.require_all) for p in config.profiles}
        self._forwarder = Forwarder(
            config.profiles,
            capability=capability,
            strips=self._planner.strips,
            transport=self._transport,
            mapped=mapped,
            sessions=sessions,
            hides=config.fronts_upstream,
            max_response_size=config.max_response_size,
        )

        retry_after = str(config.retry_after).encode()
        self._refuser = Refuser(retry_after)
        self._local = LocalAnswers(sessions, self._refuser, retry_after=retry_after, mapped=mapped)
        self._paths = config.paths
        self._inner_paths = self._place(app) if config.placement else None
        self._max_body = config.max_body_size
        self._handles = config.handles
        self._telemetry = Telemetry(
            tracer_provider=config.tracer_provider,
            meter_provider=config.meter_provider,
            trace_mode=config.trace_mode,
            known_methods={method for profile in config.profiles for method in profile.methods},
            transport_digest=digests.transport,
            trace_user=config.trace_user,
            principal=config.principal,
            user_digest=digests.user,
        )

    @classmethod
    def from_env(
        cls, app: ASGIApp, /, *, environ: Mapping[str, str] | None = None, **options: Unpack[SessionsOptions]
    ) -> MCPSessionMiddleware:
        """The middleware configured by :meth:`SessionsConfig.from_env` (``MCP_SESSIONS_*`` variables)."""
        return cls(app, config=SessionsConfig.from_env(environ=environ, **options))

    def _place(self, app: ASGIApp) -> EndpointPaths | None:
        """Put the session work at each MCP endpoint inside ``app`` (see ``_inside.py``); their paths."""
        if is_transport(app):  # wrapped around the transport app itself: already where it should be
            return None
        paths = place_at_endpoints(
            app,
            lambda transport: MCPSessionMiddleware(transport, config=self.config.at_endpoint()),
            placed=lambda found: isinstance(found, MCPSessionMiddleware),
        )
        if paths is not None:
            self._paths = frozenset()  # what reaches this outer middleware is an ordinary route's
        return paths

    @property
    def session_manager(self) -> object:
        """Placed at an MCP endpoint: the transport's session manager (a middleware placed later goes in front)."""
        if self.config.placement:
            raise AttributeError("session_manager")
        return getattr(self.app, "session_manager", None)  # the transport's, or what was placed in front of it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self._inner_paths is not None and route_path(scope) in self._inner_paths):
            if scope["type"] == "lifespan":
                send = watch_lifespan(send, self.store, owns_store=self.config.owns_store, flush=self._telemetry.flush)
            return await self.app(scope, receive, send)
        headers = self._json_rpc_headers(scope)
        if headers is None:  # not a JSON POST to the MCP path: the app's, untouched
            return await self._pass_through(scope, receive, send, headers_of(scope))
        traced = self._telemetry.enabled()  # asked once: whether an OpenTelemetry SDK records this request
        start_ns = time.time_ns() if traced else 0
        typed_receive: ASGIReceiveCallable = receive  # type: ignore[assignment]  # an annotation, not a call
        body = await read_body(typed_receive, headers.get(b"content-length"), self._max_body)
        if type(body) is not bytes:  # gone (the client disconnected: nothing to forward), or too large
            return None if body is None else await self._refuser.too_large(_typed(send), self._max_body)
        replay = Replay(body, receive)
        plan = self._planner.plan(body, headers, start_ns)
        if plan is None:  # not JSON-RPC: the app answers it
            return await self._pass_through(scope, replay, send, headers)
        if (plan.batch or plan.local is not None) and await self._answered_before_sessions(
            scope, plan, body, receive, send
        ):
            return None
        plan.traced = traced
        await self._resolver.resolve(scope, plan)
        if self._handles is not None:
            await check_handles(self._handles, self._sessions, scope, plan)
        if plan.traced:
            await start_operations(self._telemetry, scope, plan, capture=self.config.capture_content)
        if plan.refused or plan.local is not None or plan.answered:
            return await self._answer(scope, receive, send, plan, body)
        exchange = self._forwarder.prepare(scope, replay, send, plan)
        if exchange is None:  # nothing to add, observe or attach
            return await self.app(scope, replay, send)
        with exchange:
            await self.app(exchange.scope, exchange.receive, exchange.send)
        if exchange.store_failure is not None:  # a tool's session.data write: refused, retryable
            await self._refuser.store_failed(plan, exchange.store_failure, _typed(send))

    # -- the steps ------------------------------------------------------------------

    def _json_rpc_headers(self, scope: Scope) -> dict[bytes, bytes] | None:
        """The headers of a POST of JSON to the MCP path, on a wire the server speaks, what the pipeline reads;
        ``None`` for anything else."""
        if scope["method"] != "POST":
            return None
        headers = headers_of(scope)
        if not headers.get(b"content-type", b"").lower().startswith(_JSON_CONTENT_TYPE):  # media types: any case
            return None
        paths = self._paths
        return headers if paths is None or scope["path"] in paths or route_path(scope) in paths else None

    async def _answered_before_sessions(
        self, scope: Scope, plan: Plan, body: bytes, receive: Receive, send: Send
    ) -> bool:
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
        if local is not None:
            await send_accepted(_typed(send))
            return True
        if has_local:
            await self._refuser.refuse_local_methods_in_batch(plan, _typed(send))
            return True
        return False  # a batch the server may take: each call's session is resolved

    async def _answer(self, scope: Scope, receive: Receive, send: Send, plan: Plan, body: bytes) -> None:
        """What the middleware answers itself: the server's own refusal first, then ours, or a local result."""
        if (rejection := await self._server_refusal(scope, plan, body, receive)) is not None:
            return await reject(plan, rejection, send)  # what the wrapped server would answer, not ours
        reply = _typed(send)
        if plan.refused:
            return await self._refuser.refuse(plan, reply)
        if (local := plan.local) is not None:
            return await self._local.answer(scope, plan, local, reply)
        return await answer_refused_handles(plan, self._forwarder.targets(plan), reply)

    async def _server_refusal(self, scope: Scope, plan: Plan, body: bytes, receive: Receive) -> Rejection | None:
        """The app's own answer if it refuses a request the middleware would answer itself (``_verdict.py``);
        ``receive`` is the client's, its body read: the probe ends when the client leaves."""
        if plan.era is Era.LEGACY and plan.calls[0].method == "initialize":
            return None  # it opens a 2025 transport session: no probe stands for it, so a refused one is not asked
        config, forwarder = self.config, self._forwarder
        return await ask_server(
            self.app,
            forwarder.scope_for(scope, plan),
            body_of(plan),
            body,
            hidden=forwarder.hidden,
            client=receive if config.fronts_upstream else None,
            seconds=config.probe_timeout,
            retry_after=str(config.retry_after).encode(),
        )

    async def _pass_through(self, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes]) -> None:
        """Forward a request that is not JSON-RPC untouched, with the session a JWT-shaped ``Mcp-Session-Id``
        names if it is valid (a 2025 transport session id is a bare uuid): the route decides what none means."""
        header_session_id = headers.get(MCP_SESSION_ID_HEADER)
        if header_session_id is None:
            return await self.app(scope, receive, send)
        if self._transport is not None and scope["method"] == "DELETE" and is_transport_session_id(header_session_id):
            send = self._transport.watch_delete(header_session_id, send)
        if header_session_id.count(b".") == 2:
            sessions = self._sessions
            try:  # the MCP endpoint's own GET and DELETE are bound to it; an ordinary route reads any endpoint's
                session = await sessions.resolve(
                    scope,
                    header_session_id.decode("latin-1"),
                    None,
                    endpoint=not self.config.placement,
                    owner_later=True,
                )
            except (SessionNotFound, Refusal):
                pass
            else:
                named = HeaderSession(session, scope, sessions.owns)  # whose it is, asked once the app's auth ran
                with Exchange(scope, receive, send, None, None, [], telemetry=self._telemetry, named=named) as exchange:
                    return await self.app(exchange.scope, exchange.receive, exchange.send)
        await self.app(scope, receive, send)


def _service(config: SessionsConfig) -> SessionService:
    """The session machinery one middleware shares across its wires, as configured."""
    return SessionService(
        limit=config.create_limit,
        keys=config.keys,
        store=config.store,
        ttl=config.ttl,
        idle_ttl=config.idle_ttl,
        principal=config.principal,
        binds_endpoint=config.binds_endpoint,
        bus=config.subscriptions,
    )


def _typed(send: Send) -> ASGISendCallable:
    """``send`` read as asgiref's typed ``send``, for the answers sent here (checked as typed events)."""
    return send  # type: ignore[return-value]

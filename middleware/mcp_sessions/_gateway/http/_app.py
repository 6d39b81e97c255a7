"""The gateway's ASGI app: the session pipeline, unchanged, in front of the streaming proxy to the upstream."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from starlette.datastructures import Headers
from starlette.types import Scope

from ..._config import SessionsConfig
from ..._middleware import MCPSessionMiddleware
from ..._session import RateLimit, authenticated_user
from ..._wire import jsonrpc
from ...sources import HostConversationSource, SourceContext
from .._config import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_FAILURE_COOLDOWN,
    DEFAULT_FIRST_BYTE_TIMEOUT,
    DEFAULT_KEEPALIVE,
    Forwarding,
    GatewayConfig,
)
from .._front import GatewayFront, HostCheck, RoutedPaths, trusted_proxies
from .._operator import OperatorStatus
from ._replicas import Replicas

if TYPE_CHECKING:
    from ..._session import Session
    from ...sources import CallView, RequestView
    from ..auth._exchange import UpstreamToken
    from ..auth._tools import ToolPolicy
    from ..auth._users import GatewayAuth


def gateway_app(
    upstreams: Sequence[str],
    *,
    config: SessionsConfig | None = None,
    allowed_hosts: Collection[str] | None = None,
    allowed_origins: Collection[str] | None = None,
    keepalive: float | None = DEFAULT_KEEPALIVE,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    first_byte_timeout: float = DEFAULT_FIRST_BYTE_TIMEOUT,
    failure_cooldown: float = DEFAULT_FAILURE_COOLDOWN,
    forwarded_allow_ips: str | Collection[str] | None = None,
    auth: GatewayAuth | None = None,
    upstream_token: UpstreamToken | None = None,
    tools: ToolPolicy | None = None,
) -> GatewayFront:
    """Sessions for an MCP server anywhere on the network: the ASGI app ``mcp-sessions gateway`` serves.

    ``upstreams`` are the URLs of the server's MCP endpoint, one per replica (all on the same path,
    which the gateway serves too; every other path is forwarded as well). ``config`` is the session
    configuration (default :meth:`SessionsConfig.from_env`, the ``MCP_SESSIONS_*`` variables); its
    ``principal`` hook, left at the default, becomes the digest of the ``Authorization`` credential
    the upstream accepted, and its create limit counts per client address as well as per principal.
    ``allowed_hosts`` and ``allowed_origins`` are the gateway's own
    DNS-rebinding allow-lists (default: localhost names; empty: no check), as the ``mcp`` SDK's.
    ``forwarded_allow_ips`` are the proxies in front whose ``X-Forwarded-*`` and ``Forwarded`` headers
    the gateway believes and passes on (uvicorn's option: IP addresses and networks, comma-separated in
    a string, ``"*"`` for all; default: none, every client's own are dropped).
    ``keepalive`` is the idle time after which an event stream gets an SSE comment (``None``: never);
    ``connect_timeout`` and ``first_byte_timeout`` bound the connect and the wait for the response's
    headers; a replica that cannot be connected to is out of service for ``failure_cooldown`` seconds.
    ``auth`` authenticates every request at the gateway (``auth._users``): the principal hook then reads its user.
    ``upstream_token`` (``_exchange.UpstreamToken``) is what the upstream gets as ``Authorization``: none, or the
    user's token exchanged for one issued for the upstream (RFC 8693). Default: with ``auth``, none (the user's
    token was issued for the gateway: MCP's security best practices forbid passing it on); without, the
    client's as it came (the upstream is the resource server that checks it). ``tools`` (``_tools.ToolPolicy``,
    with ``auth``'s tokens): which tools each caller lists and calls, by a claim of her token.
    Serve it with lifespan on: it closes the pooled connections at shutdown.
    """
    forwarding = Forwarding(
        tuple(upstreams), keepalive, connect_timeout, first_byte_timeout, failure_cooldown, upstream_token
    )
    return forwarding_app(
        GatewayConfig(
            serves=forwarding,
            sessions=SessionsConfig.from_env() if config is None else config,
            allowed_hosts=allowed_hosts,
            allowed_origins=allowed_origins,
            forwarded_allow_ips=forwarded_allow_ips,
            auth=auth,
            tools=tools,
        )
    )


def forwarding_app(config: GatewayConfig) -> GatewayFront:
    """:func:`gateway_app`, from the gateway's configuration whole (``config.serves`` an upstream's): what
    ``mcp-sessions gateway --upstream`` serves."""
    forwarding = config.serves
    if not isinstance(forwarding, Forwarding):
        raise TypeError("forwarding_app serves an upstream's replicas: config.serves is a Forwarding")
    # httpx: the gateway's extra, imported when a gateway is built.
    from ..auth._exchange import UpstreamToken
    from ..auth._tools import guarded
    from ._proxy import UpstreamProxy

    sessions = config.sessions
    auth = config.auth
    upstream_token = forwarding.upstream_token
    if upstream_token is None:
        upstream_token = UpstreamToken("passthrough" if auth is None else "none")
    replicas = Replicas(forwarding.upstreams, keys=sessions.keys, cooldown=forwarding.failure_cooldown)
    served = forwarding.path or replicas.path
    proxy = UpstreamProxy(
        replicas,
        served=served,
        host_check=HostCheck(config.allowed_hosts, config.allowed_origins),
        keepalive=forwarding.keepalive,
        connect_timeout=forwarding.connect_timeout,
        first_byte_timeout=forwarding.first_byte_timeout,
        retry_after=sessions.retry_after,
        upstream_token=upstream_token,
    )
    app = MCPSessionMiddleware(proxy, config=_at_gateway(sessions, served, auth))
    trusted = trusted_proxies(config.forwarded_allow_ips)
    signing_in = upstream_token.signing_in
    if signing_in is not None:
        # each user's own grants behind the authentication; the sign-in's pages, for a browser with no bearer, before;
        # every user's on the operator's status listener, if it has one
        front = signing_in.wrap(guarded(signing_in.serving_grants(app), auth, config.tools, sessions))
        status = (config.listening.status_port, config.listening.status_socket)
        front = OperatorStatus(front, None, *status, signing_in=signing_in)
    else:
        front = guarded(app, auth, config.tools, sessions)
    return GatewayFront(front, trusted=trusted)


def _at_gateway(config: SessionsConfig, served: str, auth: GatewayAuth | None) -> SessionsConfig:
    """The session configuration in front of the replicas, whose endpoint is served at ``served``: ``config``, as a
    proxy needs it."""
    principal = config.principal
    limit = config.create_limit
    # Nothing signs a user in in front of the proxy.
    if auth is None and principal is authenticated_user:
        principal = credential_principal
    return config.replace(
        # The proxy is the transport: no endpoint to look for inside it.
        placement=False,
        # No session member reaches the upstream; a probe ends with its client.
        fronts_upstream=True,
        sources=(*config.sources, RoutedConversations),
        principal=principal,
        # A made-up credential is a principal the upstream may accept: the create limit counts addresses.
        create_limit=None if limit is None else RateLimit(limit.count, limit.seconds, per_address=True),
        # As upstreams route them.
        paths=RoutedPaths((served,) if config.paths is None else config.paths),
    )


def credential_principal(scope: Scope) -> str | None:
    """The gateway's default principal hook: the ``Authorization`` credential (its scheme, any case, and value).

    The upstream checks it on every request (the gateway answers nothing the upstream has not
    accepted: the middleware asks the app it wraps, the proxy), and only its keyed digest is kept,
    in the session's token.
    """
    value = Headers(scope=scope).get("authorization")
    if value is None:
        return None
    scheme, _, credential = value.strip().partition(" ")
    return f"{scheme.lower()} {credential.strip()}"


class RoutedConversations:
    """The gateway's last session source: names a host's conversation for a call no other source named.

    In a server's own process a host's conversation id matters only to telemetry and to conversation
    data, so without either the host source does not look for it. In front of replicas it also says
    where the conversation's requests go and what the upstream sees in baggage. Never data.
    """

    name = "gateway"

    def __init__(self, context: SourceContext) -> None:
        # Its find(), by the configured host keys.
        self._host = HostConversationSource.from_context(context)

    async def session_for(self, scope: Scope, call: CallView, request: RequestView) -> Session | None:
        """Name the call's host conversation (``call.conversation``) if nothing has; never a session."""
        if call.conversation is None:
            params = call.message.get("params")
            call.conversation = self._host.find(request.headers, jsonrpc.meta(params))
        return None

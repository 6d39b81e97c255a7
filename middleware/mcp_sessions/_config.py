"""SessionsConfig: every option of the middleware, validated once, eagerly.

Build it at startup (``SessionsConfig.from_env()`` raises at once when the
secret is missing) and hand it to the middleware, so that a misconfigured
server never starts answering.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypedDict, Unpack, cast

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from ._asgi import DEFAULT_MAX_BODY_SIZE
from ._env import settings_from_env
from ._otel import TraceMode, TraceUserMode
from ._pipeline import DEFAULT_MAX_RESPONSE_SIZE
from ._policy import RequirePolicy, Requires, compile_policy
from ._session import PrincipalHook, RateLimit, authenticated_user
from ._tokens import DEFAULT_AUDIENCE, DEFAULT_MAX_STATE_SIZE, KeySet, SessionKey
from ._verdict import DEFAULT_PROBE_TIMEOUT
from .profiles import ErrorCodes, WireProfile, profiles_from_names, with_error_codes
from .sources import (
    BUILT_IN_HOSTS,
    CONVERSATION_DATA_MODES,
    DEFAULT_MAX_CONVERSATIONS_PER_CALLER,
    DEFAULT_SOURCES,
    ConversationData,
    HostKey,
    SessionSource,
    SourceFactory,
    check_chain,
    host_keys_from_config,
)
from .stores import MemoryStore, SessionStore

if TYPE_CHECKING:
    from .handles import Handles
    from .subscriptions import SessionSubscriptionBus


DEFAULT_TTL: Final = 24 * 3600
MAX_TTL: Final = 10 * 365 * 24 * 3600


class SessionsOptions(TypedDict, total=False):
    """The options of :class:`SessionsConfig`, as keywords (for type checkers)."""

    secret: str | bytes | None
    keys: KeySet | None
    ttl: float
    idle_ttl: float | None
    issuer: str | None
    audience: str | None
    store: SessionStore | None
    require_session: RequirePolicy
    require_session_tools: Collection[str]
    path: str | Collection[str] | None
    max_body_size: int
    max_response_size: int
    probe_timeout: float
    max_state_size: int | None
    retry_after: int
    tracer_provider: TracerProvider | None
    meter_provider: MeterProvider | None
    trace_mode: TraceMode
    principal: PrincipalHook | None
    profiles: str | Iterable[str | WireProfile]
    conversation_data: ConversationData
    conversation_keys: str | Iterable[str]
    adopt_transport_sessions: bool
    handles: Handles | None
    create_limit: tuple[int, float] | None
    sources: Iterable[SessionSource | SourceFactory] | None
    max_conversations_per_caller: int | None
    capture_content: bool
    trace_user: TraceUserMode | None
    error_codes: ErrorCodes
    subscriptions: SessionSubscriptionBus | None


class SessionsConfig:
    """The middleware's options, checked and compiled once.

    Exactly one of ``secret`` (HS256, at least 32 bytes) and ``keys`` (a
    :class:`~mcp_sessions.KeySet`) is required. See ``docs/configuration.md``
    for every option.
    """

    fronts_upstream = False
    """The gateway's (``_gateway/_app.py``): the app is an upstream across the network, which never sees a
    wire's session member, and whose probe a client that disconnects ends (it holds a connection there)."""

    def __init__(
        self,
        *,
        secret: str | bytes | None = None,
        keys: KeySet | None = None,
        ttl: float = DEFAULT_TTL,
        idle_ttl: float | None = None,
        issuer: str | None = None,
        audience: str | None = None,
        store: SessionStore | None = None,
        require_session: RequirePolicy = False,
        require_session_tools: Collection[str] = (),
        path: str | Collection[str] | None = None,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE,
        probe_timeout: float = DEFAULT_PROBE_TIMEOUT,
        max_state_size: int | None = None,
        retry_after: int = 1,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        trace_mode: TraceMode = "link",
        principal: PrincipalHook | None = authenticated_user,
        profiles: str | Iterable[str | WireProfile] = ("draft",),
        conversation_data: ConversationData = "off",
        conversation_keys: str | Iterable[str] = (),
        adopt_transport_sessions: bool = False,
        handles: Handles | None = None,
        create_limit: tuple[int, float] | None = None,
        sources: Iterable[SessionSource | SourceFactory] | None = None,
        max_conversations_per_caller: int | None = DEFAULT_MAX_CONVERSATIONS_PER_CALLER,
        capture_content: bool = False,
        trace_user: TraceUserMode | None = None,
        error_codes: ErrorCodes = "seeds",
        subscriptions: SessionSubscriptionBus | None = None,
    ) -> None:
        self.keys = _key_set(secret, keys, issuer=issuer, audience=audience, max_state_size=max_state_size)
        self.ttl, self.idle_ttl = _check_limits(ttl, idle_ttl, max_body_size, retry_after)
        _check_choices(trace_mode, conversation_data, adopt_transport_sessions, capture_content, trace_user)
        self.subscriptions = _check_bus(subscriptions)  # listen streams of a session: subscriptions/_bus.py
        self.store: SessionStore = MemoryStore() if store is None else store
        self.owns_store = False  # a store passed in is the caller's to close; one from_env builds, the lifespan's
        self.paths = frozenset([path] if isinstance(path, str) else path) if path is not None else None
        self.max_body_size, self.retry_after = max_body_size, retry_after
        self.max_response_size, self.probe_timeout = _check_bounds(max_response_size, probe_timeout)  # _verdict.py
        self.tracer_provider, self.meter_provider = tracer_provider, meter_provider
        self.trace_mode: TraceMode = trace_mode
        self.principal = principal
        self.profiles = with_error_codes(profiles_from_names(profiles), error_codes)  # see profiles/_codes.py
        exempt = frozenset().union(*(p.sessionless for p in self.profiles))
        self.requires: Requires = compile_policy(require_session, require_session_tools, exempt)
        self.require_all = require_session is True
        self.conversation_data: ConversationData = conversation_data
        self.host_keys: tuple[HostKey, ...] = (*host_keys_from_config(conversation_keys), *BUILT_IN_HOSTS)
        self.adopt_transport_sessions, self.handles = adopt_transport_sessions, handles
        self.binds_endpoint = self.keys.audience == DEFAULT_AUDIENCE  # unless the deployment names an audience
        self.placement = True  # look for the MCP endpoints inside the app (not again once placed there)
        self.create_limit = None if create_limit is None else RateLimit(*create_limit)  # per caller: _limits.py
        self.sources = DEFAULT_SOURCES if sources is None else check_chain(sources)  # see sources/_chain.py
        self.max_conversations_per_caller = _per_caller(max_conversations_per_caller, "max_conversations_per_caller")
        self.capture_content, self.trace_user = capture_content, trace_user  # spans: otel/_content.py, _viewers.py

    def at_endpoint(self) -> SessionsConfig:
        """This configuration for the session work placed at an MCP endpoint, in front of its transport app."""
        config = copy.copy(self)
        config.placement = False
        config.owns_store = False  # the outer middleware sees the lifespan and closes the store
        return config

    @classmethod
    def from_env(
        cls, *, environ: Mapping[str, str] | None = None, **options: Unpack[SessionsOptions]
    ) -> SessionsConfig:
        """Configure from ``MCP_SESSIONS_*`` variables; keyword options override them.

        ``MCP_SESSIONS_SECRET`` or ``MCP_SESSIONS_KEYS`` (a JWKS, ``kid:secret``
        pairs or ``@/path``; :meth:`KeySet.from_config`, with
        ``MCP_SESSIONS_SIGNER`` naming the signing kid) is required, not both.
        ``MCP_SESSIONS_DEV=1`` instead generates a random secret and warns:
        sessions then die with the process and no other replica accepts them.
        ``MCP_SESSIONS_REDIS_URL`` selects a :class:`~mcp_sessions.stores.RedisStore`
        (the ``redis`` extra), with ``MCP_SESSIONS_REDIS_PREFIX`` and
        ``MCP_SESSIONS_REDIS_TIMEOUT``. ``MCP_SESSIONS_PROFILES`` lists the
        session wires to speak (default ``draft``).
        ``MCP_SESSIONS_CONVERSATION_DATA`` (``off``, ``principal``, ``anonymous``),
        ``MCP_SESSIONS_CONVERSATION_KEYS`` (``meta:KEY,header:NAME``) and
        ``MCP_SESSIONS_ADOPT_TRANSPORT`` (``1``), ``MCP_SESSIONS_CAPTURE_CONTENT`` (``1``),
        ``MCP_SESSIONS_TRACE_USER`` (``digest``, ``name``) and
        ``MCP_SESSIONS_ERROR_CODES`` (``seeds``, ``spec-safe``) set the options of the same names.
        """
        env = os.environ if environ is None else environ
        # The keywords, as the dict they are at runtime (settings_from_env moves the key-set options out of it).
        settings = settings_from_env(env, cast("dict[str, Any]", options))
        settings.update(options)
        config = cls(**settings)
        config.owns_store = "store" in settings and "store" not in options
        return config


def _check_limits(
    ttl: float, idle_ttl: float | None, max_body_size: int, retry_after: int
) -> tuple[float, float | None]:
    """Refuse lifetimes and limits no server could run with; the lifetimes, as numbers of seconds."""
    if not 0 < ttl <= MAX_TTL:
        raise ValueError(f"ttl must be a positive number of seconds, at most {MAX_TTL} (ten years)")
    if idle_ttl is not None and not 0 < idle_ttl <= MAX_TTL:
        raise ValueError(f"idle_ttl must be a positive number of seconds (at most {MAX_TTL}), or None to disable it")
    if max_body_size < 1:
        raise ValueError("max_body_size must be positive")
    if type(retry_after) is not int or retry_after < 0:
        raise ValueError("retry_after must be a whole number of seconds, 0 or more")
    return float(ttl), None if idle_ttl is None else float(idle_ttl)


def _check_bounds(max_response_size: int, probe_timeout: float) -> tuple[int, float]:
    """Refuse a response bound that is not a whole number of bytes, or a probe deadline that is not positive."""
    if type(max_response_size) is not int or max_response_size < 1:
        raise ValueError(f"max_response_size must be a whole number of bytes, 1 or more; got {max_response_size!r}")
    if not (isinstance(probe_timeout, int | float) and probe_timeout > 0):
        raise ValueError(f"probe_timeout must be a positive number of seconds, got {probe_timeout!r}")
    return max_response_size, float(probe_timeout)


def _check_bus(bus: SessionSubscriptionBus | None) -> SessionSubscriptionBus | None:
    """A bus, or ``None``: checked by what the middleware calls, so that ``import mcp_sessions`` needs no SDK."""
    if bus is not None and not all(callable(getattr(bus, name, None)) for name in ("publish_to_session", "watch")):
        raise TypeError(
            "subscriptions takes a mcp_sessions.subscriptions.SessionSubscriptionBus, the one given to "
            "MCPServer(subscriptions=...)"
        )
    return bus


def _check_choices(
    trace_mode: str,
    conversation_data: str,
    adopt_transport_sessions: bool,
    capture_content: bool,
    trace_user: str | None,
) -> None:
    """Refuse a mode outside its choices, and an option of the wrong kind (a typo type checkers may not see)."""
    if trace_mode not in ("link", "session"):
        raise ValueError('trace_mode must be "link" or "session"')
    if conversation_data not in CONVERSATION_DATA_MODES:
        raise ValueError(
            f"conversation_data must be one of {', '.join(CONVERSATION_DATA_MODES)}, got {conversation_data!r}"
        )
    for name, flag in (("adopt_transport_sessions", adopt_transport_sessions), ("capture_content", capture_content)):
        if type(flag) is not bool:
            raise TypeError(f"{name} is True or False")
    if trace_user not in (None, "digest", "name"):
        raise ValueError(f'trace_user must be "digest", "name" or None, got {trace_user!r}')


def _per_caller(value: int | None, name: str) -> int | None:
    """A per-caller maximum: a whole number, 1 or more, or ``None`` for none."""
    if value is not None and (type(value) is not int or value < 1):
        raise ValueError(f"{name} must be a whole number, 1 or more, or None for no maximum; got {value!r}")
    return value


def _key_set(
    secret: str | bytes | None,
    keys: KeySet | None,
    *,
    issuer: str | None,
    audience: str | None,
    max_state_size: int | None,
) -> KeySet:
    if (secret is None) == (keys is None):
        raise ValueError(
            "mcp-sessions needs exactly one of secret= (HS256, at least 32 bytes) or keys= (a KeySet); "
            "SessionsConfig.from_env reads MCP_SESSIONS_SECRET"
        )
    if keys is None:
        assert secret is not None
        keys = KeySet(
            [SessionKey.from_secret(secret)],
            issuer=issuer or "mcp-sessions",
            audience=audience or DEFAULT_AUDIENCE,
            max_state_size=DEFAULT_MAX_STATE_SIZE if max_state_size is None else max_state_size,
        )
    elif issuer is not None or audience is not None or max_state_size is not None:
        raise ValueError("with keys=, set issuer, audience and max_state_size on the KeySet")
    if keys.signer is None:
        raise ValueError(
            "the KeySet is verify-only: the middleware mints sessions and signs state, "
            "so add a secret or a private key that can sign"
        )
    return keys

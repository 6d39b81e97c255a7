"""SessionsConfig: every option of the middleware, validated once, eagerly.

Build it at startup (``SessionsConfig.from_env()`` raises at once when the
secret is missing) and hand it to the middleware, so that a misconfigured
server never starts answering.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypedDict

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from ._guard import Guard
from ._keys import SessionKey
from ._limits import RateLimit, parse_limit
from ._policy import RequirePolicy, Requires, compile_policy
from ._principal import PrincipalHook, authenticated_user
from ._telemetry import TraceMode
from ._tokens import DEFAULT_MAX_STATE_SIZE, KeySet
from .profiles import WireProfile, profiles_from_names
from .sources.host import BUILT_IN_HOSTS, CONVERSATION_DATA_MODES, ConversationData, HostKey, host_keys_from_config
from .stores import MemoryStore, SessionStore, store_from_url

if TYPE_CHECKING:
    from .handles import Handles

__all__ = ["DEFAULT_MAX_BODY_SIZE", "DEFAULT_TTL", "SessionsConfig", "SessionsOptions"]

logger = logging.getLogger("mcp_sessions")

DEFAULT_TTL: Final = 24 * 3600
MAX_TTL: Final = 10 * 365 * 24 * 3600
DEFAULT_MAX_BODY_SIZE: Final = 4 * 1024 * 1024


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
    guard: Guard | None
    create_limit: tuple[int, float] | None


class SessionsConfig:
    """The middleware's options, checked and compiled once.

    Exactly one of ``secret`` (HS256, at least 32 bytes) and ``keys`` (a
    :class:`~mcp_sessions.KeySet`) is required. See ``docs/configuration.md``
    for every option.
    """

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
        guard: Guard | None = None,
        create_limit: tuple[int, float] | None = None,
    ) -> None:
        self.keys = _key_set(secret, keys, issuer=issuer, audience=audience, max_state_size=max_state_size)
        if not 0 < ttl <= MAX_TTL:
            raise ValueError(f"ttl must be a positive number of seconds, at most {MAX_TTL} (ten years)")
        if idle_ttl is not None and not 0 < idle_ttl <= MAX_TTL:
            raise ValueError(
                f"idle_ttl must be a positive number of seconds (at most {MAX_TTL}), or None to disable it"
            )
        if max_body_size < 1:
            raise ValueError("max_body_size must be positive")
        if type(retry_after) is not int or retry_after < 0:
            raise ValueError("retry_after must be a whole number of seconds, 0 or more")
        if trace_mode not in ("link", "session"):
            raise ValueError('trace_mode must be "link" or "session"')
        self.ttl = float(ttl)
        self.idle_ttl = None if idle_ttl is None else float(idle_ttl)
        self.store: SessionStore = MemoryStore() if store is None else store
        # A store passed in belongs to the caller, who closes it; one that from_env builds
        # from the environment is closed when the app's lifespan shuts down.
        self.owns_store = False
        self.paths = frozenset([path] if isinstance(path, str) else path) if path is not None else None
        self.max_body_size = max_body_size
        self.retry_after = retry_after
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.trace_mode: TraceMode = trace_mode
        self.principal = principal
        self.profiles = profiles_from_names(profiles)
        exempt = frozenset().union(*(p.sessionless for p in self.profiles))
        self.requires: Requires = compile_policy(require_session, require_session_tools, exempt)
        self.require_all = require_session is True
        if conversation_data not in CONVERSATION_DATA_MODES:
            raise ValueError(
                f"conversation_data must be one of {', '.join(CONVERSATION_DATA_MODES)}, got {conversation_data!r}"
            )
        self.conversation_data: ConversationData = conversation_data
        self.host_keys: tuple[HostKey, ...] = (*host_keys_from_config(conversation_keys), *BUILT_IN_HOSTS)
        if type(adopt_transport_sessions) is not bool:
            raise TypeError("adopt_transport_sessions is True or False")
        self.adopt_transport_sessions = adopt_transport_sessions
        self.handles = handles
        if guard is not None and not isinstance(guard, Guard):
            raise TypeError("guard takes a mcp_sessions.Guard, built with the options of the wrapped server")
        # The wrapped server's own checks, applied before any answer given here (the SDK's defaults unless told).
        self.guard = Guard() if guard is None else guard
        # At most count creates (and deletes) per seconds, per principal or client address: see _limits.py.
        self.create_limit = None if create_limit is None else RateLimit(*create_limit)

    @classmethod
    def from_env(cls, *, environ: Mapping[str, str] | None = None, **options: Any) -> SessionsConfig:
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
        ``MCP_SESSIONS_ADOPT_TRANSPORT`` (``1``) set the options of the same names.
        """
        env = os.environ if environ is None else environ
        settings: dict[str, Any] = {}
        if "keys" not in options and "secret" not in options:
            settings.update(_keys_from_env(env, options))
        if (ttl := _seconds(env, "MCP_SESSIONS_TTL")) is not None:
            settings["ttl"] = ttl
        if (idle_ttl := _seconds(env, "MCP_SESSIONS_IDLE_TTL")) is not None:
            settings["idle_ttl"] = idle_ttl
        if "keys" not in options and "keys" not in settings:  # a KeySet carries its own issuer and audience
            for name, key in (("MCP_SESSIONS_ISSUER", "issuer"), ("MCP_SESSIONS_AUDIENCE", "audience")):
                if value := env.get(name, "").strip():
                    settings[key] = value
        if "profiles" not in options and (profiles := env.get("MCP_SESSIONS_PROFILES", "").strip()):
            try:
                settings["profiles"] = profiles_from_names(profiles)
            except ValueError as exc:
                raise ValueError(f"MCP_SESSIONS_PROFILES: {exc}") from None
        if "create_limit" not in options and (limit := env.get("MCP_SESSIONS_CREATE_LIMIT", "").strip()):
            parsed = parse_limit(limit, source="MCP_SESSIONS_CREATE_LIMIT")
            settings["create_limit"] = (parsed.count, parsed.seconds)
        if "guard" not in options and (guard := _guard_from_env(env)) is not None:
            settings["guard"] = guard
        mode = env.get("MCP_SESSIONS_CONVERSATION_DATA", "").strip().lower()
        if mode and "conversation_data" not in options:
            if mode not in CONVERSATION_DATA_MODES:
                raise ValueError(
                    f"MCP_SESSIONS_CONVERSATION_DATA must be one of {', '.join(CONVERSATION_DATA_MODES)}, got {mode!r}"
                )
            settings["conversation_data"] = mode
        if (keys := env.get("MCP_SESSIONS_CONVERSATION_KEYS", "").strip()) and "conversation_keys" not in options:
            host_keys_from_config(keys, source="MCP_SESSIONS_CONVERSATION_KEYS")  # the error names the variable
            settings["conversation_keys"] = keys
        if (adopt := _flag(env, "MCP_SESSIONS_ADOPT_TRANSPORT")) is not None:
            settings["adopt_transport_sessions"] = adopt
        if "store" not in options and (store := _store_from_env(env)) is not None:
            settings["store"] = store
        settings.update(options)
        config = cls(**settings)
        config.owns_store = "store" in settings and "store" not in options
        return config


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
            audience=audience or "mcp-sessions",
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


def _seconds(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {raw!r}")
    return value


def _flag(env: Mapping[str, str], name: str) -> bool | None:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return None
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be 1 or 0 (true/false, yes/no, on/off), got {raw!r}")


def _keys_from_env(env: Mapping[str, str], options: dict[str, Any]) -> dict[str, Any]:
    key_config = env.get("MCP_SESSIONS_KEYS", "").strip()
    signer = env.get("MCP_SESSIONS_SIGNER", "").strip() or None
    if key_config or signer:
        if not key_config:
            raise ValueError("MCP_SESSIONS_SIGNER names a key of MCP_SESSIONS_KEYS, which is not set")
        if env.get("MCP_SESSIONS_SECRET", ""):
            raise ValueError(
                "MCP_SESSIONS_SECRET and MCP_SESSIONS_KEYS are both set: set only one "
                "(to rotate away from a secret, list it in MCP_SESSIONS_KEYS as ':<secret>')"
            )
        # A KeySet carries issuer, audience and the state limit: options and variables go there.
        key_options = {
            name: value for name in ("issuer", "audience", "max_state_size") if (value := options.pop(name, None))
        }
        for name, key in (("MCP_SESSIONS_ISSUER", "issuer"), ("MCP_SESSIONS_AUDIENCE", "audience")):
            if key not in key_options and (value := env.get(name, "").strip()):
                key_options[key] = value
        return {"keys": KeySet.from_config(key_config, signer=signer, source="MCP_SESSIONS_KEYS", **key_options)}
    secret = env.get("MCP_SESSIONS_SECRET", "")
    if not secret:
        if env.get("MCP_SESSIONS_DEV", "").strip().lower() not in ("1", "true", "yes"):
            raise RuntimeError(
                "MCP_SESSIONS_SECRET is not set: set it to a random string of at least 32 bytes "
                "(python -c 'import secrets; print(secrets.token_urlsafe(32))'), shared by every replica; "
                "or set MCP_SESSIONS_DEV=1 to use a throwaway key for local development"
            )
        secret = secrets.token_urlsafe(32)
        logger.warning("MCP_SESSIONS_DEV is set: signing sessions with a random key; they end with this process")
    return {"secret": secret}


def _guard_from_env(env: Mapping[str, str]) -> Guard | None:
    """``MCP_SESSIONS_ALLOWED_HOSTS`` and ``_ORIGINS``: the wrapped server's DNS-rebinding allow-lists."""
    hosts = [h.strip() for h in env.get("MCP_SESSIONS_ALLOWED_HOSTS", "").split(",") if h.strip()]
    origins = [o.strip() for o in env.get("MCP_SESSIONS_ALLOWED_ORIGINS", "").split(",") if o.strip()]
    if not hosts and not origins:
        return None
    return Guard(allowed_hosts=hosts, allowed_origins=origins)


def _store_from_env(env: Mapping[str, str]) -> SessionStore | None:
    """``MCP_SESSIONS_STORE`` (a store URL), or ``MCP_SESSIONS_REDIS_URL`` as the shortcut it has always been."""
    store_url = env.get("MCP_SESSIONS_STORE", "").strip()
    redis_url = env.get("MCP_SESSIONS_REDIS_URL", "").strip()
    if store_url and redis_url:
        raise ValueError("MCP_SESSIONS_STORE and MCP_SESSIONS_REDIS_URL are both set: set only one")
    variable, url = ("MCP_SESSIONS_STORE", store_url) if store_url else ("MCP_SESSIONS_REDIS_URL", redis_url)
    if not url:
        return None
    options: dict[str, Any] = {}
    is_redis = url.partition("://")[0].lower() in ("redis", "rediss", "unix")
    for name, key in (("MCP_SESSIONS_REDIS_PREFIX", "prefix"), ("MCP_SESSIONS_REDIS_TIMEOUT", "timeout")):
        if not env.get(name, "").strip():
            continue
        if not is_redis:
            raise ValueError(f"{name} is set but {variable} names no Redis store")
        options[key] = env[name].strip() if key == "prefix" else _seconds(env, name)
    try:
        return store_from_url(url, **options)
    except ImportError:
        raise RuntimeError(
            f"{variable} names a Redis store but the redis package is not installed: "
            "pip install 'redis>=5.2' (the redis extra of mcp-sessions)"
        ) from None
    except ValueError as exc:
        raise ValueError(f"{variable}: {exc}") from None

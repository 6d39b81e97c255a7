"""SessionsConfig: every option of the middleware, validated once, eagerly; the environment's variables; and
the ``require_session`` options, compiled once into a predicate.

Build it at startup (``SessionsConfig.from_env()`` raises at once when the
secret is missing) and hand it to the middleware, so that a misconfigured
server never starts answering.
"""

from __future__ import annotations

import copy
import logging
import os
import secrets
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, TypedDict, Unpack, cast

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from ._asgi import DEFAULT_MAX_BODY_SIZE
from ._otel import TraceMode, TraceUserMode
from ._pipeline import DEFAULT_MAX_RESPONSE_SIZE, DEFAULT_PROBE_TIMEOUT
from ._session import CreateHook, PrincipalHook, RateLimit, authenticated_user
from ._tokens import DEFAULT_AUDIENCE, DEFAULT_MAX_STATE_SIZE, KeySet, SessionKey
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
from .stores import REDIS_SCHEMES, MemoryStore, SessionStore, store_from_url

if TYPE_CHECKING:
    from .handles import Handles
    from .subscriptions import SessionSubscriptionBus


DEFAULT_TTL: Final = 24 * 3600
MAX_TTL: Final = 10 * 365 * 24 * 3600
LIFETIME: Final = f"must be a positive number of seconds, at most {MAX_TTL} (ten years)"

logger = logging.getLogger("mcp_sessions")

RequirePolicy = bool | Collection[str] | Callable[[str, Any], bool]
Requires = Callable[[str, Any], bool]


def compile_policy(require_session: RequirePolicy, require_tools: Collection[str], exempt: Collection[str]) -> Requires:
    """``requires(method, params)``: whether a request must carry a session.

    ``require_session`` is ``True`` (every request), a collection of method
    names, or a callable ``(method, params) -> bool``; ``require_tools`` names
    tools whose ``tools/call`` requires one. ``exempt`` methods and
    notifications never do, whatever the policy says.
    """
    if isinstance(require_session, str):
        raise TypeError("require_session takes a collection of method names, not one string")
    if isinstance(require_tools, str):
        raise TypeError("require_session_tools takes a collection of tool names, not one string")
    require_all = require_session is True
    methods: frozenset[str] = frozenset()
    predicate: Requires | None = None
    if callable(require_session):
        predicate = require_session
    elif not isinstance(require_session, bool):
        methods = frozenset(require_session)
    tools = frozenset(require_tools)
    exempt = frozenset(exempt)

    def requires(method: str, params: Any) -> bool:
        if method in exempt or method.startswith("notifications/"):
            return False
        if require_all or method in methods:
            return True
        if tools and method == "tools/call" and isinstance(params, dict) and params.get("name") in tools:
            return True
        return predicate is not None and bool(predicate(method, params))

    return requires


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
    on_create: CreateHook | None
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
    """The gateway's (``_gateway/http/_app.py``): the app is an upstream across the network, which never sees a
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
        on_create: CreateHook | None = None,
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
        self.ttl, self.idle_ttl = _check_lifetimes(ttl, idle_ttl)
        _check_bounds(max_body_size, retry_after, max_response_size, probe_timeout, max_conversations_per_caller)
        _check_choices(trace_mode, conversation_data, adopt_transport_sessions, capture_content, trace_user)
        self.subscriptions = _check_bus(subscriptions)  # listen streams of a session: subscriptions/_bus.py
        self.store: SessionStore = MemoryStore() if store is None else store
        self.owns_store = False  # a store passed in is the caller's to close; one from_env builds, the lifespan's
        self.paths = frozenset([path] if isinstance(path, str) else path) if path is not None else None
        self.max_body_size, self.retry_after = max_body_size, retry_after
        self.max_response_size, self.probe_timeout = max_response_size, float(probe_timeout)  # _pipeline/_probe.py
        self.tracer_provider, self.meter_provider = tracer_provider, meter_provider
        self.trace_mode: TraceMode = trace_mode
        self.principal = principal
        self.on_create = on_create  # awaited as a session is minted, may refuse it: _session/_service.py
        with _naming("profiles"):
            wires = profiles_from_names(profiles)
        with _naming("error_codes"):
            self.profiles = with_error_codes(wires, error_codes)  # see profiles/_codes.py
        exempt = frozenset().union(*(p.sessionless for p in self.profiles))
        self.requires: Requires = compile_policy(require_session, require_session_tools, exempt)
        self.require_all = require_session is True
        self.conversation_data: ConversationData = conversation_data
        with _naming("conversation_keys"):
            self.host_keys: tuple[HostKey, ...] = (*host_keys_from_config(conversation_keys), *BUILT_IN_HOSTS)
        self.adopt_transport_sessions, self.handles = adopt_transport_sessions, handles
        self.binds_endpoint = self.keys.audience == DEFAULT_AUDIENCE  # unless the deployment names an audience
        self.placement = True  # look for the MCP endpoints inside the app (not again once placed there)
        self.create_limit = None if create_limit is None else RateLimit(*_check_rate(create_limit))  # _session
        self.sources = DEFAULT_SOURCES if sources is None else check_chain(sources)  # see sources/_base.py
        self.max_conversations_per_caller = max_conversations_per_caller
        self.capture_content, self.trace_user = capture_content, trace_user  # spans: _otel/_span.py
        self._built = True  # frozen from here: replace makes a changed copy

    def __setattr__(self, name: str, value: object) -> None:
        if "_built" in vars(self):
            raise AttributeError(f"SessionsConfig is frozen: config.replace({name}=...) makes a new one")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"SessionsConfig is frozen: {name} stays")

    def replace(self, **changes: Any) -> SessionsConfig:
        """A new configuration with ``changes`` to this one's attributes (what a layer of the middleware or the
        gateway needs: the work at an endpoint, the sessions in front of a proxy), this one left as it is.

        ``changes`` name the built attributes (``paths``, ``create_limit``, ``store``, ...), not the constructor's
        options, and the rest are shared, not built again: the copy uses this one's store, key set, rate limit,
        sources and compiled ``requires`` (a ``MemoryStore`` built twice would split the sessions in two). A value
        given is taken as it is, as built. An attribute it does not have is a ``TypeError``."""
        if unknown := [name for name in changes if not hasattr(self, name)]:
            raise TypeError(f"SessionsConfig has no attribute {', '.join(unknown)}")
        config = copy.copy(self)
        vars(config).update(changes)
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
        # The keywords, as the dict they are at runtime (_from_env moves the key-set options out of it).
        given = cast("dict[str, Any]", options)
        settings, variables = _from_env(env, given)
        settings.update(given)
        try:
            config = cls(**settings)
        except OptionError as exc:
            if exc.option not in variables:
                raise
            raise exc.named(variables[exc.option]) from None
        return config.replace(owns_store="store" in settings and "store" not in options)


class OptionError(ValueError):
    """An option's value no server could run with; ``option`` names it (its message starts with the name)."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option

    def named(self, variable: str) -> OptionError:
        """This error for a value read from ``variable``: the variable is named where the option was."""
        message = str(self)
        rest = message.removeprefix(self.option)
        return OptionError(self.option, variable + rest if rest != message else f"{variable}: {message}")


def _require(ok: bool, option: str, problem: str, value: object) -> None:
    if not ok:
        raise OptionError(option, f"{option} {problem}, got {value!r}")


@contextmanager
def _naming(option: str) -> Iterator[None]:
    """Name ``option`` in the ``ValueError`` of the check another module makes of it."""
    try:
        yield
    except ValueError as exc:
        raise OptionError(option, str(exc)) from None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_whole(value: object, least: int) -> bool:
    return type(value) is int and value >= least


def _check_lifetimes(ttl: float, idle_ttl: float | None) -> tuple[float, float | None]:
    """The lifetimes, as numbers of seconds: positive, at most ten years."""
    _require(_is_number(ttl) and 0 < ttl <= MAX_TTL, "ttl", LIFETIME, ttl)
    idle_ok = idle_ttl is None or (_is_number(idle_ttl) and 0 < idle_ttl <= MAX_TTL)
    _require(idle_ok, "idle_ttl", f"{LIFETIME}, or None to disable it", idle_ttl)
    return float(ttl), None if idle_ttl is None else float(idle_ttl)


def _check_bounds(
    max_body_size: int,
    retry_after: int,
    max_response_size: int,
    probe_timeout: float,
    max_conversations_per_caller: int | None,
) -> None:
    """Refuse a size, a delay or a maximum no server could run with."""
    _require(_is_whole(max_body_size, 1), "max_body_size", "must be positive", max_body_size)
    _require(_is_whole(retry_after, 0), "retry_after", "must be a whole number of seconds, 0 or more", retry_after)
    size_ok = _is_whole(max_response_size, 1)
    _require(size_ok, "max_response_size", "must be a whole number of bytes, 1 or more", max_response_size)
    timeout_ok = _is_number(probe_timeout) and probe_timeout > 0
    _require(timeout_ok, "probe_timeout", "must be a positive number of seconds", probe_timeout)
    most = max_conversations_per_caller
    _require(
        most is None or _is_whole(most, 1),
        "max_conversations_per_caller",
        "must be a whole number, 1 or more, or None for no maximum",
        most,
    )


def _check_rate(create_limit: tuple[int, float]) -> tuple[int, float]:
    """``(count, seconds)``: a whole number of operations, 1 or more, per at most a day."""
    count, seconds = create_limit
    ok = _is_whole(count, 1) and _is_number(seconds) and 0 < seconds <= 86_400
    _require(ok, "create_limit", "must be (count, seconds): 1 or more operations per at most a day", create_limit)
    return count, float(seconds)


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
    _require(trace_mode in ("link", "session"), "trace_mode", 'must be "link" or "session"', trace_mode)
    modes = ", ".join(CONVERSATION_DATA_MODES)
    _require(
        conversation_data in CONVERSATION_DATA_MODES, "conversation_data", f"must be one of {modes}", conversation_data
    )
    for name, flag in (("adopt_transport_sessions", adopt_transport_sessions), ("capture_content", capture_content)):
        if type(flag) is not bool:
            raise TypeError(f"{name} is True or False")
    _require(trace_user in (None, "digest", "name"), "trace_user", 'must be "digest", "name" or None (off)', trace_user)


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


# -- the environment: each MCP_SESSIONS_* variable read into its option's type; SessionsConfig checks the value


def _flag(raw: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def _rate(raw: str) -> tuple[int, float]:
    count, slash, seconds = raw.partition("/")
    if not slash:
        raise ValueError(raw)
    return int(count), float(seconds)


def _whole_or_none(raw: str) -> int | None:
    return None if raw.lower() == "none" else int(raw)


def _trace_user(raw: str) -> str | None:
    return None if raw.lower() == "off" else raw.lower()


# variable: (option, the value read from the text, what the text must be)
_VARIABLES: Final[dict[str, tuple[str, Callable[[str], object], str]]] = {
    "MCP_SESSIONS_TTL": ("ttl", float, "a number of seconds"),
    "MCP_SESSIONS_IDLE_TTL": ("idle_ttl", float, "a number of seconds"),
    "MCP_SESSIONS_PROBE_TIMEOUT": ("probe_timeout", float, "a number of seconds"),
    "MCP_SESSIONS_MAX_RESPONSE_SIZE": ("max_response_size", int, "a whole number of bytes"),
    "MCP_SESSIONS_PROFILES": ("profiles", str, "a list of profile names"),
    "MCP_SESSIONS_CREATE_LIMIT": ("create_limit", _rate, "COUNT/SECONDS (for example 100/60)"),
    "MCP_SESSIONS_MAX_CONVERSATIONS_PER_CALLER": (
        "max_conversations_per_caller",
        _whole_or_none,
        "a whole number or none",
    ),
    "MCP_SESSIONS_CONVERSATION_DATA": ("conversation_data", str.lower, "a mode"),
    "MCP_SESSIONS_CONVERSATION_KEYS": ("conversation_keys", str, "a list of keys"),
    "MCP_SESSIONS_ERROR_CODES": ("error_codes", str.lower, "a code set"),
    "MCP_SESSIONS_ADOPT_TRANSPORT": ("adopt_transport_sessions", _flag, "1 or 0 (true/false, yes/no, on/off)"),
    "MCP_SESSIONS_CAPTURE_CONTENT": ("capture_content", _flag, "1 or 0 (true/false, yes/no, on/off)"),
    "MCP_SESSIONS_TRACE_USER": ("trace_user", _trace_user, "digest, name or off"),
}
_NAMES: Final = (("MCP_SESSIONS_ISSUER", "issuer"), ("MCP_SESSIONS_AUDIENCE", "audience"))


def _from_env(env: Mapping[str, str], options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The options the ``MCP_SESSIONS_*`` variables give, for those ``options`` does not set; and for each of
    them, the variable it came from. Empty variables count as unset.

    ``options`` may lose the key-set options (issuer, audience, state size) to the key set built here.
    """
    settings: dict[str, Any] = {}
    variables: dict[str, str] = {}
    for variable, (option, read, text) in _VARIABLES.items():
        raw = env.get(variable, "").strip()
        if not raw or option in options:
            continue
        try:
            settings[option] = read(raw)
        except ValueError:
            raise OptionError(option, f"{variable} must be {text}, got {raw!r}") from None
        variables[option] = variable
    names = {key: value for name, key in _NAMES if (value := env.get(name, "").strip())}  # issuer, audience
    if "keys" not in options and "secret" not in options:
        settings.update(_keys_from_env(env, options, names))
    if "keys" not in options and "keys" not in settings:  # a KeySet carries its own issuer and audience
        settings.update(names)
    if "store" not in options and (store := _store_from_env(env)) is not None:
        settings["store"] = store
    return settings, variables


def _keys_from_env(env: Mapping[str, str], options: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
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
        given = {name: value for name in ("issuer", "audience", "max_state_size") if (value := options.pop(name, None))}
        key_options = {**names, **given}  # an option wins over its variable
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
    set_by: dict[str, str] = {}  # an option's variable, which its error names
    is_redis = url.partition("://")[0].lower() in REDIS_SCHEMES
    for name, key in (
        ("MCP_SESSIONS_REDIS_PREFIX", "prefix"),
        ("MCP_SESSIONS_REDIS_TIMEOUT", "timeout"),
        ("MCP_SESSIONS_REDIS_CONNECT_TIMEOUT", "connect_timeout"),
    ):
        if not env.get(name, "").strip():
            continue
        set_by[key] = name
        if not is_redis:
            raise ValueError(f"{name} is set but {variable} names no Redis store")
        raw = env[name].strip()
        try:
            options[key] = raw if key == "prefix" else float(raw)  # the store checks the value
        except ValueError:
            raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None
    try:
        return store_from_url(url, **options)
    except ImportError:
        raise RuntimeError(
            f"{variable} names a Redis store but the redis package is not installed: "
            "pip install 'redis>=8.1' (the redis extra of mcp-sessions)"
        ) from None
    except ValueError as exc:
        said = str(exc)
        source = next((name for key, name in set_by.items() if said.startswith(f"{key} ")), variable)
        raise ValueError(f"{source}: {said}") from None

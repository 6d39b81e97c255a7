"""The ``MCP_SESSIONS_*`` environment variables, read into the options of :class:`SessionsConfig`."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from typing import Any

from ._session import parse_limit
from ._tokens import KeySet
from .profiles import ERROR_CODE_SETS, profiles_from_names
from .sources import CONVERSATION_DATA_MODES, host_keys_from_config
from .stores import REDIS_SCHEMES, SessionStore, store_from_url

logger = logging.getLogger("mcp_sessions")

_NAMES = (("MCP_SESSIONS_ISSUER", "issuer"), ("MCP_SESSIONS_AUDIENCE", "audience"))


def settings_from_env(env: Mapping[str, str], options: dict[str, Any]) -> dict[str, Any]:
    """The options the ``MCP_SESSIONS_*`` variables give, for those ``options`` does not set.

    Every error names the variable at fault. ``options`` may lose the key-set
    options (issuer, audience, state size) to the key set built here.
    """
    settings: dict[str, Any] = {}
    names = {key: value for name, key in _NAMES if (value := env.get(name, "").strip())}  # issuer, audience
    if "keys" not in options and "secret" not in options:
        settings.update(_keys_from_env(env, options, names))
    if (ttl := _seconds(env, "MCP_SESSIONS_TTL")) is not None:
        settings["ttl"] = ttl
    if (idle_ttl := _seconds(env, "MCP_SESSIONS_IDLE_TTL")) is not None:
        settings["idle_ttl"] = idle_ttl
    if (probe_timeout := _seconds(env, "MCP_SESSIONS_PROBE_TIMEOUT")) is not None:
        settings["probe_timeout"] = probe_timeout
    if (size := env.get("MCP_SESSIONS_MAX_RESPONSE_SIZE", "").strip()) and "max_response_size" not in options:
        settings["max_response_size"] = _whole(size, "MCP_SESSIONS_MAX_RESPONSE_SIZE")
    if "keys" not in options and "keys" not in settings:  # a KeySet carries its own issuer and audience
        settings.update(names)
    if "profiles" not in options and (profiles := env.get("MCP_SESSIONS_PROFILES", "").strip()):
        try:
            settings["profiles"] = profiles_from_names(profiles)
        except ValueError as exc:
            raise ValueError(f"MCP_SESSIONS_PROFILES: {exc}") from None
    if "create_limit" not in options and (limit := env.get("MCP_SESSIONS_CREATE_LIMIT", "").strip()):
        parsed = parse_limit(limit, source="MCP_SESSIONS_CREATE_LIMIT")
        settings["create_limit"] = (parsed.count, parsed.seconds)
    name = "MCP_SESSIONS_MAX_CONVERSATIONS_PER_CALLER"
    if "max_conversations_per_caller" not in options and (most := env.get(name, "").strip().lower()):
        settings["max_conversations_per_caller"] = _per_caller(most, name)
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
    codes = env.get("MCP_SESSIONS_ERROR_CODES", "").strip().lower()
    if codes and "error_codes" not in options:
        if codes not in ERROR_CODE_SETS:
            raise ValueError(f"MCP_SESSIONS_ERROR_CODES must be one of {', '.join(ERROR_CODE_SETS)}, got {codes!r}")
        settings["error_codes"] = codes
    if (adopt := _flag(env, "MCP_SESSIONS_ADOPT_TRANSPORT")) is not None:
        settings["adopt_transport_sessions"] = adopt
    if (capture := _flag(env, "MCP_SESSIONS_CAPTURE_CONTENT")) is not None:
        settings["capture_content"] = capture
    if (user := env.get("MCP_SESSIONS_TRACE_USER", "").strip().lower()) and "trace_user" not in options:
        if user not in ("digest", "name", "off"):
            raise ValueError(f"MCP_SESSIONS_TRACE_USER must be digest, name or off, got {user!r}")
        settings["trace_user"] = None if user == "off" else user
    if "store" not in options and (store := _store_from_env(env)) is not None:
        settings["store"] = store
    return settings


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


def _per_caller(raw: str, name: str) -> int | None:
    """A per-caller maximum from the environment: a whole number, 1 or more, or ``none``."""
    if raw == "none":
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise ValueError(f"{name} must be a whole number, 1 or more, or none; got {raw!r}")
    return int(raw)


def _whole(raw: str, name: str) -> int:
    """A size from the environment: a whole number, 1 or more."""
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise ValueError(f"{name} must be a whole number of bytes, 1 or more; got {raw!r}")
    return int(raw)


def _flag(env: Mapping[str, str], name: str) -> bool | None:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return None
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be 1 or 0 (true/false, yes/no, on/off), got {raw!r}")


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
    is_redis = url.partition("://")[0].lower() in REDIS_SCHEMES
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
            "pip install 'redis>=8.1' (the redis extra of mcp-sessions)"
        ) from None
    except ValueError as exc:
        raise ValueError(f"{variable}: {exc}") from None

"""MCPSessionMiddleware configuration: the constructor and from_env fail early and say what to do; and the
require_session policy, compiled once into a predicate, in every documented form."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from conftest import SECRET, signer_of
from mcp_sessions import KeySet, MCPSessionMiddleware, SessionKey, SessionsConfig
from mcp_sessions._config import compile_policy
from mcp_sessions.profiles import DRAFT
from mcp_sessions.sources import BUILT_IN_HOSTS, HostKey
from mcp_sessions.stores import MemoryStore

TEN_YEARS = 10 * 365 * 24 * 3600
ON_THE_KEYSET = "with keys=, set issuer, audience and max_state_size on the KeySet"
CODE_SETS = "must be one of seeds, spec-safe, application"
TTL_LIMIT = r"ttl must be a positive number of seconds, at most 315360000 \(ten years\)"


async def app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover - never called
    raise AssertionError("configuration tests never call the app")


def test_defaults() -> None:
    mw = MCPSessionMiddleware(app, secret=SECRET)
    assert mw.app is app
    assert mw.config.ttl == 86400.0
    assert mw.config.idle_ttl is None
    assert mw.config.max_body_size == 4 * 1024 * 1024
    assert isinstance(mw.store, MemoryStore)
    assert (mw.keys.issuer, mw.keys.audience) == ("mcp-sessions", "mcp-sessions")
    assert signer_of(mw.keys).algorithm == "HS256"
    assert signer_of(mw.keys).kid == SessionKey.from_secret(SECRET).kid
    config = mw.config  # traces hosts' conversations and captures nothing
    assert (config.conversation_data, config.adopt_transport_sessions) == ("off", False)
    assert config.host_keys == BUILT_IN_HOSTS
    assert (config.capture_content, config.trace_user, config.max_conversations_per_caller) == (False, None, 1000)


def test_options_are_applied() -> None:
    store = MemoryStore(max_sessions=5)
    mw = MCPSessionMiddleware(
        app,
        secret=SECRET.encode(),
        ttl=60,
        idle_ttl=30,
        issuer="https://mcp.example",
        audience="tenant-a",
        store=store,
        max_body_size=1000,
        max_state_size=512,
    )
    assert (mw.config.ttl, mw.config.idle_ttl, mw.config.max_body_size) == (60.0, 30.0, 1000)
    assert mw.store is store
    assert (mw.keys.issuer, mw.keys.audience, mw.keys.max_state_size) == ("https://mcp.example", "tenant-a", 512)


def test_a_layer_s_configuration_is_a_new_one_and_names_only_what_a_configuration_has() -> None:
    config = SessionsConfig(secret=SECRET, path="/mcp")
    inside = config.replace(placement=False)
    assert inside.placement is False
    assert config.placement is True
    assert (inside.paths, inside.keys) == (config.paths, config.keys)
    with pytest.raises(TypeError, match="SessionsConfig has no attribute placed, pathz"):
        config.replace(placed=False, pathz=None)


def test_a_configuration_is_frozen_and_its_replace_builds_nothing_again() -> None:
    """The store a configuration built (a MemoryStore when none is given), its keys, its rate limit and its compiled
    policy are the copy's too: built twice, a MemoryStore would split the sessions in two."""
    config = SessionsConfig(secret=SECRET, create_limit=(5, 60), require_session=True)
    with pytest.raises(AttributeError, match=r"SessionsConfig is frozen: config.replace\(ttl=...\) makes a new one"):
        config.ttl = 5
    with pytest.raises(AttributeError, match="SessionsConfig is frozen"):
        del config.store
    other = config.replace(ttl=60.0, fronts_upstream=True)
    assert (other.ttl, other.fronts_upstream, config.ttl, config.fronts_upstream) == (60.0, True, 86400.0, False)
    kept = ("store", "keys", "create_limit", "requires", "sources", "profiles", "host_keys")
    assert all(getattr(other, name) is getattr(config, name) for name in kept)
    with pytest.raises(AttributeError, match="SessionsConfig is frozen"):
        other.ttl = 5


def test_from_env_s_store_is_its_own_to_close_on_a_frozen_configuration() -> None:
    built = SessionsConfig.from_env(environ={"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_STORE": "memory://"})
    given = SessionsConfig.from_env(environ={"MCP_SESSIONS_SECRET": SECRET}, store=MemoryStore())
    assert (built.owns_store, given.owns_store) == (True, False)
    with pytest.raises(AttributeError, match="SessionsConfig is frozen"):
        built.owns_store = False


def test_ttl_of_exactly_ten_years_is_accepted() -> None:
    mw = MCPSessionMiddleware(app, secret=SECRET, ttl=TEN_YEARS, idle_ttl=TEN_YEARS)
    assert (mw.config.ttl, mw.config.idle_ttl) == (float(TEN_YEARS), float(TEN_YEARS))


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({}, ValueError, "needs exactly one of secret= .* or keys=.* reads MCP_SESSIONS_SECRET$"),
        ({"secret": SECRET, "keys": KeySet.from_secret(SECRET)}, ValueError, "needs exactly one of secret="),
        ({"secret": "too-short"}, ValueError, "at least 32 bytes"),
        ({"secret": b"\0" * 31}, ValueError, "at least 32 bytes"),
        ({"keys": KeySet.from_secret(SECRET), "issuer": "x"}, ValueError, ON_THE_KEYSET),
        ({"keys": KeySet.from_secret(SECRET), "audience": "x"}, ValueError, ON_THE_KEYSET),
        ({"keys": KeySet.from_secret(SECRET), "max_state_size": 100}, ValueError, ON_THE_KEYSET),
        ({"secret": SECRET, "ttl": 0}, ValueError, "ttl must be a positive number of seconds"),
        ({"secret": SECRET, "ttl": -1}, ValueError, "ttl must be a positive number of seconds"),
        ({"secret": SECRET, "ttl": float("nan")}, ValueError, "ttl must be a positive number of seconds"),
        ({"secret": SECRET, "ttl": float("inf")}, ValueError, TTL_LIMIT),
        ({"secret": SECRET, "ttl": 1e12}, ValueError, TTL_LIMIT),
        ({"secret": SECRET, "ttl": TEN_YEARS + 1}, ValueError, TTL_LIMIT),
        ({"secret": SECRET, "idle_ttl": 0}, ValueError, "idle_ttl must be a positive number of seconds"),
        ({"secret": SECRET, "idle_ttl": -5}, ValueError, "idle_ttl must be a positive number of seconds"),
        ({"secret": SECRET, "idle_ttl": float("nan")}, ValueError, "idle_ttl must be a positive number"),
        ({"secret": SECRET, "idle_ttl": float("inf")}, ValueError, r"idle_ttl .* at most 315360000 \(ten years\)"),
        ({"secret": SECRET, "max_body_size": 0}, ValueError, "max_body_size must be positive"),
        ({"secret": SECRET, "require_session": "tools/call"}, TypeError, "collection of method names, not one string"),
        ({"secret": SECRET, "require_session_tools": "count"}, TypeError, "collection of tool names, not one string"),
        ({"secret": SECRET, "retry_after": 1.5}, ValueError, "retry_after must be a whole number of seconds"),
        ({"secret": SECRET, "max_response_size": 0}, ValueError, "max_response_size must be a whole number of bytes"),
        ({"secret": SECRET, "probe_timeout": 0}, ValueError, "probe_timeout must be a positive number of seconds"),
        ({"secret": SECRET, "create_limit": (0, 60)}, ValueError, r"create_limit must be \(count, seconds\)"),
        ({"secret": SECRET, "create_limit": (5, 86_401)}, ValueError, r"create_limit must be \(count, seconds\)"),
        ({"secret": SECRET, "max_conversations_per_caller": True}, ValueError, "max_conversations_per_caller must"),
        ({"secret": SECRET, "max_conversations_per_caller": 0}, ValueError, "max_conversations_per_caller must"),
        ({"secret": SECRET, "trace_mode": "x"}, ValueError, 'trace_mode must be "link" or "session"'),
        ({"secret": SECRET, "trace_user": "email"}, ValueError, 'trace_user must be "digest", "name" or None'),
        ({"secret": SECRET, "conversation_data": "all"}, ValueError, "conversation_data must be one of off, principal"),
        ({"secret": SECRET, "conversation_keys": "x"}, ValueError, "conversation_keys: 'x' is not"),
        ({"secret": SECRET, "adopt_transport_sessions": "yes"}, TypeError, "adopt_transport_sessions is True or"),
        ({"secret": SECRET, "capture_content": 1}, TypeError, "capture_content is True or False"),
        ({"secret": SECRET, "profiles": "bogus"}, ValueError, "unknown session wire profile 'bogus'"),
        ({"secret": SECRET, "profiles": ["strawman"]}, ValueError, "the session wire profile 'strawman' was removed"),
        ({"secret": SECRET, "error_codes": "strict"}, ValueError, f"error_codes {CODE_SETS}"),
    ],
    ids=["nothing", "both", "short-secret", "short-bytes-secret", "keys-and-issuer", "keys-and-audience",
         "keys-and-max-state-size", "ttl-zero", "ttl-negative", "ttl-nan", "ttl-infinite", "ttl-past-year-9999",
         "ttl-over-ten-years", "idle-ttl-zero", "idle-ttl-negative", "idle-ttl-nan", "idle-ttl-infinite",
         "max-body-zero", "require-session-string", "require-session-tools-string", "retry-after-fraction",
         "max-response-zero", "probe-timeout-zero", "create-limit-zero", "create-limit-over-a-day",
         "conversations-bool", "conversations-zero", "trace-mode", "trace-user", "conversation-data",
         "conversation-keys", "adopt-not-bool", "capture-not-bool", "unknown-profile", "retired-profile",
         "error-codes"],
)  # fmt: skip
def test_bad_configuration_fails_at_construction(options: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        MCPSessionMiddleware(app, **options)


@pytest.mark.parametrize("dev", [None, "", "0", "no", "false"])
def test_from_env_dev_must_be_truthy(dev: str | None) -> None:
    """Without a secret (and ``MCP_SESSIONS_DEV`` unset or not truthy), the error names both variables."""
    with pytest.raises(RuntimeError, match="MCP_SESSIONS_SECRET is not set") as info:
        MCPSessionMiddleware.from_env(app, environ={} if dev is None else {"MCP_SESSIONS_DEV": dev})
    assert "MCP_SESSIONS_DEV=1" in str(info.value)


@pytest.mark.parametrize("dev", ["1", "true", "yes", "TRUE", " 1 "])
def test_from_env_dev_mode_uses_a_random_key_and_warns(dev: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mcp_sessions"):
        first = MCPSessionMiddleware.from_env(app, environ={"MCP_SESSIONS_DEV": dev})
        second = MCPSessionMiddleware.from_env(app, environ={"MCP_SESSIONS_DEV": dev})
    assert signer_of(first.keys).algorithm == "HS256"
    assert signer_of(first.keys).kid != signer_of(second.keys).kid  # a fresh key each time
    dev_warnings = [r for r in caplog.records if "MCP_SESSIONS_DEV" in r.getMessage()]
    assert [r.levelno for r in dev_warnings] == [logging.WARNING, logging.WARNING]


def test_from_env_secret_wins_over_dev() -> None:
    mw = MCPSessionMiddleware.from_env(app, environ={"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_DEV": "1"})
    assert signer_of(mw.keys).kid == SessionKey.from_secret(SECRET).kid


def test_from_env_reads_every_variable() -> None:
    mw = MCPSessionMiddleware.from_env(
        app,
        environ={
            "MCP_SESSIONS_SECRET": SECRET,
            "MCP_SESSIONS_TTL": " 3600 ",
            "MCP_SESSIONS_IDLE_TTL": "90.5",
            "MCP_SESSIONS_ISSUER": "https://mcp.example",
            "MCP_SESSIONS_AUDIENCE": "tenant-a",
        },
    )
    assert (mw.config.ttl, mw.config.idle_ttl) == (3600.0, 90.5)
    assert (mw.keys.issuer, mw.keys.audience) == ("https://mcp.example", "tenant-a")
    token, _ = mw.keys.mint_session_token(ttl=mw.config.ttl)
    assert KeySet.from_secret(SECRET, issuer="https://mcp.example", audience="tenant-a").verify_session_token(token)


@pytest.mark.parametrize(
    ("name", "raw", "read", "expected"),
    [
        ("MCP_SESSIONS_PROBE_TIMEOUT", "10", lambda c: c.probe_timeout, 10.0),
        ("MCP_SESSIONS_MAX_RESPONSE_SIZE", " 16777216 ", lambda c: c.max_response_size, 16777216),
        ("MCP_SESSIONS_CREATE_LIMIT", "100/60", lambda c: (c.create_limit.count, c.create_limit.seconds), (100, 60.0)),
        ("MCP_SESSIONS_MAX_CONVERSATIONS_PER_CALLER", "25", lambda c: c.max_conversations_per_caller, 25),
        ("MCP_SESSIONS_MAX_CONVERSATIONS_PER_CALLER", "None", lambda c: c.max_conversations_per_caller, None),
        ("MCP_SESSIONS_CONVERSATION_DATA", "Anonymous", lambda c: c.conversation_data, "anonymous"),
        ("MCP_SESSIONS_CONVERSATION_KEYS", "header:x-chat,meta:acme/chat", lambda c: c.host_keys[:2],
         (HostKey("header:x-chat", "header", "x-chat"), HostKey("meta:acme/chat", "meta", "acme/chat"))),
        ("MCP_SESSIONS_ADOPT_TRANSPORT", "1", lambda c: c.adopt_transport_sessions, True),
        ("MCP_SESSIONS_ADOPT_TRANSPORT", "Off", lambda c: c.adopt_transport_sessions, False),
        ("MCP_SESSIONS_CAPTURE_CONTENT", "yes", lambda c: c.capture_content, True),
        ("MCP_SESSIONS_TRACE_USER", "Name", lambda c: c.trace_user, "name"),
        ("MCP_SESSIONS_TRACE_USER", "off", lambda c: c.trace_user, None),
        ("MCP_SESSIONS_PROFILES", "draft", lambda c: [p.name for p in c.profiles], ["draft"]),
    ],
)  # fmt: skip
def test_from_env_each_variable_sets_its_option(
    name: str, raw: str, read: Callable[[SessionsConfig], object], expected: object
) -> None:
    assert read(SessionsConfig.from_env(environ={"MCP_SESSIONS_SECRET": SECRET, name: raw})) == expected


def test_from_env_blank_values_mean_unset() -> None:
    mw = MCPSessionMiddleware.from_env(
        app,
        environ={"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_TTL": "  ", "MCP_SESSIONS_ISSUER": " "},
    )
    assert mw.config.ttl == 86400.0
    assert mw.keys.issuer == "mcp-sessions"


def test_from_env_keyword_options_override_the_environment() -> None:
    keys = KeySet.from_secret(SECRET)
    mw = MCPSessionMiddleware.from_env(app, environ={"MCP_SESSIONS_TTL": "60"}, keys=keys, ttl=120)
    assert mw.keys is keys
    assert mw.config.ttl == 120.0


def test_from_env_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_SESSIONS_SECRET", SECRET)
    monkeypatch.setenv("MCP_SESSIONS_TTL", "77")
    mw = MCPSessionMiddleware.from_env(app)
    assert mw.config.ttl == 77.0


POSITIVE = "must be a positive number of seconds"
WHOLE_OR_NONE = "must be a whole number, 1 or more, or None for no maximum"
FLAG = "must be 1 or 0 (true/false, yes/no, on/off), got 'maybe'"


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("MCP_SESSIONS_TTL", "one day", " must be a number of seconds, got 'one day'"),
        ("MCP_SESSIONS_TTL", "1d", " must be a number of seconds, got '1d'"),
        ("MCP_SESSIONS_TTL", "0", f" {POSITIVE}"),
        ("MCP_SESSIONS_TTL", "-60", f" {POSITIVE}"),
        ("MCP_SESSIONS_TTL", "nan", f" {POSITIVE}"),
        ("MCP_SESSIONS_TTL", "inf", f" {POSITIVE}, at most 315360000 (ten years)"),
        ("MCP_SESSIONS_TTL", "1e12", f" {POSITIVE}, at most 315360000 (ten years)"),
        ("MCP_SESSIONS_IDLE_TTL", "ten", " must be a number of seconds, got 'ten'"),
        ("MCP_SESSIONS_IDLE_TTL", "-1", f" {POSITIVE}"),
        ("MCP_SESSIONS_PROBE_TIMEOUT", "0", f" {POSITIVE}"),
        ("MCP_SESSIONS_MAX_RESPONSE_SIZE", "0", " must be a whole number of bytes, 1"),
        ("MCP_SESSIONS_MAX_RESPONSE_SIZE", "1.5", " must be a whole number of bytes, got"),
        ("MCP_SESSIONS_CREATE_LIMIT", "100", " must be COUNT/SECONDS (for example 100/60)"),
        ("MCP_SESSIONS_CREATE_LIMIT", "x/60", " must be COUNT/SECONDS (for example 100/60)"),
        ("MCP_SESSIONS_CREATE_LIMIT", "0/60", " must be (count, seconds)"),
        ("MCP_SESSIONS_CREATE_LIMIT", "10/0", " must be (count, seconds)"),
        ("MCP_SESSIONS_MAX_CONVERSATIONS_PER_CALLER", "0", f" {WHOLE_OR_NONE}"),
        ("MCP_SESSIONS_MAX_CONVERSATIONS_PER_CALLER", "-3", f" {WHOLE_OR_NONE}"),
        ("MCP_SESSIONS_MAX_CONVERSATIONS_PER_CALLER", "1.5", " must be a whole"),
        ("MCP_SESSIONS_MAX_CONVERSATIONS_PER_CALLER", "many", " must be a whole"),
        ("MCP_SESSIONS_CONVERSATION_DATA", "everyone", " must be one of off, principal, anonymous"),
        ("MCP_SESSIONS_CONVERSATION_KEYS", "cookie:x", ": 'cookie:x' is not 'meta:KEY'"),
        ("MCP_SESSIONS_ADOPT_TRANSPORT", "maybe", f" {FLAG}"),
        ("MCP_SESSIONS_CAPTURE_CONTENT", "maybe", f" {FLAG}"),
        ("MCP_SESSIONS_TRACE_USER", "yes", ' must be "digest", "name" or None (off)'),
        ("MCP_SESSIONS_PROFILES", "bogus", ": unknown session wire profile 'bogus'"),
        ("MCP_SESSIONS_PROFILES", "draft,sep1364-alt1", ": the session wire profile 'sep1364-alt1' was removed: no"),
        ("MCP_SESSIONS_ERROR_CODES", "strict", f" {CODE_SETS}"),
    ],
)  # fmt: skip
def test_from_env_a_bad_value_names_the_variable(name: str, raw: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        SessionsConfig.from_env(environ={"MCP_SESSIONS_SECRET": SECRET, name: raw})
    assert str(info.value).startswith(name + message)


def test_from_env_a_keyword_is_never_blamed_on_a_variable() -> None:
    environ = {"MCP_SESSIONS_SECRET": SECRET, "MCP_SESSIONS_TTL": "soon"}
    assert SessionsConfig.from_env(environ=environ, ttl=60).ttl == 60.0  # the keyword wins: the variable is not read
    with pytest.raises(ValueError, match=r"^ttl must be"):
        SessionsConfig.from_env(environ={"MCP_SESSIONS_SECRET": SECRET}, ttl=0)


def test_from_env_issuer_and_audience_are_not_forced_onto_given_keys() -> None:
    keys = KeySet.from_secret(SECRET, issuer="i", audience="a")
    environ = {"MCP_SESSIONS_ISSUER": "env-issuer", "MCP_SESSIONS_AUDIENCE": "env-audience"}
    mw = MCPSessionMiddleware.from_env(app, environ=environ, keys=keys)
    assert (mw.keys.issuer, mw.keys.audience) == ("i", "a")


EXEMPT = DRAFT.sessionless
CALL_COUNT = {"name": "count", "arguments": {}}
CALL_WHOAMI = {"name": "whoami", "arguments": {}}


@pytest.mark.parametrize(
    ("policy", "tools", "method", "params", "expected"),
    [
        (False, (), "tools/call", CALL_COUNT, False),
        (True, (), "tools/call", CALL_COUNT, True),
        (True, (), "resources/read", {"uri": "x"}, True),
        (True, (), "initialize", {}, False),
        (True, (), "server/discover", {}, False),
        (True, (), "ping", None, False),
        (True, (), "sessions/create", None, False),
        (True, (), "notifications/progress", {}, False),
        (["tools/call"], (), "tools/call", CALL_COUNT, True),
        (["tools/call"], (), "tools/list", {}, False),
        (frozenset({"prompts/get"}), (), "prompts/get", {"name": "p"}, True),
        (("tools/call", "initialize"), (), "initialize", {}, False),
        (False, ["count"], "tools/call", CALL_COUNT, True),
        (False, ["count"], "tools/call", CALL_WHOAMI, False),
        (False, ["count"], "tools/call", None, False),
        (False, ["count"], "tools/call", ["count"], False),
        (False, ["count"], "prompts/get", {"name": "count"}, False),
        (lambda method, params: method.startswith("resources/"), (), "resources/read", {}, True),
        (lambda method, params: method.startswith("resources/"), (), "tools/call", CALL_COUNT, False),
        (lambda method, params: True, (), "ping", None, False),
        (lambda method, params: params == CALL_WHOAMI, ["count"], "tools/call", CALL_WHOAMI, True),
        (lambda method, params: False, ["count"], "tools/call", CALL_COUNT, True),
    ],
    ids=["off", "all", "all-other-method", "all-initialize-exempt", "all-discover-exempt", "all-ping-exempt",
         "all-create-exempt", "all-notification-exempt", "list", "list-other", "frozenset", "list-exempt-wins",
         "tools", "tools-other-tool", "tools-no-params", "tools-params-list", "tools-only-tools-call",
         "callable-yes", "callable-no", "callable-exempt-wins", "callable-and-tools", "tools-and-callable"],
)  # fmt: skip
def test_policy(policy: Any, tools: Any, method: str, params: Any, expected: bool) -> None:
    assert compile_policy(policy, tools, EXEMPT)(method, params) is expected


def test_the_callable_sees_method_and_params() -> None:
    seen: list[tuple[str, Any]] = []

    def never(method: str, params: Any) -> bool:
        seen.append((method, params))
        return False

    requires = compile_policy(never, (), EXEMPT)
    assert requires("tools/list", {"cursor": "c"}) is False
    assert seen == [("tools/list", {"cursor": "c"})]

"""The gateway's flags and environment, read once into the typed, frozen configuration ``serve`` takes
(``_config.GatewayConfig``), through the command's own parser: what each mode serves, how it listens (each mode's
drain, the status port and socket), whom it lets in; the modes' choices from their one definition."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from mcp_sessions import SessionsConfig
from mcp_sessions._gateway._cli import add_arguments, configured
from mcp_sessions._gateway._config import (
    DEFAULT_MAX_PROCESSES_PER_CALLER,
    DEFAULT_WARM,
    FOOTPRINT,
    LOG_LEVELS,
    MOST_PROCESSES,
    STATES_KEPT,
    Forwarding,
    GatewayConfig,
    Listening,
    StdioProcesses,
)
from mcp_sessions._gateway.http._app import forwarding_app, gateway_app
from mcp_sessions._gateway.stdio._modes import PROCESSES, SESSIONLESS, default_max_processes

URL = "http://127.0.0.1:3001/mcp"
UPSTREAM = ["--upstream", URL]
STDIO = ["--stdio", "cat -n", "--process-containment", "none", "--accept-root-processes"]  # as root: its processes too


def parsed(flags: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mcp-sessions gateway")
    add_arguments(parser)
    return parser.parse_args(flags)


def config_of(flags: list[str], environ: Mapping[str, str] | None = None) -> GatewayConfig:
    tests = {"MCP_SESSIONS_SECRET": "x" * 32, "STATE_DIRECTORY": os.environ["STATE_DIRECTORY"]}  # conftest's
    return configured(parsed(flags), {**tests, **(environ or {})})


@pytest.mark.parametrize(
    ("flags", "listening"),
    [
        (UPSTREAM, Listening("127.0.0.1", 8000, "info", 10.0)),
        (STDIO, Listening("127.0.0.1", 8000, "info", 30.0)),
        (
            [*UPSTREAM, "--host", "::1", "--port", "9000", "--log-level", "debug", "--shutdown-timeout", "2.5"],
            Listening("::1", 9000, "debug", 2.5),
        ),
        (
            [*STDIO, "--status-port", "9001", "--status-socket", "/run/gw/status.sock"],
            Listening("127.0.0.1", 8000, "info", 30.0, 9001, "/run/gw/status.sock"),
        ),
        (
            [*UPSTREAM, "--handover", "/run/gw/handover"],
            Listening("127.0.0.1", 8000, "info", 10.0, handover="/run/gw/handover"),
        ),
    ],
)
def test_how_it_listens_is_read_once_with_each_mode_s_drain(flags: list[str], listening: Listening) -> None:
    assert config_of(flags).listening == listening


@pytest.mark.parametrize(
    ("flags", "forwarding"),
    [
        (UPSTREAM, Forwarding((URL,), 15.0, 5.0, 300.0, 10.0)),
        (
            [*UPSTREAM, "--upstream", "http://127.0.0.2:3001/mcp", "--keepalive", "0", "--connect-timeout", "1"],
            Forwarding((URL, "http://127.0.0.2:3001/mcp"), None, 1.0, 300.0, 10.0),
        ),
        (
            [*UPSTREAM, "--first-byte-timeout", "2", "--failure-cooldown", "3"],
            Forwarding((URL,), 15.0, 5.0, 2.0, 3.0),
        ),
    ],
)
def test_an_upstream_s_replicas_and_waits(flags: list[str], forwarding: Forwarding) -> None:
    assert config_of(flags).serves == forwarding


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], {}),
        (
            ["--processes", "per-conversation", "--sessionless", "per-request", "--process-idle", "30"],
            {"processes": "per-conversation", "sessionless": "per-request", "process_idle": 30.0},
        ),
        (
            ["--max-processes", "3", "--max-processes-per-principal", "1", "--warm", "0"],
            {"max_processes": 3, "max_processes_per_principal": 1, "warm": 0},
        ),
        (["--pass-env", "LANG", "--pass-env", "TZ"], {"pass_env": ("LANG", "TZ")}),
    ],
)
def test_a_stdio_server_s_processes(flags: list[str], expected: dict[str, Any]) -> None:
    defaults = {
        "command": ("cat", "-n"),  # split as a shell would
        "processes": "auto",
        "sessionless": "per-caller",
        "process_idle": None,
        "max_processes": default_max_processes(),  # this host's memory's
        "max_processes_per_principal": 8,
        "warm": 2,
        "pass_env": (),
        "process_env": (),
        "exchange_scope": None,
    }
    serves = config_of([*STDIO, *flags]).serves
    assert isinstance(serves, StdioProcesses)
    assert {name: getattr(serves, name) for name in defaults} == {**defaults, **expected}
    assert serves.sandbox is not None
    assert serves.sandbox.containment == "none"


@pytest.mark.parametrize(
    ("flags", "environ", "front"),
    [
        (UPSTREAM, {}, (None, None, None)),  # the SDK's loopback names, checked by the app
        ([*UPSTREAM, "--host", "0.0.0.0"], {}, ((), (), None)),  # none on another address
        (
            [*UPSTREAM, "--allowed-host", "example.com:*"],
            {"FORWARDED_ALLOW_IPS": "10.0.0.1"},
            (("example.com:*",), (), "10.0.0.1"),
        ),
        (
            STDIO,
            {"MCP_SESSIONS_ALLOWED_HOSTS": "a.example, b.example", "MCP_SESSIONS_ALLOWED_ORIGINS": "https://a.example"},
            (("a.example", "b.example"), ("https://a.example",), None),
        ),
    ],
)
def test_whom_it_lets_in_from_the_flags_else_the_environment(
    flags: list[str], environ: dict[str, str], front: tuple[object, ...]
) -> None:
    config = config_of(flags, environ)
    assert (config.allowed_hosts, config.allowed_origins, config.forwarded_allow_ips) == front
    assert config.auth is None
    assert config.exchange is None
    assert config.sandbox is None or config.sandbox.egress is None


@pytest.mark.parametrize(
    ("flags", "refusal"),
    [
        ([*UPSTREAM, "--process-env", "A=claim:sub"], "--process-env sets a variable in --stdio processes"),
        ([*UPSTREAM, "--status-port", "9001"], "--status-port serves --stdio processes' status"),
        ([*STDIO, "--upstream-token", "none"], "--upstream-token is an --upstream's"),
        ([*STDIO, "--pass-env", "LD_PRELOAD"], "--pass-env: 'LD_PRELOAD' tells the dynamic loader what to load"),
        ([*STDIO, "--forwarded-allow-ips", "*"], "--forwarded-allow-ips *: processes on the host's network"),
        (["--stdio", "no-such-command-here"], "--stdio: no-such-command-here: no such command"),
    ],
)
def test_a_configuration_no_gateway_could_serve_is_refused_in_one_line(flags: list[str], refusal: str) -> None:
    with pytest.raises(ValueError) as refused:
        config_of(flags)
    assert str(refused.value).startswith(refusal)
    assert "\n" not in str(refused.value)


VERIFIED = ["--auth-jwks", "http://127.0.0.1:9/k", "--auth-issuer", "http://127.0.0.1:9", "--auth-audience", URL]
EXCHANGING = [*VERIFIED, "--exchange-client-id", "g", "--exchange-client-auth", "client_secret_post"]


@pytest.mark.parametrize(
    ("flags", "refusal"),
    [
        (
            [*UPSTREAM, "--upstream-token", "id-jag", *EXCHANGING, "--id-jag-client-id", "t"],
            "--id-jag-client's secret goes only to a server named for it: give --id-jag-issuer",
        ),
        (
            [*UPSTREAM, "--upstream-token", "oauth", *VERIFIED, "--oauth-client-id", "v"],
            "--oauth-client's secret goes only to a server named for it: give --oauth-issuer",
        ),
        ([*UPSTREAM, "--oauth-issuer", "https://as.example"], "--oauth-issuer names --upstream-token oauth's server"),
    ],
)
def test_a_client_secret_with_no_server_named_for_it_is_refused_at_startup(flags: list[str], refusal: str) -> None:
    """A secret names no server: one whose server would be read from the upstream's metadata (a stranger's) is
    refused as the gateway starts, saying which flag names it."""
    secrets = {f"MCP_SESSIONS_{group}_CLIENT_SECRET": "s3cr3t" for group in ("EXCHANGE", "ID_JAG", "OAUTH", "LOGIN")}
    environ = {**secrets, "MCP_SESSIONS_LOGIN_ISSUER": "http://127.0.0.1:9", "MCP_SESSIONS_LOGIN_CLIENT_ID": "g"}
    with pytest.raises(ValueError) as refused:
        config_of(flags, environ)
    assert str(refused.value).startswith(refusal)
    assert "\n" not in str(refused.value) and "s3cr3t" not in str(refused.value)


def test_the_configuration_is_frozen_and_never_shows_the_environment() -> None:
    config = config_of([*STDIO, "--pass-env", "API_TOKEN"], {"API_TOKEN": "s3cret-value"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.listening = config.listening  # type: ignore[misc]
    assert isinstance(config.serves, StdioProcesses)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.serves.pass_env = ()  # type: ignore[misc]
    assert config.serves.environ["API_TOKEN"] == "s3cret-value"
    assert "s3cret-value" not in repr(config)
    assert "x" * 32 not in repr(config)  # the sessions' secret


@pytest.mark.parametrize(
    ("flag", "choices"),
    [
        ("--processes", PROCESSES),
        ("--sessionless", SESSIONLESS),
        ("--conversation-state", STATES_KEPT),
        ("--log-level", LOG_LEVELS),
    ],
)
def test_the_modes_choices_are_their_literal_s(flag: str, choices: tuple[str, ...]) -> None:
    parser = argparse.ArgumentParser(prog="mcp-sessions gateway")
    add_arguments(parser)
    (action,) = [action for action in parser._actions if flag in action.option_strings]
    assert action.choices is choices
    with pytest.raises(SystemExit):
        parser.parse_args([*UPSTREAM, flag, "bogus"])


@pytest.mark.parametrize(
    ("gib", "servers", "most"), [(24, 3, 48), (24, 1, 150), (4, 1, 22), (4, 3, 5), (1024, 1, 253), (0.5, 1, 1)]
)
def test_the_default_max_processes_is_half_the_hosts_memory_at_a_process_s_footprint(
    gib: float, servers: int, most: int
) -> None:
    """Issue 112 (4): 16 to 64 processes whatever the host, a third of them each for a file's three servers: a 24
    GiB host's 21 a server refused a team of 20 opening two conversations on each. Now half the host's memory at
    ``FOOTPRINT`` a process (at most ``MOST_PROCESSES``) shared by the servers, each less its warm ones and its
    shared one: within the host's half, and on a 24 GiB host two conversations a user on each of three servers."""
    memory = int(gib * (1 << 30))
    assert default_max_processes(memory, servers) == most
    assert most == 1 or (most + DEFAULT_WARM + 1) * servers * FOOTPRINT <= min(memory // 2, MOST_PROCESSES * FOOTPRINT)
    if (gib, servers) == (24, 3):
        assert most >= 20 * 2 and DEFAULT_MAX_PROCESSES_PER_CALLER >= 2  # two conversations each, each user


@pytest.mark.parametrize(("flags", "part"), [(STDIO, "serves"), (UPSTREAM, "serves"), (UPSTREAM, "listening")])
def test_without_its_flag_each_value_is_the_configuration_s_default(flags: list[str], part: str) -> None:
    """Issue 102, item 3: each default is written once, in the configuration, and the flags take it from there (the
    stdio processes' were written in the flags and again in the app's ``StdioGateway``, the configuration had none)."""
    built = getattr(config_of(flags), part)
    given = {"command", "upstreams", "sandbox", "environ"}  # what a flag must give, or what is built from them
    fields = [field for field in dataclasses.fields(built) if field.name not in given]
    # max_processes's default is the host's memory's (default_max_processes), made as the configuration is
    defaults = {f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory() for f in fields}
    assert dataclasses.MISSING not in defaults.values()
    assert {name: getattr(built, name) for name in defaults} == defaults


@pytest.mark.parametrize(
    ("made", "refusal"),
    [
        (lambda: StdioProcesses(command=()), "--stdio needs a command"),
        (lambda: StdioProcesses(command=("cat",), processes="bogus"), "processes is 'auto'"),  # type: ignore[arg-type]
        (lambda: StdioProcesses(command=("cat",), max_processes=0), "max_processes and max_processes_per_principal"),
        (lambda: StdioProcesses(command=("cat",), warm=-1), "sessionless is 'per-caller'"),
        (lambda: StdioProcesses(command=("cat",), process_idle=0), "process_idle must be a positive number"),
        (lambda: StdioProcesses(command=("cat",), state="memory"), "state is 'process' or 'disk'"),  # type: ignore[arg-type]
        (lambda: config_of([*UPSTREAM, "--conversation-state", "disk"]), "--conversation-state says where a --stdio"),
        (lambda: Forwarding((URL,), connect_timeout=0), "connect_timeout must be a positive number"),
        (lambda: gateway_app([URL], keepalive=0), "keepalive must be a positive number"),
    ],
)
def test_what_no_gateway_could_serve_with_is_refused_as_it_is_made_whoever_makes_it(
    made: Callable[[], object], refusal: str
) -> None:
    with pytest.raises(ValueError, match=refusal):
        made()


def test_each_app_takes_the_configuration_of_what_it_serves() -> None:
    from mcp_sessions._gateway.stdio._server import stdio_gateway_app

    upstream = GatewayConfig(serves=Forwarding((URL,)), sessions=SessionsConfig(secret="x" * 32))
    with pytest.raises(TypeError, match=r"config\.serves is a StdioProcesses"):
        stdio_gateway_app(upstream)
    stdio = dataclasses.replace(upstream, serves=StdioProcesses(command=("cat",)))
    with pytest.raises(TypeError, match=r"config\.serves is a Forwarding"):
        forwarding_app(stdio)

"""``mcp-sessions gateway``: the gateway's app served by uvicorn, configured by flags and ``MCP_SESSIONS_*``."""

from __future__ import annotations

import argparse
import copy
import ipaddress
import logging
from collections.abc import Mapping
from typing import Any, Final, TextIO

from .._config import SessionsConfig
from ._app import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_FAILURE_COOLDOWN,
    DEFAULT_FIRST_BYTE_TIMEOUT,
    DEFAULT_KEEPALIVE,
    gateway_app,
)
from ._front import QueryDropped

logger = logging.getLogger("mcp_sessions.gateway")

DEFAULT_SHUTDOWN_TIMEOUT: Final = 10.0
"""On SIGTERM, uvicorn waits for every open response: an event stream never ends by itself, so after this
long the gateway cancels what still runs (each upstream request closed) and stops."""

EXIT_USAGE = 2


def add_gateway_parser(commands: Any) -> None:  # argparse's subparsers action has no public type
    """The ``gateway`` command and its options."""
    gateway = commands.add_parser(
        "gateway",
        help="serve sessions in front of any MCP server (any language), forwarding to it over HTTP",
        description=(
            "Serve one MCP endpoint with data-layer sessions, forwarding every request to the upstream server "
            "(or to one of its replicas, the same one for every request of a conversation). Sessions are "
            "configured by the MCP_SESSIONS_* variables, as for the middleware."
        ),
    )
    gateway.add_argument(
        "--upstream",
        action="append",
        required=True,
        metavar="URL",
        help="the server's MCP endpoint; repeat per replica",
    )
    gateway.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    gateway.add_argument("--port", type=int, default=8000, help="the port to listen on (default 8000)")
    gateway.add_argument(
        "--allowed-host",
        action="append",
        metavar="HOST",
        help="a Host the gateway serves ('example.com:*': any port); repeat. Default: MCP_SESSIONS_ALLOWED_HOSTS, "
        "else localhost names on a loopback --host and no check on any other",
    )
    gateway.add_argument(
        "--allowed-origin", action="append", metavar="ORIGIN", help="an Origin the gateway serves, as --allowed-host"
    )
    gateway.add_argument(
        "--forwarded-allow-ips",
        metavar="IPS",
        help="the proxies in front whose X-Forwarded-* and Forwarded headers count (comma-separated IP addresses "
        "and networks, '*' for all), as uvicorn's option. Default: FORWARDED_ALLOW_IPS, else none",
    )
    for flag, default, text in (
        ("--keepalive", DEFAULT_KEEPALIVE, "an SSE comment on an event stream idle this long; 0: never"),
        ("--connect-timeout", DEFAULT_CONNECT_TIMEOUT, None),
        ("--first-byte-timeout", DEFAULT_FIRST_BYTE_TIMEOUT, "the longest wait for a response's headers"),
        (
            "--failure-cooldown",
            DEFAULT_FAILURE_COOLDOWN,
            "how long a replica that cannot be connected to is out of service",
        ),
        ("--shutdown-timeout", DEFAULT_SHUTDOWN_TIMEOUT, "on SIGTERM, how long answers still streaming may go on"),
    ):
        help_text = None if text is None else f"{text} (default {default:g})"
        gateway.add_argument(flag, type=float, default=default, metavar="SECONDS", help=help_text)
    gateway.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))


def run_gateway(args: argparse.Namespace, stderr: TextIO, environ: Mapping[str, str]) -> int:
    """Build the gateway from ``args`` and the environment, and serve it until stopped."""
    try:
        import uvicorn

        config = SessionsConfig.from_env(environ=environ)
        hosts = _listed(args.allowed_host, environ.get("MCP_SESSIONS_ALLOWED_HOSTS"))
        origins = _listed(args.allowed_origin, environ.get("MCP_SESSIONS_ALLOWED_ORIGINS"))
        if hosts is None and origins is None:  # the SDK's rule: localhost names on a loopback address, else none
            hosts = origins = None if _loopback(args.host) else []
        else:
            hosts, origins = hosts or [], origins or []
        app = gateway_app(
            args.upstream,
            config=config,
            allowed_hosts=hosts,
            allowed_origins=origins,
            keepalive=args.keepalive or None,
            connect_timeout=args.connect_timeout,
            first_byte_timeout=args.first_byte_timeout,
            failure_cooldown=args.failure_cooldown,
            forwarded_allow_ips=environ.get("FORWARDED_ALLOW_IPS")
            if args.forwarded_allow_ips is None
            else args.forwarded_allow_ips,
        )
    except ModuleNotFoundError as exc:
        print(f"mcp-sessions gateway: {exc.name} is missing: pip install 'mcp-sessions[gateway]'", file=stderr)
        return EXIT_USAGE
    except (ImportError, ValueError, TypeError, RuntimeError) as exc:
        print(f"mcp-sessions gateway: {exc}", file=stderr)
        return EXIT_USAGE
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per forwarded request, its query string in it
    logger.info("mcp-sessions gateway: %s on http://%s:%d", ", ".join(args.upstream), args.host, args.port)
    # The upstream's own Date and Server go to the client, as any proxy's do. The app itself reads the forwarded
    # headers of the proxies --forwarded-allow-ips trusts (uvicorn's own would hide the peer from it). h11, the
    # parser the gateway's request checks are tested with, whatever else is installed.
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        log_config=_log_config(uvicorn.config.LOGGING_CONFIG),
        lifespan="on",
        http="h11",
        server_header=False,
        date_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=args.shutdown_timeout,
    )
    return 0


def _log_config(uvicorns: dict[str, Any]) -> dict[str, Any]:
    """uvicorn's logging configuration, its access log without query strings (OAuth codes travel there)."""
    config = copy.deepcopy(uvicorns)
    config.setdefault("filters", {})["query_dropped"] = {"()": QueryDropped}
    config["loggers"]["uvicorn.access"]["filters"] = ["query_dropped"]
    return config


def _listed(given: list[str] | None, variable: str | None) -> list[str] | None:
    """An allow-list: the flags, else the variable's comma-separated values; ``None`` when neither gives one.

    Given lists replace both loopback defaults: hosts alone check no ``Origin`` at the gateway (the
    upstream, which gets the client's, still checks it).
    """
    if given:
        return given
    if variable and variable.strip():
        return [value.strip() for value in variable.split(",") if value.strip()]
    return None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

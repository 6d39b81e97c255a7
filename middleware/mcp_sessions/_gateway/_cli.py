"""``mcp-sessions gateway``: the gateway's app served by uvicorn, configured by flags and ``MCP_SESSIONS_*``."""

from __future__ import annotations

import argparse
import copy
import grp
import ipaddress
import logging
import os
import pwd
import shlex
import shutil
import socket
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TextIO

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._config import SessionsConfig
from ._app import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_FAILURE_COOLDOWN,
    DEFAULT_FIRST_BYTE_TIMEOUT,
    DEFAULT_KEEPALIVE,
    gateway_app,
)
from ._front import QueryDropped, StartupFailed

if TYPE_CHECKING:
    from ._auth import GatewayAuth

logger = logging.getLogger("mcp_sessions.gateway")

DEFAULT_SHUTDOWN_TIMEOUT: Final = 10.0
"""On SIGTERM, uvicorn waits for every open response: an event stream never ends by itself, so after this
long the gateway cancels what still runs (each upstream request closed) and stops."""

STDIO_SHUTDOWN_TIMEOUT: Final = 4.0
"""With --stdio: then every child gets its stdin closed, SIGTERM and SIGKILL (``_stdio_child.stop_group``): all
gone within 10 s of the gateway's SIGTERM."""

EXIT_USAGE = 2
STARTUP_FAILURE: Final = 3
"""uvicorn's exit status for an app that failed to start in another way (a bug: its traceback is logged)."""
AUTH_VARIABLES: Final = {
    "jwks": "MCP_SESSIONS_AUTH_JWKS",
    "issuer": "MCP_SESSIONS_AUTH_ISSUER",
    "audience": "MCP_SESSIONS_AUTH_AUDIENCE",
    "principal_claim": "MCP_SESSIONS_AUTH_PRINCIPAL_CLAIM",
    "principal_header": "MCP_SESSIONS_AUTH_PRINCIPAL_HEADER",
    "resource": "MCP_SESSIONS_AUTH_RESOURCE",
}
"""The variable each ``--auth-*`` flag falls back to (``--auth-server``'s is ``MCP_SESSIONS_AUTH_SERVERS``)."""

DESCRIPTION: Final = (
    "Serve one MCP endpoint with data-layer sessions, forwarding every request to the upstream server "
    "(or to one of its replicas, the same one for every request of a conversation). Sessions are "
    "configured by the MCP_SESSIONS_* variables, as for the middleware."
)


def add_arguments(gateway: argparse.ArgumentParser) -> None:
    """The options of ``gateway``, in the order ``--help`` shows them: what it serves, its stdio processes
    (how many, how long; how each runs), how it listens and forwards, who is asking."""
    upstream = gateway.add_mutually_exclusive_group(required=True)
    upstream.add_argument(
        "--upstream", action="append", metavar="URL", help="the server's MCP endpoint; repeat per replica"
    )
    upstream.add_argument(
        "--stdio",
        metavar="COMMAND",
        help="a stdio server's command and arguments, split as a shell would and run without one: a process "
        "per conversation (pip install 'mcp-sessions[gateway]')",
    )
    _process_arguments(gateway)
    _containment_arguments(gateway)
    _serving_arguments(gateway)
    _auth_arguments(gateway)


def _process_arguments(gateway: argparse.ArgumentParser) -> None:
    """With ``--stdio``: which process a request reaches, how many run at once, and how long each lives."""
    gateway.add_argument(
        "--processes",
        choices=("per-conversation", "shared"),
        default="per-conversation",
        help="with --stdio: a process per conversation (default), or one shared by every client",
    )
    gateway.add_argument(
        "--process-idle",
        type=float,
        metavar="SECONDS",
        help="with --stdio: how long a conversation's process lives without a request (default: "
        "MCP_SESSIONS_IDLE_TTL, else 600)",
    )
    gateway.add_argument(
        "--max-processes",
        type=int,
        default=16,
        metavar="N",
        help="with --stdio: how many conversations' processes may run at once (default 16)",
    )
    gateway.add_argument(
        "--max-processes-per-principal",
        type=int,
        metavar="N",
        help="with --stdio: how many of them one caller (its principal, else its client address) may have (default 4)",
    )
    gateway.add_argument(
        "--sessionless",
        choices=("per-request", "shared"),
        default="per-request",
        help="with --stdio: a 2026-07-28 request that names no conversation gets a process of its own (default), or "
        "the shared one",
    )
    gateway.add_argument(
        "--warm",
        type=int,
        default=2,
        metavar="N",
        help="with --stdio: processes started ahead for new conversations and such requests (default 2)",
    )


def _containment_arguments(gateway: argparse.ArgumentParser) -> None:
    """With ``--stdio``: how each process runs and is contained (``_process_options`` checks them)."""
    gateway.add_argument(
        "--process-user",
        metavar="USER[:GROUP]",
        help="with --stdio: run every process as this user (and its group, or GROUP); the gateway must run as root",
    )
    gateway.add_argument(
        "--process-memory", type=int, metavar="MIB", help="with --stdio: each process's address space at most (MiB)"
    )
    gateway.add_argument(
        "--process-cwd",
        metavar="TEMPLATE",
        help="with --stdio: a new working directory per process, '{id}' in it the process's own id (its "
        "MCP_SESSION_ID; 'shared-' and a random part for the shared process); removed when the process ends",
    )
    gateway.add_argument(
        "--process-containment",
        choices=("auto", "subreaper"),
        default="auto",
        help="with --stdio: how a process's descendants end with it: 'auto' (default), a cgroup per process where "
        "the gateway may create one, else as a child subreaper; 'subreaper': never a cgroup",
    )


def _serving_arguments(gateway: argparse.ArgumentParser) -> None:
    """Where the gateway listens, whom it serves, how long it waits for its upstream and for its answers."""
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
        ("--connect-timeout", DEFAULT_CONNECT_TIMEOUT, "the longest wait for a connection to a replica"),
        ("--first-byte-timeout", DEFAULT_FIRST_BYTE_TIMEOUT, "the longest wait for a response's headers"),
        (
            "--failure-cooldown",
            DEFAULT_FAILURE_COOLDOWN,
            "how long a replica that cannot be connected to is out of service",
        ),
    ):
        gateway.add_argument(flag, type=float, default=default, metavar="SECONDS", help=f"{text} (default {default:g})")
    gateway.add_argument(
        "--shutdown-timeout",
        type=float,
        metavar="SECONDS",
        help=f"on SIGTERM, how long answers still streaming may go on (default {DEFAULT_SHUTDOWN_TIMEOUT:g}; "
        f"{STDIO_SHUTDOWN_TIMEOUT:g} with --stdio, whose processes then have 5 s to end)",
    )
    gateway.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    gateway.add_argument(
        "--status-port",
        type=int,
        metavar="PORT",
        help="with --stdio: serve the operator's view of the processes (GET /status) on 127.0.0.1:PORT, a port of "
        "its own on the loopback address only (default: not served)",
    )


def _auth_arguments(gateway: argparse.ArgumentParser) -> None:
    """Who is asking (``_auth``), and what of it a stdio process gets (``--process-env``)."""
    users = gateway.add_argument_group("who is asking (each also from its MCP_SESSIONS_AUTH_* variable)")
    for flag, text in (
        ("--auth-jwks", "the authorization server's JWKS: bearer tokens are JWTs signed by one of its keys"),
        ("--auth-issuer", "the tokens' issuer (iss)"),
        ("--auth-audience", "the tokens' audience (aud): the gateway's public MCP URL"),
        ("--auth-principal-claim", "the claim that names the user (default sub)"),
        ("--auth-principal-header", "a header that names the user, set by an auth proxy --forwarded-allow-ips trusts"),
        ("--auth-resource", "the protected resource the metadata names (default: the audience)"),
    ):
        users.add_argument(flag, metavar=flag.removeprefix("--auth-").upper(), help=text)
    users.add_argument(
        "--auth-server", action="append", metavar="URL", help="an authorization server (default: the issuer); repeat"
    )
    users.add_argument(
        "--process-env",
        action="append",
        default=[],
        metavar="NAME=SOURCE",
        help="with --stdio: NAME in each conversation's process from claim:CLAIM (of its token) or header:NAME (of "
        "the request that starts it); repeat",
    )


def run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO, environ: Mapping[str, str]) -> int:
    """Build the gateway from ``args`` and the environment, and serve it until stopped."""
    try:
        import uvicorn  # noqa: F401 - here, so that without it the command says which extra to install

        config = SessionsConfig.from_env(environ=environ)
        hosts = _listed(args.allowed_host, environ.get("MCP_SESSIONS_ALLOWED_HOSTS"))
        origins = _listed(args.allowed_origin, environ.get("MCP_SESSIONS_ALLOWED_ORIGINS"))
        if hosts is None and origins is None:  # the SDK's rule: localhost names on a loopback address, else none
            hosts = origins = None if _loopback(args.host) else []
        else:
            hosts, origins = hosts or [], origins or []
        forwarded = environ.get("FORWARDED_ALLOW_IPS") if args.forwarded_allow_ips is None else args.forwarded_allow_ips
        auth = _auth(args, environ)
        if args.process_env and args.stdio is None:
            raise ValueError("--process-env sets a variable in --stdio processes; an --upstream has none")
        if args.status_port is not None and (args.stdio is None or args.status_port == args.port):
            raise ValueError("--status-port serves --stdio processes' status, on a port other than --port")
        if args.stdio is not None:
            command = shlex.split(args.stdio)
            options = _process_options(args, command)
            app: Any = _stdio_app(
                args, command, options, config, environ, hosts=hosts, origins=origins, forwarded=forwarded, auth=auth
            )
        else:
            app = gateway_app(
                args.upstream,
                config=config,
                allowed_hosts=hosts,
                allowed_origins=origins,
                keepalive=args.keepalive or None,
                connect_timeout=args.connect_timeout,
                first_byte_timeout=args.first_byte_timeout,
                failure_cooldown=args.failure_cooldown,
                forwarded_allow_ips=forwarded,
                auth=auth,
            )
    except ModuleNotFoundError as exc:
        print(f"mcp-sessions gateway: {exc.name} is missing: pip install 'mcp-sessions[gateway]'", file=stderr)
        return EXIT_USAGE
    except (ImportError, ValueError, TypeError, RuntimeError) as exc:
        print(f"mcp-sessions gateway: {exc}", file=stderr)
        return EXIT_USAGE
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per forwarded request, its query string in it
    logging.getLogger("mcp").setLevel(logging.WARNING)  # with --stdio: the SDK's lines name transport session ids
    # and so do its session manager's warnings and errors (an id sent with another user's credential, a crash): a
    # bearer value in no log line; the gateway logs each conversation's end itself.
    logging.getLogger("mcp.server.streamable_http_manager").setLevel(logging.CRITICAL)
    served = f"stdio {args.stdio}" if args.stdio is not None else ", ".join(args.upstream)
    logger.info("mcp-sessions gateway: %s on http://%s:%d", served, args.host, args.port)
    if args.stdio is not None:
        logger.info("mcp-sessions gateway: each process contained by %s", options.containment)
    return _serve(app, args, stderr)


def _serve(app: Any, args: argparse.Namespace, stderr: TextIO) -> int:
    """Serve ``app`` with uvicorn until stopped (and the operator's status on its own loopback socket); a failure
    to start (``StartupFailed``) is one line on ``stderr`` and exit status 2."""
    import uvicorn

    shutdown_timeout = args.shutdown_timeout
    if shutdown_timeout is None:
        shutdown_timeout = DEFAULT_SHUTDOWN_TIMEOUT if args.stdio is None else STDIO_SHUTDOWN_TIMEOUT
    # The upstream's own Date and Server go to the client, as any proxy's do. The app itself reads the forwarded
    # headers of the proxies --forwarded-allow-ips trusts (uvicorn's own would hide the peer from it). h11, the
    # parser the gateway's request checks are tested with, whatever else is installed. Each request in a context of
    # its own: else a request that arrives on a keep-alive connection before the last answer's end is started in the
    # previous request's context (python/cpython#140947), with its conversation (current_conversation) in it.
    started = _Started(app)
    listening = uvicorn.Config(
        started,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        log_config=_log_config(uvicorn.config.LOGGING_CONFIG, started),
        lifespan="on",
        http="h11",
        server_header=False,
        date_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=shutdown_timeout,
        reset_contextvars=True,
    )
    server = uvicorn.Server(listening)
    sockets = None
    if args.status_port is not None:  # the operator's port: loopback only, whatever --host is
        try:
            status = socket.create_server(("127.0.0.1", args.status_port))
        except OSError as exc:
            print(f"mcp-sessions gateway: --status-port {args.status_port}: {exc.strerror}", file=stderr)
            return EXIT_USAGE
        sockets = [listening.bind_socket(), status]
        logger.info("mcp-sessions gateway: the processes' status on http://127.0.0.1:%d/status", args.status_port)
    try:
        server.run(sockets=sockets)
    except SystemExit:  # uvicorn's, for an app that did not start
        if started.failure is None:
            raise
    if started.failure is not None:
        print(f"mcp-sessions gateway: {started.failure}", file=stderr)
        return EXIT_USAGE
    return 0 if server.started else STARTUP_FAILURE


def _stdio_app(
    args: argparse.Namespace,
    command: Sequence[str],
    options: Any,
    config: SessionsConfig,
    environ: Mapping[str, str],
    *,
    hosts: list[str] | None,
    origins: list[str] | None,
    forwarded: str | None,
    auth: GatewayAuth | None,
) -> Any:
    """The ``--stdio`` gateway's app (it needs the ``mcp`` SDK): ``command``'s processes as the flags say, run as
    ``options`` says; the allow-lists, the proxies in front and ``auth`` as for an ``--upstream``."""
    from ._stdio import stdio_gateway_app

    return stdio_gateway_app(
        command,
        config=config,
        processes=args.processes,
        process_idle=args.process_idle,
        max_processes=args.max_processes,
        max_processes_per_principal=args.max_processes_per_principal,
        sessionless=args.sessionless,
        warm=args.warm,
        allowed_hosts=hosts,
        allowed_origins=origins,
        forwarded_allow_ips=forwarded,
        environ=environ,
        process_options=options,
        auth=auth,
        process_env=args.process_env,
        status_port=args.status_port,
    )


def _process_options(args: argparse.Namespace, command: Sequence[str]) -> Any:
    """How the stdio processes run (``--process-*``), checked; and the gateway made non-dumpable (``contain``)."""
    from ._stdio_child import ProcessOptions, contain

    if command and shutil.which(command[0]) is None:
        raise ValueError(f"--stdio: {command[0]}: no such command (or not executable)")
    user = group = None
    if args.process_user is not None:
        if os.geteuid() != 0:
            raise ValueError("--process-user needs the gateway to run as root (it changes each process's user)")
        name, _, group_name = args.process_user.partition(":")
        try:
            entry = pwd.getpwnam(name)
            user, group = entry.pw_uid, grp.getgrnam(group_name).gr_gid if group_name else entry.pw_gid
        except KeyError:
            raise ValueError(f"--process-user: no such user or group: {args.process_user}") from None
    if args.process_memory is not None and args.process_memory < 1:
        raise ValueError("--process-memory takes a positive number of MiB")
    if args.process_cwd is not None and "{id}" not in args.process_cwd:
        raise ValueError("--process-cwd needs '{id}' in it: each conversation gets a directory of its own")
    cgroup, subreaper = contain(cgroups=args.process_containment == "auto")
    memory = None if args.process_memory is None else args.process_memory << 20
    return ProcessOptions(user, group, memory, args.process_cwd, cgroup, subreaper)


def _auth(args: argparse.Namespace, environ: Mapping[str, str]) -> GatewayAuth | None:
    """The gateway's authentication from the --auth-* flags, else their variables; ``None`` without any."""
    given = {
        name: value
        for name, variable in AUTH_VARIABLES.items()
        if (value := getattr(args, f"auth_{name}") or environ.get(variable, "").strip())
    }
    servers = _listed(args.auth_server, environ.get("MCP_SESSIONS_AUTH_SERVERS")) or []
    if not given and not servers:
        return None
    from ._auth import GatewayAuth

    jwks = given.pop("jwks", None)
    return GatewayAuth(jwks_url=jwks, authorization_servers=servers, **given)


def _log_config(uvicorns: dict[str, Any], started: _Started) -> dict[str, Any]:
    """uvicorn's logging configuration, its access log without query strings (OAuth codes travel there), and
    without its own line for a failed start the gateway says in one line itself (``started``)."""
    config = copy.deepcopy(uvicorns)
    config.setdefault("filters", {})["query_dropped"] = {"()": QueryDropped}
    config["filters"]["said_once"] = {"()": lambda: started.said_once}
    config["loggers"]["uvicorn.access"]["filters"] = ["query_dropped"]
    config["loggers"]["uvicorn.error"]["filters"] = ["said_once"]
    return config


class _Started:
    """The gateway's app, whose failure to start (``StartupFailed``: its first process's) is kept as ``failure``,
    for the gateway to say in one line, instead of uvicorn's traceback of the lifespan."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.failure: BaseException | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            return await self.app(scope, receive, send)
        held: list[Message] = []

        async def sending(message: Message) -> None:
            if message["type"] == "lifespan.startup.failed":
                held.append(message)  # its text is a traceback: the exception says it in one line
            else:
                await send(message)

        try:
            await self.app(scope, receive, sending)
        except BaseException as exc:
            self.failure = _startup_failure(exc)
            if self.failure is None:
                raise
        finally:
            if held:
                await send({**held[0], "message": "" if self.failure is not None else held[0].get("message", "")})

    def said_once(self, record: logging.LogRecord) -> bool:
        """A logging filter: uvicorn's "Application startup failed" dropped when the gateway says why itself."""
        return self.failure is None or not record.getMessage().startswith("Application startup failed")


def _startup_failure(exc: BaseException) -> BaseException | None:
    """The ``StartupFailed`` in ``exc`` (raised in a task group, it comes in exception groups), else ``None``."""
    if isinstance(exc, StartupFailed):
        return exc
    inner = exc.exceptions if isinstance(exc, BaseExceptionGroup) else [exc.__cause__]
    for each in inner:
        if each is not None and (found := _startup_failure(each)) is not None:
            return found
    return None


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

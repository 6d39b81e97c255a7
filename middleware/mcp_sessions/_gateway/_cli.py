"""``mcp-sessions gateway``: the gateway's app served by uvicorn, configured by flags and ``MCP_SESSIONS_*``."""

from __future__ import annotations

import argparse
import gc
import ipaddress
import logging
import logging.config
import os
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Final, TextIO
from urllib.parse import urlsplit

from .._config import SessionsConfig
from ..stores import MemoryStore
from ._config import (
    DEFAULT_SHUTDOWN_TIMEOUT,
    STDIO_SHUTDOWN_TIMEOUT,
    Forwarding,
    GatewayConfig,
    Listening,
    Served,
    ServerFlags,
    StdioProcesses,
    default_max_processes,
)
from ._front import StartupFailed
from ._node import node_without_proxy
from ._options import add_arguments as add_arguments  # the command's, as every command module's (_cli/__init__)
from ._options import environed
from ._process_flags import process_options, seal_gateway
from ._serving import EXIT_USAGE, StartSignals, listener, private_directory
from .http._app import forwarding_app
from .sealed._grants import STATE, state_directory
from .sealed._kernel import RUNTIME, SandboxError
from .sealed._network import NO_ROUTE, AllowedHost, NetworkError, routed

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from ._servers import Route, Servers
    from .auth._client import ClientAuth
    from .auth._exchange import TokenExchange, UpstreamToken
    from .auth._oauth import IdTokens, IssuerGrants, Login
    from .auth._tools import ToolPolicy
    from .auth._users import GatewayAuth
    from .sealed._network import EgressPolicy
    from .sealed._sandbox import Sandbox, SandboxPolicy
    from .stdio._first import Ahead, FirstProcess

logger = logging.getLogger("mcp_sessions.gateway")

FORGETS: Final = (
    "sessions, their data and users' sign-ins kept in this process's memory (MCP_SESSIONS_STORE=memory://): a "
    "restart ends every session and signs every user out"
)

DESCRIPTION: Final = (
    "Serve one MCP endpoint with data-layer sessions, forwarding every request to the upstream "
    "server (or to one of its replicas, the same one for every request of a conversation). "
    "Sessions are configured by the MCP_SESSIONS_* variables, as for the middleware."
)


def run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO, environ: Mapping[str, str]) -> int:
    """Build the gateway from ``args`` and the environment, and serve it until stopped.

    The garbage collector is off while the gateway is built: what its start allocates (the ``mcp`` SDK's import
    alone, about 90,000 objects) lives as long as the gateway, and the 220 collections that found nothing to free
    in it took a tenth of the start's CPU. ``_lifecycle.Gateway`` freezes what the start made (never scanned again)
    and turns the collector back on before the gateway listens; a start that ends before then turns it back on
    here. A SIGTERM or Ctrl-C from here on ends the start (``StartSignals``), as one while its first process starts
    does."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        with StartSignals() as start:
            return _run(args, stderr, environ, start)
    finally:
        if collecting:
            gc.enable()


def _run(args: argparse.Namespace, stderr: TextIO, environ: Mapping[str, str], start: StartSignals) -> int:
    if args.config is not None and (args.upstream is not None or args.stdio is not None):
        print("mcp-sessions gateway: --config names the servers: not with --upstream or --stdio", file=stderr)
        return EXIT_USAGE
    if args.upstream is None and args.stdio is None and args.config is None:
        print("mcp-sessions gateway: one of --upstream URL, --stdio COMMAND or --config FILE is required", file=stderr)
        return EXIT_USAGE
    try:
        # here, so that without uvicorn the command says which extra to install
        from ._lifecycle import serve

        config = configured(args, environ) if args.config is None else configured_file(args, environ)
        app, sandbox = _ahead(config) or _app(config)
    except ModuleNotFoundError as exc:
        print(f"mcp-sessions gateway: {_missing(exc)}", file=stderr)
        return EXIT_USAGE
    except (ImportError, ValueError, TypeError, RuntimeError, NetworkError, SandboxError, OSError) as exc:
        print(f"mcp-sessions gateway: {exc}", file=stderr)  # an OSError's path, for what no step names itself
        return EXIT_USAGE
    running = _running(app, sandbox)
    try:
        listening = config.listening
        bound = listener(listening.host, listening.port, listening.handover, environ)  # before anything starts
        for each in config.each:
            if each.sandbox is not None:
                seal_gateway(each.sandbox.containment)
        _install(running())
    except (ImportError, ValueError, TypeError, RuntimeError, NetworkError, SandboxError, OSError) as exc:
        for made in running():  # what each holds: its proxy's certificates and socket, made with it
            made.close()
        print(f"mcp-sessions gateway: {exc}", file=stderr)
        return EXIT_USAGE
    from ._logs import log_config

    logging.config.dictConfig(log_config(listening.log_format, listening.log_level))
    routes = _routes(app) if config.servers else ()  # else not imported: sign-ins, on the way to the first process
    served = [(s.name, s.path, s.config, route.sandbox) for s, route in zip(config.servers, routes, strict=True)]
    for name, path, each, running_in in served or [("", "", config, sandbox)]:
        _said(each, running_in, f"http://{listening.host}:{listening.port}{path}", f"{name}: " if name else "")
    reload = None
    if config.servers:
        from ._servers import Servers

        assert isinstance(app, Servers)
        reload = Reload(args, environ, config, app)

    def release() -> None:
        for each in running():
            each.close()

    return serve(app, bound, config, stderr, reload, release, start)


def _routes(app: ASGIApp | Ahead) -> tuple[Route, ...]:
    """The servers ``app`` serves now, with ``--config`` (``Servers``' routes); none without."""
    from ._servers import Servers

    return app.routes if isinstance(app, Servers) else ()


def _running(app: ASGIApp | Ahead, sandbox: Sandbox | None) -> Callable[[], list[Sandbox]]:
    """The sandboxes ``app``'s processes run in, as they are when asked: every server's with ``--config`` (those
    a reload kept, replaced or added), else ``sandbox``. What the gateway installs before it serves and closes as
    it stops."""
    if sandbox is not None:
        return lambda: [sandbox]
    return lambda: [route.sandbox for route in _routes(app) if route.sandbox is not None]


def _install(sandboxes: list[Sandbox]) -> None:
    """Every server's egress table, before any process starts; one refused, those installed before it are removed,
    so that a gateway that does not start leaves none of its tables."""
    installed = []
    try:
        for each in sandboxes:
            each.install()
            installed.append(each)
    except BaseException:
        for each in installed:
            if each.egress is not None:
                each.egress.remove()
        raise


def _said(config: GatewayConfig, sandbox: Sandbox | None, url: str, server: str) -> None:
    """The startup lines of a server (``server``: its name, with ``--config``): what it serves at ``url``, where its
    sessions' store keeps them, their data and users' grants, and how each of its processes runs (``sandbox``,
    what runs ``config``'s policy)."""
    serves = config.serves
    served = ", ".join(serves.upstreams) if isinstance(serves, Forwarding) else f"stdio {shlex.join(serves.command)}"
    logger.info("mcp-sessions gateway: %s%s on %s", server, served, url)
    store = config.sessions.store
    if isinstance(store, MemoryStore):
        logger.warning("mcp-sessions gateway: %s%s", server, FORGETS)
    else:  # its repr: where, never a password
        logger.info("mcp-sessions gateway: %ssessions, their data and users' sign-ins kept in %r", server, store)
    if sandbox is not None:
        options = sandbox.policy
        logger.info("mcp-sessions gateway: %seach process: %s", server, sandbox.said)
        if sandbox.egress is not None and options.containment in ("bwrap", "unshare") and not routed():
            logger.warning("mcp-sessions gateway: %s", NO_ROUTE)
        if options.profile:
            logger.info("mcp-sessions gateway: %seach process's seccomp profile: %s", server, options.profile)
        stdio = serves if isinstance(serves, StdioProcesses) else None
        if sandbox.edge is not None and stdio and (old := node_without_proxy(stdio.command, stdio.environ)):
            logger.warning("mcp-sessions gateway: %s%s", server, old)  # its masks reach no fetch of its


def configured(args: argparse.Namespace, environ: Mapping[str, str], share: int = 1) -> GatewayConfig:
    """The gateway's configuration, whole, from its flags (``args``) and ``environ``, checked: a ``ValueError``
    (or ``NetworkError``, ``ImportError``) says in one line what to change. With ``--stdio``, the containment is
    tried and the egress rules made here (installed by :func:`run`, before any process starts); ``share``: the
    stdio servers of a ``--config`` file, among which the host's half is shared (``_process_flags``)."""
    args = environed(args, environ)
    state = state_of(args, environ)
    sessions = _sessions(environ, state)
    hosts = _listed(args.allowed_host)
    origins = _listed(args.allowed_origin)
    if hosts is None and origins is None:  # the SDK's rule: localhost names on a loopback address, else none
        hosts = origins = None if _loopback(args.host) else ()
    else:
        hosts = hosts or ()
        origins = origins or ()
    forwarded = args.forwarded_allow_ips
    auth = _auth(args)
    tools = _tools(args, auth)
    _stdio_only(args)
    sign_in = _sign_in_options(args, environ)
    upstream_token, exchange = _upstream_token(args, environ, auth, sessions, sign_in)
    id_tokens = process_grants = None
    serves: Forwarding | StdioProcesses
    if args.stdio is not None:
        command = shlex.split(args.stdio)
        # systemd's RuntimeDirectory= (the first where it names several)
        runtime = args.runtime_directory or environ.get("RUNTIME_DIRECTORY", "").partition(":")[0] or RUNTIME
        sandbox = process_options(args, command, auth, runtime, state, share)
        sandbox = _masked(args, sandbox, _egress(args, sandbox, forwarded))  # the masked credentials, and their rules
        if exchange is not None and exchange.id_jag is not None:  # NAME=id-jag:ISSUER's subject
            id_tokens = _id_tokens(sign_in, sessions)
        process_grants = _process_grants(args.process_env, sign_in, auth, sessions)
        serves = StdioProcesses(
            command=tuple(command),
            processes=args.processes,
            sessionless=args.sessionless,
            process_idle=args.process_idle,
            max_processes=args.max_processes,
            max_processes_per_principal=args.max_processes_per_principal,
            warm=args.warm,
            pass_env=tuple(args.pass_env),
            process_env=tuple(args.process_env),
            exchange_scope=args.exchange_scope,
            sandbox=sandbox,
            state=args.conversation_state,
            environ=environ,
        )
    else:
        keepalive = args.keepalive or None
        timeouts = (args.connect_timeout, args.first_byte_timeout, args.failure_cooldown)
        serves = Forwarding(tuple(args.upstream), keepalive, *timeouts, upstream_token=upstream_token)
    return GatewayConfig(
        serves=serves,
        listening=_listening(args),
        sessions=sessions,
        allowed_hosts=hosts,
        allowed_origins=origins,
        forwarded_allow_ips=forwarded,
        auth=auth,
        exchange=exchange,
        id_tokens=id_tokens,
        process_grants=process_grants,
        tools=tools,
    )


def state_of(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    """The gateway's state directory, as systemd's ``StateDirectory=`` gives a service one: ``--process-state``,
    else systemd's ``STATE_DIRECTORY`` (the first where it names several), else :data:`STATE` as root, else the
    user's (platformdirs': ``$XDG_STATE_HOME/mcp-sessions`` on Linux), as ``connect`` keeps its own."""
    if state := args.process_state or environ.get("STATE_DIRECTORY", "").partition(":")[0]:
        return str(state)
    if os.geteuid() == 0:
        return STATE
    import platformdirs

    return platformdirs.user_state_dir("mcp-sessions")


def _sessions(environ: Mapping[str, str], state: str) -> SessionsConfig:
    """The sessions' configuration (``MCP_SESSIONS_*``), their store the one ``MCP_SESSIONS_STORE`` names, else an
    SQLite file in the state directory (``state``'s ``store/``, mode 0700, the file 0600), which every gateway
    given the same directory shares (SQLite's locks, in WAL mode): a restart ends no session and signs no user out.
    A directory the gateway's user cannot make or write is refused in one line naming ``--process-state``."""
    sessions = SessionsConfig.from_env(environ=environ)
    if sessions.owns_store:  # the environment named it
        return sessions
    from ..stores import SQLiteStore

    directory = state_directory(state, "store")
    try:
        store = SQLiteStore(os.path.join(directory, "sessions.db"))
    except (OSError, ValueError) as exc:  # a file it may not write, a full disk, a file that is no database
        raise ValueError(
            f"--process-state {state}: {exc}: give a directory the gateway's user may write, by --process-state DIR"
        ) from None
    return sessions.replace(store=store, owns_store=True)


def configured_file(args: argparse.Namespace, environ: Mapping[str, str]) -> GatewayConfig:
    """The gateway's configuration from ``--config``'s file (``_file``), each server's built by
    :func:`configured` from its flags, as one server's is from the command line's: a ``ValueError`` names the
    server. The first's is the gateway's, its drain long enough for a stdio server's calls where there is one."""
    from ._file import servers_of

    # the gateway command's own arguments (main's), whose gateway flags win over the file's
    found = servers_of(args.config, getattr(args, "command_line", ()))
    stdio = [server for server in found if server.flags.stdio is not None]
    status = (found[0].flags.status_port, found[0].flags.status_socket)
    _operator_has_a_view(status, found, environ)
    drain = found[0].flags.shutdown_timeout
    if drain is None:  # one drain, long enough for a stdio server's calls where there is one
        drain = STDIO_SHUTDOWN_TIMEOUT if stdio else DEFAULT_SHUTDOWN_TIMEOUT
    servers = [_served(server, len(stdio), drain, environ) for server in found]
    listening = replace(servers[0].config.listening, status_port=status[0], status_socket=status[1])
    return replace(servers[0].config, listening=listening, servers=tuple(servers))


def _served(server: ServerFlags, stdio: int, drain: float, environ: Mapping[str, str]) -> Served:
    """One server of the file, built as the command line's would be: what the host has (its half, and
    ``max-processes``' default) shared by the file's ``stdio`` servers, unless the server sets its own; the file's
    one drain."""
    flags = {**vars(server.flags), "shutdown_timeout": drain}
    if server.flags.stdio is None and not _signs_in(environed(server.flags, environ)):
        flags.update(status_port=None, status_socket=None)  # the status is the stdio servers' and the signing-in's
    if "max-processes" not in server.table and stdio:  # the processes its default sizes it for
        flags["max_processes"] = default_max_processes(servers=stdio)
    # its own variables, literal, beside the environment's allow-list
    own = {**environ, **server.env} if server.env else environ
    if server.env:
        flags["pass_env"] = [*server.flags.pass_env, *server.env]
    try:
        config = configured(argparse.Namespace(**flags), own, share=stdio)
    except (ValueError, TypeError, RuntimeError, NetworkError, SandboxError) as exc:
        raise ValueError(f"{server.where}: {exc}") from None
    return Served(name=server.name, path=server.path, config=config, flags=server)


def _listening(args: argparse.Namespace) -> Listening:
    """How the gateway serves, from its flags: the drain's default is the mode's."""
    shutdown_timeout = args.shutdown_timeout
    if shutdown_timeout is None:
        shutdown_timeout = DEFAULT_SHUTDOWN_TIMEOUT if args.stdio is None else STDIO_SHUTDOWN_TIMEOUT
    return Listening(
        args.host,
        args.port,
        args.log_level,
        shutdown_timeout,
        args.status_port,
        args.status_socket,
        args.log_format,
        args.handover,
    )


def _app(config: GatewayConfig) -> tuple[ASGIApp, Sandbox | None]:
    """The app ``config`` serves: a proxy to its upstream (``forwarding_app``), or its stdio server's processes
    (``stdio_gateway_app``, which needs the ``mcp`` SDK); closing the token exchange's client as it stops. And the
    sandbox its processes run in, built here from its policy (``_sandbox.Sandbox``), which the gateway installs
    before it serves and closes as it stops; with ``--config``, each route's (``Servers``' routes)."""
    if config.servers:
        from ._servers import Servers

        routes: list[Route] = []
        try:
            for served in config.servers:
                routes.append(_route(served))
        except BaseException:
            _closed(routes)
            raise
        return Servers(routes), None
    if not isinstance(config.serves, StdioProcesses):
        return _exchanging(config, forwarding_app(config)), None
    from .sealed._sandbox import Sandbox

    sandbox = None if config.sandbox is None else Sandbox(config.sandbox)
    try:
        return _stdio_app(config, sandbox, None), sandbox
    except BaseException:
        if sandbox is not None:
            sandbox.close()
        raise


def _ahead(config: GatewayConfig) -> tuple[Ahead, Sandbox] | None:
    """A ``--stdio`` gateway's app, to be built as it starts, its shared process started beside the import of the
    ``mcp`` SDK (``_first.Ahead``), and the sandbox its processes run in; None where that process is not the
    gateway's first, or is someone's (``_first.starts_ahead``): :func:`_app` builds it now."""
    serves = config.serves
    if config.servers or not isinstance(serves, StdioProcesses) or serves.sandbox is None:
        return None
    from .sealed._sandbox import Sandbox, environment
    from .stdio._first import Ahead, FirstProcess, starts_ahead

    if not starts_ahead(serves, serves.sandbox):
        return None
    sandbox = Sandbox(serves.sandbox)
    first = FirstProcess(sandbox, serves.command, environment(serves.environ, serves.pass_env))
    return Ahead(partial(_built, config, sandbox, first), first), sandbox


def _stdio_app(config: GatewayConfig, sandbox: Sandbox | None, first: FirstProcess | None) -> ASGIApp:
    """A stdio server's app (``stdio_gateway_app``: it imports the ``mcp`` SDK), its processes in ``sandbox``."""
    from .stdio._server import stdio_gateway_app

    return _exchanging(config, stdio_gateway_app(config, sandbox=sandbox, first=first))


def _built(config: GatewayConfig, sandbox: Sandbox, first: FirstProcess) -> ASGIApp:
    """:func:`_stdio_app` built as the gateway starts (``Ahead``'s ``build``): what refuses it is the start's
    failure, said in one line (``StartupFailed``), as it is where :func:`_app` builds it before the start."""
    try:
        return _stdio_app(config, sandbox, first)
    except ModuleNotFoundError as exc:
        raise StartupFailed(_missing(exc)) from None
    except (ImportError, ValueError, TypeError, RuntimeError, NetworkError, SandboxError, OSError) as exc:
        raise StartupFailed(str(exc)) from None


def _exchanging(config: GatewayConfig, app: ASGIApp) -> ASGIApp:
    """``app``, the token exchange's client closed as it stops, in either mode."""
    return app if config.exchange is None else config.exchange.wrap(app)


def _missing(exc: ModuleNotFoundError) -> str:
    """What a gateway that cannot import ``exc.name`` says: which extra to install."""
    return f"{exc.name} is missing: pip install 'mcp-sessions[gateway]'"


def _route(served: Served) -> Route:
    """A server of the file at its path: its app, which serves its endpoint there (its sessions are minted at and
    bound to it, as its clients reach it, whatever the audience: the servers share the keys and the audience; an
    upstream gets its own path), and the sandbox its processes run in."""
    from ._servers import Route

    each = served.config
    serves = replace(each.serves, path=served.path)
    sessions = each.sessions.replace(binds_endpoint=True)
    try:
        app, sandbox = _app(replace(each, serves=serves, sessions=sessions, servers=()))
    except (ValueError, NetworkError, SandboxError) as exc:  # its sandbox's files and directories: named as its flags
        raise ValueError(f"{served.flags.where if served.flags else served.name}: {exc}") from None
    return Route(served, app, sandbox)


def _closed(routes: Sequence[Route]) -> None:
    """What the sandboxes of ``routes``, built but never served, hold: their proxies' certificates."""
    for route in routes:
        if route.sandbox is not None:
            route.sandbox.close()


class Reload:
    """What a SIGHUP does to a ``--config`` gateway: the file read again, and its servers served in place of those
    that run (``Servers.replace``): one whose table is as it was goes on untouched (its processes, its uids, its
    conversations), one whose table changed is replaced, one removed is drained and stopped, one added started. What
    is the gateway's cannot change so: a change in its ``[gateway]`` table, or a file the start would refuse, is
    refused in one line naming its key or line, and nothing changes."""

    def __init__(self, args: argparse.Namespace, environ: Mapping[str, str], config: GatewayConfig, app: Servers):
        self.args = args
        self.environ = environ
        self.config = config
        self.app = app

    async def __call__(self) -> GatewayConfig | None:
        """The reload: the gateway's configuration now, or ``None`` where it was refused (nothing changed). What
        blocks (the file read, each new server's sandbox tried, its names looked up, its helpers run, its tables
        installed) runs on a worker thread, as at startup before the loop: the others' requests go on meanwhile."""
        import anyio

        try:
            served, routes = await anyio.to_thread.run_sync(self._built)
        except (ValueError, TypeError, RuntimeError, NetworkError, SandboxError) as exc:
            logger.error("mcp-sessions gateway: reload refused, nothing changed: %s", exc)
            return None
        running = {each.name: each for each in self.config.servers}
        failed = await self.app.replace(routes, self.config.listening.shutdown_timeout, _released, _readied)
        serving = tuple(each for each in served if each.name not in failed)
        self.config = replace(self.config, servers=serving)
        listening = self.config.listening
        sandboxes = {id(route.served): route.sandbox for route in routes}
        for each in serving:
            if each is not running.get(each.name):
                url = f"http://{listening.host}:{listening.port}{each.path}"
                _said(each.config, sandboxes[id(each)], url, f"{each.name}: ")
        names = {each.name for each in serving}
        added = [each.name for each in serving if each.name not in running]
        changed = [each.name for each in serving if each.name in running and each is not running[each.name]]
        removed = [name for name in running if name not in names]
        logger.info(
            "mcp-sessions gateway: reloaded %s: added %s; changed %s; removed %s; the others went on",
            self.args.config,
            ", ".join(added) or "none",
            ", ".join(changed) or "none",
            ", ".join(removed) or "none",
        )
        return self.config

    def _built(self) -> tuple[list[Served], list[Route]]:
        """The servers the file names now (:meth:`_read`), and the routes to serve: each that goes on as it serves,
        each other built here (its sandbox made; closed again where one cannot be). Blocking."""
        served = self._read()
        now = {id(route.served): route for route in self.app.routes}
        routes: list[Route] = []
        built: list[Route] = []
        try:
            for each in served:
                if (route := now.get(id(each))) is None:
                    route = _route(each)
                    built.append(route)
                routes.append(route)
        except BaseException:
            _closed(built)
            raise
        return served, routes

    def _read(self) -> list[Served]:
        """The servers the file names now: each whose table is as it was, the one that runs; each other built as at
        startup (a ``ValueError`` names its key or line); an added stdio server takes its uids from the gateway's one
        pool (``_file``)."""
        from ._file import servers_of

        running = {each.name: each for each in self.config.servers}
        held = [each.flags for each in running.values() if each.flags is not None]
        found = servers_of(self.args.config, getattr(self.args, "command_line", ()))
        was = held[0].gateway
        now = found[0].gateway
        if changed := sorted(key for key in {*was, *now} if was.get(key) != now.get(key)):
            raise ValueError(
                f"gateway.{changed[0]}: the gateway's own key, which a reload does not change (a restart does)"
            )
        stdio = [server for server in found if server.flags.stdio is not None]
        status = self.config.listening
        _operator_has_a_view((status.status_port, status.status_socket), found, self.environ)
        served: list[Served] = []
        for server in found:
            old = running.get(server.name)
            if old is not None and old.flags is not None and old.flags.table == server.table:
                served.append(old)  # its route, its sandbox among it, goes on as it serves
            else:
                served.append(_served(server, len(stdio), status.shutdown_timeout, self.environ))
        return served


def _readied(route: Route) -> None:
    """A server a reload starts, made ready as at startup: its containment checked, its egress table installed."""
    if route.served.config.sandbox is not None:
        seal_gateway(route.served.config.sandbox.containment)
    if route.sandbox is not None:
        route.sandbox.install()


def _released(route: Route) -> None:
    """What a server holds at run time, once its processes have ended: what its sandbox holds (its egress table, its
    control groups, its masked credentials' proxy)."""
    if route.sandbox is not None:
        route.sandbox.close()


def _egress(args: argparse.Namespace, sandbox: SandboxPolicy, forwarded: str | None) -> EgressPolicy | None:
    """``_network.egress_rules`` for ``sandbox``'s processes (``None`` unless its network is ``egress``); and the
    status socket's directory checked."""
    from ._front import trusted_proxies
    from .sealed._network import egress_rules

    if args.status_socket is not None:
        private_directory(args.status_socket)
    uids = None if sandbox.uids is None else (sandbox.uids.first, sandbox.uids.last)
    trusted = trusted_proxies(forwarded)
    return egress_rules(
        sandbox.network,
        uids or sandbox.user,
        args.process_allow_net,
        trusted,
        args.port,
        args.process_allow_host,
        args.process_allow_private_host,
    )


def _masked(args: argparse.Namespace, sandbox: SandboxPolicy, egress: EgressPolicy | None) -> SandboxPolicy:
    """``sandbox`` with its egress rules (``egress``) and ``--process-env-mask``'s credentials, checked: the rules
    refuse the masked hosts' direct connections, and grant the gateway's proxy, which the app's sandbox makes as it
    starts (``_sandbox.Sandbox``: its authority, ``--process-env-mask-ca``'s files or its own, and its port)."""
    if not args.process_env_mask:
        if args.process_env_mask_ca:
            raise ValueError("--process-env-mask-ca signs the certificates of --process-env-mask's hosts: give both")
        return replace(sandbox, egress=egress)
    from .sealed._masks import Mask, masked_hosts

    env = {spec.partition("=")[0] for spec in args.process_env}
    masks = tuple(Mask.parsed(given, env) for given in args.process_env_mask)
    if egress is None:
        raise ValueError(
            "--process-env-mask needs --process-network egress (with --process-uids): the rules that send the "
            f"process to the gateway's proxy, not {sandbox.network}"
        )
    hosts = tuple(AllowedHost(host, port) for host, port in sorted(masked_hosts(masks)))
    return replace(sandbox, egress=replace(egress, masked=hosts), masks=masks, masks_ca=args.process_env_mask_ca)


def _stdio_only(args: argparse.Namespace) -> None:
    """What only a ``--stdio`` gateway takes, refused for an ``--upstream``'s, which has no processes (but for the
    status listener of one that signs its users in, whose grants the operator lists there)."""
    if args.process_env and args.stdio is None:
        raise ValueError("--process-env sets a variable in --stdio processes; an --upstream has none")
    if args.conversation_state != StdioProcesses.state and args.stdio is None:
        raise ValueError("--conversation-state says where a --stdio server keeps it; an --upstream has no processes")
    if args.process_mount and args.stdio is None:
        raise ValueError("--process-mount grants a directory to --stdio processes; an --upstream has none")
    # an --upstream's users' grants (--upstream-token oauth) are the operator's to list too, on the same listener
    signs_in = _signs_in(args)
    if args.status_port is not None and ((args.stdio is None and not signs_in) or args.status_port == args.port):
        raise ValueError("--status-port serves --stdio processes' status, on a port other than --port")
    network = args.process_network or args.process_allow_net or args.process_allow_host
    network = network or args.process_allow_private_host
    if args.stdio is None and ((args.status_socket and not signs_in) or network):
        raise ValueError(
            "--status-socket, --process-network and its grants are for --stdio processes; an --upstream has none"
        )


def _signs_in(args: argparse.Namespace) -> bool:
    """Whether an ``--upstream`` gateway signs its users in (``--upstream-token oauth``, or an ID-JAG of the ID
    token of their login): it holds grants, which its status listener shows the operator."""
    mode = args.upstream_token
    return bool(mode == "oauth" or (mode == "id-jag" and args.id_jag_subject == "id_token"))


def _operator_has_a_view(
    status: tuple[int | None, str | None], found: Sequence[ServerFlags], environ: Mapping[str, str]
) -> None:
    """A file's ``gateway.status-port`` or ``status-socket`` refused where no server has a view for the operator:
    no stdio server's processes, no server's users' grants."""
    shown = any(each.flags.stdio is not None or _signs_in(environed(each.flags, environ)) for each in found)
    if status != (None, None) and not shown:
        raise ValueError(
            "gateway.status-port and status-socket show stdio servers' processes and users' grants: the file has none"
        )


def _auth(args: argparse.Namespace) -> GatewayAuth | None:
    """The gateway's authentication from the --auth-* flags, else their variables; ``None`` without any."""
    named = {
        "jwks": args.auth_jwks,
        "issuer": args.auth_issuer,
        "audience": args.auth_audience,
        "principal_claim": args.auth_principal_claim,
        "principal_header": args.auth_principal_header,
        "resource": args.auth_resource,
        "leeway": args.auth_leeway,
    }
    given: dict[str, Any] = {name: value for name, value in named.items() if value}
    servers = _listed(args.auth_server) or ()
    if not given and not servers:
        return None
    if "leeway" in given:
        try:
            given["leeway"] = float(given["leeway"])
        except ValueError:
            raise ValueError("--auth-leeway takes a number of seconds") from None
    # the mcp SDK's import: after the usage errors it can be spared
    from .auth._users import GatewayAuth

    jwks = given.pop("jwks", None)
    return GatewayAuth(jwks_url=jwks, authorization_servers=servers, **given)


def _tools(args: argparse.Namespace, auth: GatewayAuth | None) -> ToolPolicy | None:
    """The tool policy of ``--tool-allow`` and ``--tool-deny`` (``_tools``), which reads claims of the tokens the
    gateway verifies; ``None`` without either flag."""
    if not args.tool_allow and not args.tool_deny:
        return None
    from .auth._tools import NEEDS_TOKENS, ToolPolicy

    if auth is None or auth.verifier is None:
        raise ValueError(NEEDS_TOKENS)
    return ToolPolicy.from_specs(args.tool_allow, args.tool_deny)


@dataclass(frozen=True)
class _Client:
    """The gateway's client at an authorization server as its ``--GROUP-client-*`` flags give it (``group``:
    ``oauth`` or ``login``), its secret from ``MCP_SESSIONS_GROUP_CLIENT_SECRET``; ``refused``: a secret given as a
    flag."""

    group: str
    refused: bool
    client_id: str | None
    method: str | None
    secret: str | None = field(repr=False)
    secret_file: str | None
    key_file: str | None
    key_id: str | None


@dataclass(frozen=True)
class _SignInOptions:
    """The options of the gateway's sign-ins (``--oauth-*``, ``--login-*``), read once for each sign-in that takes
    them (``--upstream-token oauth``, ``--id-jag-subject id_token``, ``--process-env NAME=oauth:``): ``oauth``, its
    client at the upstream's authorization server ``issuer``, asking for ``scope``; ``callback``, else on the origin
    of ``own`` (``--auth-resource``, else ``--auth-audience``); ``login``, its client at the team's IdP
    ``login_issuer``, whose ID token's ``login_claim`` names the user; ``id_tokens``, whether ``--id-jag-subject``
    asks for that login's ID tokens."""

    oauth: _Client
    issuer: str | None
    scope: str | None
    callback: str | None
    own: str
    login: _Client
    login_issuer: str | None
    login_claim: str
    id_tokens: bool


def _sign_in_options(args: argparse.Namespace, environ: Mapping[str, str]) -> _SignInOptions:
    """The sign-ins' options (:class:`_SignInOptions`) from the flags, each client's secret from its variable."""
    oauth = _Client(
        "oauth",
        args.oauth_client_secret is not None,
        args.oauth_client_id,
        args.oauth_client_auth,
        environ.get("MCP_SESSIONS_OAUTH_CLIENT_SECRET", "").strip() or None,
        args.oauth_client_secret_file,
        args.oauth_client_key_file,
        args.oauth_client_key_id,
    )
    login = _Client(
        "login",
        args.login_client_secret is not None,
        args.login_client_id,
        args.login_client_auth,
        environ.get("MCP_SESSIONS_LOGIN_CLIENT_SECRET", "").strip() or None,
        args.login_client_secret_file,
        args.login_client_key_file,
        args.login_client_key_id,
    )
    return _SignInOptions(
        oauth=oauth,
        issuer=args.oauth_issuer,
        scope=args.oauth_scope,
        callback=args.oauth_callback,
        own=args.auth_resource or args.auth_audience or "",
        login=login,
        login_issuer=args.login_issuer,
        login_claim=args.login_claim or "sub",
        id_tokens=(args.id_jag_subject or "access_token") != "access_token",
    )


def _upstream_token(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    auth: GatewayAuth | None,
    sessions: SessionsConfig,
    sign_in: _SignInOptions,
) -> tuple[UpstreamToken | None, TokenExchange | None]:
    """What the upstream gets as ``Authorization`` (``--upstream-token``, default: see ``gateway_app``), and the
    token exchange that it, or a ``--process-env NAME=exchange:AUDIENCE``, uses; ``--upstream-token oauth``'s and
    the ID-JAG's sign-ins take ``sign_in``."""
    mode = args.upstream_token
    granting = mode == "id-jag" or any("=id-jag:" in spec for spec in args.process_env)
    exchanging = granting or mode == "exchange" or any("=exchange:" in spec for spec in args.process_env)
    if args.exchange_client_secret is not None:
        raise ValueError("the client secret is never a flag: MCP_SESSIONS_EXCHANGE_CLIENT_SECRET, or a file")
    if args.id_jag_client_secret is not None:
        raise ValueError("the client secret is never a flag: MCP_SESSIONS_ID_JAG_CLIENT_SECRET, or a file")
    if mode != "id-jag" and args.id_jag_issuer:
        raise ValueError("--id-jag-issuer names --upstream-token id-jag's server; NAME=id-jag:ISSUER names its own")
    if mode != "oauth" and sign_in.issuer:
        raise ValueError("--oauth-issuer names --upstream-token oauth's server; NAME=oauth:ISSUER names its own")
    id_jag = {
        "--id-jag-issuer": args.id_jag_issuer,
        "--id-jag-subject": args.id_jag_subject,
        "--id-jag-client-id": args.id_jag_client_id,
        "--id-jag-client-secret-file": args.id_jag_client_secret_file,
        "--id-jag-client-auth": args.id_jag_client_auth,
        "--id-jag-client-key-file": args.id_jag_client_key_file,
        "--id-jag-client-key-id": args.id_jag_client_key_id,
    }
    if not granting and (given := [flag for flag, value in id_jag.items() if value]):
        flag = given[0]
        raise ValueError(f"{flag} is for --upstream-token id-jag or --process-env NAME=id-jag:ISSUER, neither given")
    if mode is not None and args.stdio is not None:
        raise ValueError("--upstream-token is an --upstream's; a --stdio process gets NAME=exchange:AUDIENCE")
    if mode is None and not exchanging:
        return None, None
    if mode == "oauth":
        return _upstream_grants(args.upstream[0], sign_in, auth, sessions), None
    from .auth._exchange import Target, TokenExchange, UpstreamToken

    if exchanging:
        if auth is None or auth.verifier is None:
            raise ValueError("the token exchange exchanges the bearer tokens the gateway verifies: give --auth-jwks")
        from .auth._client import ClientAuth
        from .auth._exchange import id_jag_target

        issuer = args.exchange_issuer or args.auth_issuer
        endpoint = args.exchange_token_endpoint
        client = ClientAuth.given(
            "--exchange-client",
            args.exchange_client_auth,
            args.exchange_client_id,
            secret=environ.get("MCP_SESSIONS_EXCHANGE_CLIENT_SECRET", "").strip() or None,
            secret_file=args.exchange_client_secret_file,
            key_file=args.exchange_client_key_file,
            key_id=args.exchange_client_key_id,
            servers=(endpoint, issuer),
            naming="--exchange-issuer or --exchange-token-endpoint",
        )
        granted = None
        if granting:
            # the resources' authorization servers the operator named: --id-jag-issuer, each NAME=id-jag:ISSUER's
            named = [args.id_jag_issuer]
            for spec in args.process_env:
                name, _, source = spec.partition("=")
                if source.startswith("id-jag:"):
                    named.append(id_jag_target(source.removeprefix("id-jag:"), f"--process-env {name}").audience)
            granted = ClientAuth.given(
                "--id-jag-client",
                args.id_jag_client_auth,
                args.id_jag_client_id,
                secret=environ.get("MCP_SESSIONS_ID_JAG_CLIENT_SECRET", "").strip() or None,
                secret_file=args.id_jag_client_secret_file,
                key_file=args.id_jag_client_key_file,
                key_id=args.id_jag_client_key_id,
                servers=tuple(named),
                naming="--id-jag-issuer (or use private_key_jwt, whose assertions name their server)",
            )
        exchange = TokenExchange(client=client, token_endpoint=endpoint, issuer=issuer, id_jag=granted)
        # for --process-env NAME=exchange:AUDIENCE (or id-jag:ISSUER) alone
        if mode is None:
            return None, exchange
        audience = args.exchange_audience
        resource = args.exchange_resource
        scope = args.exchange_scope
        if mode == "id-jag":
            if audience is not None:
                raise ValueError(
                    "--upstream-token id-jag asks for an ID-JAG whose audience is the upstream's authorization "
                    "server: give --id-jag-issuer, not --exchange-audience"
                )
            target = Target(args.id_jag_issuer, resource, scope, id_jag=True)
            subject = _id_tokens(sign_in, sessions)
            return UpstreamToken("id-jag", exchange, target, upstream=args.upstream[0], subject=subject), exchange
        return UpstreamToken("exchange", exchange, Target(audience, resource, scope)), exchange
    if mode == "passthrough" and auth is not None:
        logger.warning("mcp-sessions gateway: users' tokens go to the upstream (--upstream-token passthrough)")
    return UpstreamToken(mode), None


def _upstream_grants(
    upstream: str, sign_in: _SignInOptions, auth: GatewayAuth | None, sessions: SessionsConfig
) -> UpstreamToken:
    """``--upstream-token oauth``'s ``_oauth.UpstreamGrants`` for the MCP server at ``upstream``, from
    ``sign_in``, its grants kept in the sessions' store, sealed with their keys (``_kept``)."""
    if auth is None:
        raise ValueError(
            "--upstream-token oauth keeps each user's grant: give --auth-jwks (or --auth-principal-header)"
        )
    issuer = sign_in.issuer
    client, client_id = _oauth_client_given(sign_in.oauth, issuer, "--oauth-issuer")
    login = _login(sign_in, "--upstream-token oauth confirms who opens a sign-in URL")
    callback = _callback(sign_in, "--upstream-token oauth")
    from .auth._kept import KeptGrants
    from .auth._oauth import UpstreamGrants

    return UpstreamGrants(
        upstream=upstream,
        callback=callback,
        login=login,
        client=client,
        client_id=client_id,
        issuer=issuer,
        scope=sign_in.scope,
        kept=KeptGrants(sessions.store, sessions.keys),
    )


def _oauth_client_given(client: _Client, issuer: str | None, naming: str) -> tuple[ClientAuth | None, str | None]:
    """The gateway's client at a vendor's authorization server (``--oauth-client-*``), whose ``issuer`` the operator
    named (else ``None``: a secret is refused, saying to give ``naming``): a confidential one, by its secret or
    key; else its id alone (a public client); else neither (it registers, RFC 7591)."""
    oauth = dict(_oauth_client(client))
    method = oauth.pop("method", None)
    client_id = oauth.pop("client_id", None)
    if not any(oauth.values()) and method is None:
        return None, client_id
    from .auth._client import ClientAuth

    return ClientAuth.given("--oauth-client", method, client_id, **oauth, servers=(issuer,), naming=naming), None


def _process_grants(
    process_env: Sequence[str], sign_in: _SignInOptions, auth: GatewayAuth | None, sessions: SessionsConfig
) -> dict[str, IssuerGrants] | None:
    """``--process-env NAME=oauth:ISSUER[,resource=URI][,scope=SCOPE]``'s ``_oauth.IssuerGrants``, by name: each
    user's own grant at ``ISSUER``, signed in through the gateway's own login (``--login-*``) and callback, kept in
    the sessions' store, sealed with their keys; the gateway's client there the ``--oauth-client-*`` one (with one
    such variable), else the one it registers (RFC 7591). ``None`` without any."""
    specs = {}
    for spec in process_env:
        name, _, source = spec.partition("=")
        kind, _, key = source.partition(":")
        if kind == "oauth" and key:
            specs[name] = key
    if not specs:
        return None
    if auth is None:
        raise ValueError(
            "--process-env NAME=oauth: keeps each user's grant: give --auth-jwks (or --auth-principal-header)"
        )
    from .auth._exchange import id_jag_target

    targets = {name: id_jag_target(key, f"--process-env {name}", "oauth") for name, key in specs.items()}
    issuers = [target.audience for target in targets.values()]
    if len(set(issuers)) < len(issuers):
        raise ValueError("--process-env: one NAME=oauth: variable per authorization server")
    client, client_id = _oauth_client_given(sign_in.oauth, issuers[0], "NAME=oauth:ISSUER")
    if (client or client_id) and len(specs) > 1:
        raise ValueError("--oauth-client-* name the gateway's client at one server: with several oauth: it registers")
    login = _login(sign_in, "--process-env NAME=oauth: confirms who opens a sign-in URL")
    callback = _callback(sign_in, "--process-env NAME=oauth:")
    from .auth._kept import KeptGrants
    from .auth._oauth import IssuerGrants

    kept = KeptGrants(sessions.store, sessions.keys)
    return {
        name: IssuerGrants(
            issuer=str(target.audience),
            resource=target.resource,
            callback=callback,
            login=login,
            client=client,
            client_id=client_id,
            scope=target.scope,
            kept=kept,
        )
        for name, target in targets.items()
    }


def _id_tokens(sign_in: _SignInOptions, sessions: SessionsConfig) -> IdTokens | None:
    """``--id-jag-subject id_token``'s ``_oauth.IdTokens``: each user's ID token from the gateway's own login at the
    team's IdP (the ``--login-*`` flags, as ``--upstream-token oauth``'s), kept in the sessions' store, sealed with
    their keys; ``None`` for ``access_token`` (the default: the user's verified access token is exchanged)."""
    if not sign_in.id_tokens:
        return None
    login = _login(sign_in, "--id-jag-subject id_token is an ID token of the gateway's own login")
    callback = _callback(sign_in, "--id-jag-subject id_token")
    from .auth._kept import KeptGrants
    from .auth._oauth import IdTokens

    return IdTokens(callback=callback, login=login, kept=KeptGrants(sessions.store, sessions.keys))


def _login(sign_in: _SignInOptions, needs: str) -> Login:
    """The gateway's own OpenID Connect login at the team's IdP (``--login-*``); ``needs`` says why, in the refusal
    when it is not given."""
    login = dict(_oauth_client(sign_in.login))
    issuer = sign_in.login_issuer
    if issuer is None or not login:
        raise ValueError(f"{needs}: give --login-issuer and its client")
    from .auth._client import ClientAuth
    from .auth._oauth import Login

    method = login.pop("method")
    client_id = login.pop("client_id")
    client = ClientAuth.given("--login-client", method, client_id, **login, servers=(issuer,), naming="--login-issuer")
    return Login(issuer, client, sign_in.login_claim)


def _callback(sign_in: _SignInOptions, flag: str) -> str:
    """The gateway's ``/oauth/callback`` as browsers reach it: ``--oauth-callback``, else on the origin of
    ``--auth-resource`` (or ``--auth-audience``); ``flag`` names what needs it, in the refusal."""
    callback = sign_in.callback
    if callback is None:
        parts = urlsplit(sign_in.own)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"{flag} needs the gateway's own URL: give --oauth-callback")
        callback = f"{parts.scheme}://{parts.netloc}/oauth/callback"
    return callback


def _oauth_client(client: _Client) -> Iterator[tuple[str, Any]]:
    """The client's settings given, as ``ClientAuth.given`` takes them (none: nothing)."""
    if client.refused:
        raise ValueError(
            f"the client secret is never a flag: MCP_SESSIONS_{client.group.upper()}_CLIENT_SECRET, or a file"
        )
    given = {
        "method": client.method,
        "secret_file": client.secret_file,
        "key_file": client.key_file,
        "key_id": client.key_id,
    }
    if client.client_id is None and any(given.values()):
        raise ValueError(f"--{client.group}-client-* name a client: give --{client.group}-client-id")
    if client.client_id is None:
        return
    yield "client_id", client.client_id
    yield "secret", client.secret
    yield from given.items()


def _listed(given: list[str] | None) -> tuple[str, ...] | None:
    """An allow-list: the flags, else their variable's comma-separated values (:func:`~._options.environed`);
    ``None`` when neither gives one.

    Given lists replace both loopback defaults: hosts alone check no ``Origin`` at the gateway (the
    upstream, which gets the client's, still checks it).
    """
    return tuple(given) if given else None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

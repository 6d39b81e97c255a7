"""``mcp-sessions gateway``'s options, each defined once, in one table (:data:`OPTIONS`), which argparse, the
environment and a ``--config`` file read alike: argparse its definition (:func:`add_arguments`, in the order
``--help`` shows them), the environment its variable (:func:`environed`), the file its key and whose it is
(:attr:`Option.scope`: the gateway's own, in the file's ``[gateway]`` table; a server's, in each server's; or the
gateway's that a server may set for itself). Nothing here reads a value: ``_cli`` checks them and builds the
configuration, ``_process_flags`` the processes' part of it."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from ._config import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_FAILURE_COOLDOWN,
    DEFAULT_FIRST_BYTE_TIMEOUT,
    DEFAULT_KEEPALIVE,
    DEFAULT_MAX_PROCESSES_PER_CALLER,
    DEFAULT_PROCESS_IDLE,
    DEFAULT_SHUTDOWN_TIMEOUT,
    DEFAULT_WARM,
    EVICT_AFTER,
    FOOTPRINT,
    LOG_FORMATS,
    LOG_LEVELS,
    MOST_PROCESSES,
    PROCESSES,
    SESSIONLESS,
    STATES_KEPT,
    STDIO_SHUTDOWN_TIMEOUT,
    Listening,
    StdioProcesses,
    default_max_processes,
)
from .sealed._grants import STATE, USER_GIDS
from .sealed._kernel import RUNTIME
from .sealed._network import NETWORKS
from .sealed._sandbox import CONTAINMENTS, DISK

Scope = Literal["gateway", "server", "either", "command"]
"""Whose an option is: ``gateway``, the gateway's own (a file's ``[gateway]`` table); ``server``, each server's (a
file's server's table, refused on the command line with ``--config``); ``either``, the gateway's that a server may
set for itself; ``command``, the command line's alone (``--config``)."""

_ONE_OF: Final = ""
"""The section of the options of which one is given (``--upstream``, ``--stdio``): listed with the others."""
_USERS: Final = "who is asking (each also from its MCP_SESSIONS_AUTH_* variable)"
_EXCHANGE: Final = (
    "the upstream's credentials (each also from its MCP_SESSIONS_* variable; the client secret "
    "from MCP_SESSIONS_EXCHANGE_CLIENT_SECRET or a file, never a flag)"
)
_ID_JAG: Final = (
    "ID-JAG (--upstream-token id-jag, --process-env NAME=id-jag:ISSUER): the identity provider is the "
    "--exchange-* one; each also from its MCP_SESSIONS_ID_JAG_* variable, the client secret from "
    "MCP_SESSIONS_ID_JAG_CLIENT_SECRET or a file"
)
_OAUTH: Final = (
    "each user's own grant at the upstream's authorization server (--upstream-token oauth, or a process's "
    "--process-env NAME=oauth:ISSUER), and her login for --id-jag-subject id_token; each also from its "
    "MCP_SESSIONS_* variable; a client secret from its variable or a file, never a flag"
)
_CLIENT_AUTH: Final = ("client_secret_basic", "client_secret_post", "private_key_jwt")


@dataclass(frozen=True)
class Option:
    """One option: ``key``, its flag's long name without ``--``, and its key in a ``--config`` file; ``scope``,
    whose it is; ``definition``, what ``add_argument`` takes; ``variable``, the variable it falls back to where the
    flag is not given; ``section``, the ``--help`` group it is listed in (``None``: with the first)."""

    key: str
    scope: Scope
    definition: Mapping[str, Any]
    variable: str | None = None
    section: str | None = None

    @property
    def dest(self) -> str:
        return self.key.replace("-", "_")

    @property
    def repeats(self) -> bool:
        """Given once per value (a file's key takes a list)."""
        return self.definition.get("action") == "append"

    @property
    def switch(self) -> bool:
        """Takes no value (a file's key is ``true`` or ``false``)."""
        return self.definition.get("action") == "store_true"

    @property
    def refused(self) -> bool:
        """A client secret's: never read, refused where given (and hidden, so that argparse takes no other flag's
        abbreviation for it)."""
        return self.definition.get("help") == argparse.SUPPRESS


def _option(
    key: str, scope: Scope, *, variable: str | None = None, section: str | None = None, **definition: Any
) -> Option:
    return Option(key, scope, definition, variable, section)


def _served() -> Iterator[Option]:
    """What the gateway serves."""
    yield _option(
        "upstream",
        "server",
        section=_ONE_OF,
        action="append",
        metavar="URL",
        help="the server's MCP endpoint; repeat per replica",
    )
    yield _option(
        "stdio",
        "server",
        section=_ONE_OF,
        metavar="COMMAND",
        help="a stdio server's command and arguments, split as a shell would and run without "
        "one: by default a process per caller for a server that speaks 2026-07-28, else per "
        "conversation (--processes) (pip install 'mcp-sessions[gateway]')",
    )
    yield _option(
        "config",
        "command",
        metavar="FILE",
        help="many servers, each at its own path (/servers/NAME/mcp), from a file: TOML, or the mcpServers JSON "
        "of Claude Desktop, Cursor and VS Code (by its suffix, .toml or .json; else JSON if it starts with '{'); "
        "each server's keys are its flags' names, the gateway's in its [gateway] table, which the command line's "
        "gateway flags override (docs/gateway.md, 'Many servers from one file')",
    )


def _processes() -> Iterator[Option]:
    """With ``--stdio``: which process a request reaches, how many run at once, and how long each lives."""
    yield _option(
        "processes",
        "server",
        choices=PROCESSES,
        default=StdioProcesses.processes,
        help="with --stdio: a process per conversation, or one shared by every client (each "
        "request names its conversation in _meta); auto (default): if the server speaks "
        "2026-07-28 and no --process-env or --process-uids, a process per caller (its "
        "conversations named in _meta), else per conversation",
    )
    yield _option(
        "conversation-state",
        "server",
        choices=STATES_KEPT,
        default=StdioProcesses.state,
        help="with --stdio: where the server keeps a conversation's state: in its process (default: a conversation "
        "whose process the gateway no longer has, after a restart or on another replica, is told so once), or on "
        "disk, in its granted directories, or none (such a conversation's next call gets a new process)",
    )
    yield _option(
        "process-idle",
        "server",
        type=float,
        metavar="SECONDS",
        help="with --stdio: how long a conversation's process lives without a request (default: "
        f"MCP_SESSIONS_IDLE_TTL, else {DEFAULT_PROCESS_IDLE:g})",
    )
    most = default_max_processes()
    yield _option(
        "max-processes",
        "server",
        type=int,
        default=most,
        metavar="N",
        help="with --stdio: how many conversations' processes may run at once; when all do, a new one ends the one "
        f"idle longest, if idle {EVICT_AFTER:g} s (default: half the host's memory at {FOOTPRINT >> 20} MiB each, "
        f"at most {MOST_PROCESSES}, less --warm's {DEFAULT_WARM} and the shared one; in a --config file, shared by "
        f"its stdio servers: {most} here for one)",
    )
    yield _option(
        "max-processes-per-principal",
        "server",
        type=int,
        default=DEFAULT_MAX_PROCESSES_PER_CALLER,
        metavar="N",
        help="with --stdio: how many of them one caller (its principal, else its client address) may have; at it, "
        f"her new one ends her own idle longest, if idle {EVICT_AFTER:g} s "
        f"(default {DEFAULT_MAX_PROCESSES_PER_CALLER})",
    )
    yield _option(
        "sessionless",
        "server",
        choices=SESSIONLESS,
        default=StdioProcesses.sessionless,
        help="with --stdio: the 2026-07-28 requests of a caller that name no conversation reach "
        "that caller's own process (default), or each a process of its own, or the shared one",
    )
    yield _option(
        "warm",
        "server",
        type=int,
        default=DEFAULT_WARM,
        metavar="N",
        help=f"with --stdio: processes started ahead for new conversations and such requests (default {DEFAULT_WARM})",
    )


def _containment() -> Iterator[Option]:
    """With ``--stdio``: how each process runs and is contained (``_process_flags.process_options`` checks them)."""
    yield _option(
        "process-uids",
        "gateway",
        metavar="FIRST-LAST",
        help="with --stdio: a uid (and gid) of its own for each process, from this range, which no "
        "user of the system may have; the gateway must run as root",
    )
    yield _option(
        "process-user",
        "server",
        metavar="USER[:GROUP]",
        help="with --stdio: run every process as this one user (and its group, or GROUP), for a "
        "single tenant; the gateway must run as root",
    )
    yield _option(
        "accept-root-processes",
        "gateway",
        action="store_true",
        help="with --stdio, a gateway run as root, no --process-uids nor --process-user and the host's network "
        "(--process-network host, the default without uids): accept that every process runs as root (uid 0) on "
        "the host's network; without it, such a gateway refuses to start (key accept-root-processes)",
    )
    yield _option(
        "accept-shared-uid",
        "server",
        action="store_true",
        help="with auth and --process-env but no --process-uids: accept that users' processes, "
        "which share a uid, can read each other's environment and files",
    )
    yield _option(
        "process-containment",
        "server",
        choices=CONTAINMENTS,
        default="auto",
        help="with --stdio: 'bwrap' (bubblewrap) or 'unshare' (util-linux, as root): each process "
        "in a PID namespace with a /proc of its own, all it started ending with it, the host's files "
        "read-only but its own home, /tmp, /var/tmp, /dev/shm and /run/lock, no view of the control "
        "groups nor of /run, a devpts and a hostname of its own; 'none': its process "
        "group only; 'auto' (default): bwrap where it works, else unshare, else none (the startup "
        "line says which)",
    )
    yield _option(
        "process-seccomp",
        "server",
        metavar="PATH",
        help="with --stdio and a containment: the seccomp profile of every process, in Docker's JSON (Docker's or "
        "Podman's, /usr/share/containers/seccomp.json), taken as for a process with no capability (default: "
        "Docker's default profile, which the gateway ships); a filter that refuses a user namespace is kept beside it",
    )
    yield _option(
        "process-memory",
        "server",
        type=int,
        metavar="MIB",
        help="with --stdio: a conversation's memory at most (MiB), all its processes together, its directories and "
        "socket buffers included (a control group); default: half the host's memory shared by --max-processes, "
        "--warm and the shared process, where the host gives a control group, and under cgroup v1, where they are "
        "bounded together by half the host's memory, at least 512 MiB (the startup line says it)",
    )
    yield _option(
        "process-pids",
        "server",
        type=int,
        metavar="N",
        help="with --stdio: how many processes a conversation may run at once (a control group, "
        "else RLIMIT_NPROC of its uid with --process-uids)",
    )
    yield _option(
        "process-disk",
        "server",
        type=int,
        default=DISK,
        metavar="MIB",
        help="with --stdio and a containment: how much each of a process's own directories may hold (MiB): "
        f"its home, /tmp, /var/tmp, /dev/shm and /run/lock, each a tmpfs (default {DISK}); the host's "
        "other files are read-only to it",
    )
    yield _option(
        "process-cpu",
        "server",
        type=float,
        metavar="CORES",
        help="with --stdio: a conversation's CPU at most, all its processes together, in cores "
        "(0.5: half of one; a control group's CFS quota)",
    )
    yield _option(
        "process-cwd",
        "server",
        metavar="TEMPLATE",
        help="with --stdio: a new working directory per process, also its HOME, '{id}' in it the "
        "process's own id (its MCP_SESSION_ID; 'shared-' and a random part for the shared "
        "process); removed when the process ends",
    )
    yield _option(
        "process-mount",
        "server",
        action="append",
        default=[],
        metavar="SOURCE:TARGET[:rw]",
        help="with --stdio and a containment: the host's directory SOURCE at TARGET in every process, read-only "
        "unless ':rw'; SOURCE USERS/{user}: each user's own directory in USERS, made on first use, hers alone "
        "(with auth and --process-uids); repeat",
    )
    yield _option(
        "process-user-gids",
        "gateway",
        default=USER_GIDS,
        metavar="FIRST-LAST",
        help=f"with a {{user}} --process-mount: the gids of the users' own directories, one each, which no user "
        f"or group of the system may have (default {USER_GIDS})",
    )
    yield _option(
        "process-state",
        "gateway",
        metavar="DIR",
        help="the gateway's state directory: where it keeps the sessions, their data and users' sign-ins (store/"
        "sessions.db, SQLite, unless MCP_SESSIONS_STORE names a store) and, with --process-uids, where the host's "
        "gateways keep, for good, each user's group (a {user} --process-mount) and the uids kept for a user (a :rw "
        "--process-mount); the gateway's user's alone, mode 0700 (default: systemd's STATE_DIRECTORY, from "
        f"StateDirectory=, else {STATE} as root, else $XDG_STATE_HOME/mcp-sessions): give every gateway of the host "
        "the same",
    )
    yield _option(
        "runtime-directory",
        "gateway",
        metavar="DIR",
        help="with --process-uids or --process-network egress: where the host's gateways lock the processes' uids and "
        "their egress tables, and keep the processes' resolver and the masked credentials' certificates; one the "
        f"gateway's user may write (default: systemd's RUNTIME_DIRECTORY, from RuntimeDirectory=, else {RUNTIME}): "
        "give every gateway of the host the same",
    )
    yield _option(
        "process-file",
        "server",
        action="append",
        default=[],
        metavar="TARGET=TEMPLATE",
        help="with --stdio and a containment: the file TARGET (~/PATH, in the process's home, or /tmp/PATH) written "
        "in each process as it starts, mode 0600, its own, from the file TEMPLATE (read at startup), each ${NAME} in "
        "it that conversation's --process-env NAME (its placeholder where masked; $$ for a $): a .netrc, a "
        "kubeconfig; repeat",
    )
    yield _option(
        "pass-env",
        "server",
        action="append",
        default=[],
        metavar="NAME",
        help="with --stdio: the gateway's variable NAME reaches every process (besides PATH, HOME, "
        "LOGNAME, SHELL, TERM and USER); repeat",
    )


def _network() -> Iterator[Option]:
    """``--process-network`` and its exceptions (``sealed._network.egress_rules`` checks them)."""
    yield _option(
        "process-network",
        "server",
        choices=NETWORKS,
        help="with --stdio: 'host': the host's network, as the gateway has it; 'none': a network "
        "namespace of its own, nothing to reach; 'egress': the world, but not this host, its link "
        "or the private ranges (nftables rules on the processes' uids: --process-uids or "
        "--process-user). Default: egress with --process-uids, else host",
    )
    yield _option(
        "process-allow-net",
        "server",
        action="append",
        default=[],
        metavar="CIDR[:PORT]",
        help="with --process-network egress: a network (and a port, tcp and udp) the processes "
        "reach all the same, of this host (127.0.0.1:6379) or a private range ([::1]:PORT for IPv6); repeat",
    )
    yield _option(
        "process-allow-host",
        "server",
        action="append",
        default=[],
        metavar="NAME:PORT",
        help="with --process-network egress: a host name and a port (tcp and udp) the processes reach all the "
        "same, at the addresses the gateway resolves it to, kept current, but for an address a number would not "
        "reach (this host's, a private or link-local one...) unless --process-allow-net grants it; repeat",
    )
    yield _option(
        "process-allow-private-host",
        "server",
        action="append",
        default=[],
        metavar="NAME:PORT",
        help="as --process-allow-host, and that name's private answers too (10.0.0.0/8, 100.64.0.0/10, "
        "172.16.0.0/12, 192.168.0.0/16, fc00::/7: an internal service's), never loopback, link-local, a metadata "
        "address or this host's own; repeat",
    )


def _serving() -> Iterator[Option]:
    """Where the gateway listens, whom it serves, how long it waits for its upstream and for its answers."""
    host = Listening.host
    port = Listening.port
    yield _option("host", "gateway", default=host, help=f"the address to listen on (default {host})")
    yield _option("port", "gateway", type=int, default=port, help=f"the port to listen on (default {port})")
    yield _option(
        "handover",
        "gateway",
        metavar="PATH",
        help="take the listening socket of the gateway serving the Unix socket PATH, tell it to drain once this one "
        "listens, and serve PATH for the next, in a directory only the gateway's user may enter: a restart without "
        "systemd that no client sees (default: bind --host and --port)",
    )
    yield _option(
        "allowed-host",
        "gateway",
        variable="MCP_SESSIONS_ALLOWED_HOSTS",
        action="append",
        metavar="HOST",
        help="a Host the gateway serves ('example.com:*': any port); repeat. Default: "
        "MCP_SESSIONS_ALLOWED_HOSTS, else localhost names on a loopback --host and no check on "
        "any other",
    )
    yield _option(
        "allowed-origin",
        "gateway",
        variable="MCP_SESSIONS_ALLOWED_ORIGINS",
        action="append",
        metavar="ORIGIN",
        help="an Origin the gateway serves, as --allowed-host",
    )
    yield _option(
        "forwarded-allow-ips",
        "gateway",
        variable="FORWARDED_ALLOW_IPS",
        metavar="IPS",
        help="the proxies in front whose X-Forwarded-* and Forwarded headers count "
        "(comma-separated IP addresses and networks, '*' for all), as uvicorn's option. Default: "
        "FORWARDED_ALLOW_IPS, else none",
    )
    for key, default, text in (
        ("keepalive", DEFAULT_KEEPALIVE, "an SSE comment on an event stream idle this long; 0: never"),
        ("connect-timeout", DEFAULT_CONNECT_TIMEOUT, "the longest wait for a connection to a replica"),
        ("first-byte-timeout", DEFAULT_FIRST_BYTE_TIMEOUT, "the longest wait for a response's headers"),
        (
            "failure-cooldown",
            DEFAULT_FAILURE_COOLDOWN,
            "how long a replica that cannot be connected to is out of service",
        ),
    ):
        yield _option(
            key, "server", type=float, default=default, metavar="SECONDS", help=f"{text} (default {default:g})"
        )
    yield _option(
        "shutdown-timeout",
        "gateway",
        type=float,
        metavar="SECONDS",
        help="on SIGTERM or Ctrl-C, how long the gateway drains: it says 503 on /readyz and to "
        "new conversations, and waits for the calls in flight (default "
        f"{DEFAULT_SHUTDOWN_TIMEOUT:g}; {STDIO_SHUTDOWN_TIMEOUT:g} with --stdio, whose processes "
        "then have 5 s to end)",
    )
    yield _option("log-level", "gateway", default=Listening.log_level, choices=LOG_LEVELS)
    yield _option(
        "log-format",
        "gateway",
        default=Listening.log_format,
        choices=LOG_FORMATS,
        help="each log line as text, its time (RFC 3339) and level first, or as one JSON object (time, level, "
        f"logger, message, and where there are a server, a conversation, a principal's digest) (default "
        f"{Listening.log_format})",
    )
    yield _option(
        "status-port",
        "gateway",
        type=int,
        metavar="PORT",
        help="with --stdio: serve the operator's view of the processes (GET /status) on "
        "127.0.0.1:PORT, a port of its own on the loopback address only, which processes reach "
        "under --process-network host (default: not served)",
    )
    yield _option(
        "status-socket",
        "gateway",
        metavar="PATH",
        help="with --stdio: serve it on a Unix socket at PATH too, in a directory only the "
        "gateway's user may enter (made mode 0700 if missing)",
    )


def _users() -> Iterator[Option]:
    """Who is asking (``auth._users``), and what of it a stdio process gets (``--process-env``)."""
    users: tuple[tuple[str, Scope, str, str], ...] = (
        (
            "jwks",
            "gateway",
            "MCP_SESSIONS_AUTH_JWKS",
            "the authorization server's JWKS: bearer tokens are JWTs signed by one of its keys",
        ),
        ("issuer", "gateway", "MCP_SESSIONS_AUTH_ISSUER", "the tokens' issuer (iss)"),
        (
            "audience",
            "either",
            "MCP_SESSIONS_AUTH_AUDIENCE",
            "the tokens' audience (aud): the gateway's public MCP URL",
        ),
        (
            "principal-claim",
            "gateway",
            "MCP_SESSIONS_AUTH_PRINCIPAL_CLAIM",
            "the claim that names the user (default sub)",
        ),
        (
            "principal-header",
            "gateway",
            "MCP_SESSIONS_AUTH_PRINCIPAL_HEADER",
            "a header that names the user, set by an auth proxy --forwarded-allow-ips trusts",
        ),
        (
            "resource",
            "either",
            "MCP_SESSIONS_AUTH_RESOURCE",
            "the protected resource the metadata names (default: the audience)",
        ),
    )
    for key, scope, variable, text in users:
        yield _option(f"auth-{key}", scope, variable=variable, section=_USERS, metavar=key.upper(), help=text)
    yield _option(
        "auth-leeway",
        "gateway",
        variable="MCP_SESSIONS_AUTH_LEEWAY",
        section=_USERS,
        metavar="SECONDS",
        help="the clock skew allowed for a token's exp, nbf and iat (default 60)",
    )
    yield _option(
        "auth-server",
        "gateway",
        variable="MCP_SESSIONS_AUTH_SERVERS",
        section=_USERS,
        action="append",
        metavar="URL",
        help="an authorization server (default: the issuer); repeat",
    )
    for key, verb in (("tool-allow", "may list and call"), ("tool-deny", "may neither list nor call")):
        yield _option(
            key,
            "server",
            section=_USERS,
            action="append",
            default=[],
            metavar="CLAIM=VALUE:PATTERN,...",
            help=f"with --auth-jwks: the tools (names, or globs as fnmatch's) a caller whose token's CLAIM is VALUE "
            f"(or a list that holds it) {verb}; '*:PATTERN,...' for every caller; repeat. Deny wins; where allow "
            "rules exist, a caller none names has no tool (default: every tool to every caller)",
        )
    yield _option(
        "process-env",
        "server",
        section=_USERS,
        action="append",
        default=[],
        metavar="NAME=SOURCE",
        help="with --stdio: NAME in each conversation's process from claim:CLAIM (of its token), "
        "header:NAME (of the request that starts it), exchange:AUDIENCE or id-jag:ISSUER[,resource=URI][,scope=SCOPE] "
        "(its token exchanged), or oauth:ISSUER[,resource=URI][,scope=SCOPE] (its user's own grant there, given once "
        "through a sign-in URL); repeat",
    )
    yield _option(
        "process-env-mask",
        "server",
        section=_USERS,
        action="append",
        default=[],
        metavar="NAME=HOST[:PORT],...[,header=HEADER]",
        help="with --process-env NAME and --process-network egress: the process gets a placeholder of NAME's "
        "shape, and the gateway's HTTPS proxy puts the value in its requests' Authorization header (and each "
        "header=HEADER given) to these hosts (port 443 unless given) alone, which it reaches through that proxy "
        "alone; plain HTTP too for a host given as http://HOST[:PORT] (port 80 unless given); repeat",
    )
    yield _option(
        "process-env-mask-ca",
        "server",
        section=_USERS,
        metavar="CERT.pem[,KEY.pem]",
        help="with --process-env-mask: the certificate authority (and its unencrypted key, mode 0600; one file may "
        "hold both) whose certificates the proxy shows the processes, read once at startup (default: one made "
        "at startup, for the masked hosts alone)",
    )


def _exchange() -> Iterator[Option]:
    """What the upstream gets as ``Authorization``, and the token exchange (``auth._exchange``, RFC 8693)."""
    yield _option(
        "upstream-token",
        "server",
        variable="MCP_SESSIONS_UPSTREAM_TOKEN",
        section=_EXCHANGE,
        choices=("passthrough", "none", "exchange", "id-jag", "oauth"),
        help="the upstream's Authorization: the client's as it came (passthrough, the default "
        "without --auth-*), none (the default with --auth-*), each user's token exchanged for "
        "one issued for the upstream (exchange), or for an ID-JAG that the upstream's authorization server "
        "takes for a token of its own (id-jag), or each user's own grant at the upstream's authorization "
        "server, which she gives once through a sign-in URL (oauth: the --oauth-* and --login-* flags)",
    )
    exchange: tuple[tuple[str, Scope, str, str], ...] = (
        (
            "token-endpoint",
            "gateway",
            "MCP_SESSIONS_EXCHANGE_TOKEN_ENDPOINT",
            "the authorization server's token endpoint (default: from the issuer's metadata)",
        ),
        (
            "issuer",
            "gateway",
            "MCP_SESSIONS_EXCHANGE_ISSUER",
            "the authorization server whose metadata (RFC 8414) names it (default: --auth-issuer)",
        ),
        (
            "audience",
            "server",
            "MCP_SESSIONS_EXCHANGE_AUDIENCE",
            "the upstream's audience, as the authorization server names it",
        ),
        ("resource", "server", "MCP_SESSIONS_EXCHANGE_RESOURCE", "the upstream's resource URI (RFC 8707)"),
        (
            "scope",
            "server",
            "MCP_SESSIONS_EXCHANGE_SCOPE",
            "the scope the issued tokens are asked for (space-separated)",
        ),
        (
            "client-id",
            "gateway",
            "MCP_SESSIONS_EXCHANGE_CLIENT_ID",
            "the gateway's own client id at the authorization server",
        ),
        (
            "client-secret-file",
            "gateway",
            "MCP_SESSIONS_EXCHANGE_CLIENT_SECRET_FILE",
            "a file holding the gateway's client secret",
        ),
        (
            "client-key-file",
            "gateway",
            "MCP_SESSIONS_EXCHANGE_CLIENT_KEY_FILE",
            "with private_key_jwt: the gateway's unencrypted RSA or EC private key (PEM, mode 0600), read at startup",
        ),
        (
            "client-key-id",
            "gateway",
            "MCP_SESSIONS_EXCHANGE_CLIENT_KEY_ID",
            "with private_key_jwt: the key's id (kid) at the authorization server",
        ),
    )
    for key, scope, variable, text in exchange:
        yield _option(f"exchange-{key}", scope, variable=variable, section=_EXCHANGE, metavar=key.upper(), help=text)
    # Refused, never read: a command line is every local user's to read (and without it, argparse would take
    # --exchange-client-secret for an abbreviation of --exchange-client-secret-file); so the others'.
    yield _option("exchange-client-secret", "gateway", section=_EXCHANGE, help=argparse.SUPPRESS)
    yield _option(
        "exchange-client-auth",
        "gateway",
        variable="MCP_SESSIONS_EXCHANGE_CLIENT_AUTH",
        section=_EXCHANGE,
        choices=_CLIENT_AUTH,
        help="how the gateway authenticates to the token endpoint: with its secret (client_secret_basic, the "
        "default; client_secret_post) or a JWT signed with its key (private_key_jwt, RFC 7523)",
    )
    for key, variable, text in (
        (
            "issuer",
            "MCP_SESSIONS_ID_JAG_ISSUER",
            "the upstream's authorization server (default: the first of the upstream's protected resource metadata)",
        ),
        (
            "client-id",
            "MCP_SESSIONS_ID_JAG_CLIENT_ID",
            "the gateway's own client id at the resource's authorization server",
        ),
        (
            "client-secret-file",
            "MCP_SESSIONS_ID_JAG_CLIENT_SECRET_FILE",
            "a file holding the gateway's client secret there",
        ),
        (
            "client-key-file",
            "MCP_SESSIONS_ID_JAG_CLIENT_KEY_FILE",
            "with private_key_jwt: the gateway's unencrypted RSA or EC private key there",
        ),
        ("client-key-id", "MCP_SESSIONS_ID_JAG_CLIENT_KEY_ID", "with private_key_jwt: the key's id (kid) there"),
    ):
        yield _option(f"id-jag-{key}", "server", variable=variable, section=_ID_JAG, metavar=key.upper(), help=text)
    yield _option("id-jag-client-secret", "server", section=_ID_JAG, help=argparse.SUPPRESS)  # as the exchange's
    yield _option(
        "id-jag-client-auth",
        "server",
        variable="MCP_SESSIONS_ID_JAG_CLIENT_AUTH",
        section=_ID_JAG,
        choices=_CLIENT_AUTH,
        help="how the gateway authenticates to the resource's authorization server (default client_secret_basic)",
    )
    yield _option(
        "id-jag-subject",
        "server",
        variable="MCP_SESSIONS_ID_JAG_SUBJECT",
        section=_ID_JAG,
        choices=("access_token", "id_token"),
        help="what the identity provider is given to exchange: the user's verified access token (access_token, "
        "the default), or her ID token from the gateway's own login (id_token: the --login-* flags; a user with "
        "none is asked to sign in through a URL)",
    )


def _oauth() -> Iterator[Option]:
    """``--upstream-token oauth``: the gateway's client at the upstream's authorization server, and at the team's
    IdP, where it confirms who opens a sign-in URL (``auth._oauth``)."""
    clients = (
        (
            "oauth",
            "the upstream's authorization server",
            "MCP_SESSIONS_OAUTH_CLIENT_ID",
            "MCP_SESSIONS_OAUTH_CLIENT_SECRET_FILE",
            "MCP_SESSIONS_OAUTH_CLIENT_KEY_FILE",
            "MCP_SESSIONS_OAUTH_CLIENT_KEY_ID",
            "MCP_SESSIONS_OAUTH_CLIENT_AUTH",
        ),
        (
            "login",
            "the team's IdP",
            "MCP_SESSIONS_LOGIN_CLIENT_ID",
            "MCP_SESSIONS_LOGIN_CLIENT_SECRET_FILE",
            "MCP_SESSIONS_LOGIN_CLIENT_KEY_FILE",
            "MCP_SESSIONS_LOGIN_CLIENT_KEY_ID",
            "MCP_SESSIONS_LOGIN_CLIENT_AUTH",
        ),
    )
    for group, whose, client_id, secret_file, key_file, key_id, client_auth in clients:
        for key, variable, text in (
            ("client-id", client_id, f"the gateway's own client id at {whose}"),
            ("client-secret-file", secret_file, "a file holding that client's secret"),
            (
                "client-key-file",
                key_file,
                "with private_key_jwt: that client's unencrypted RSA or EC private key (PEM)",
            ),
            ("client-key-id", key_id, "with private_key_jwt: the key's id (kid)"),
        ):
            metavar = key.upper().replace("-", "_")
            yield _option(f"{group}-{key}", "server", variable=variable, section=_OAUTH, metavar=metavar, help=text)
        yield _option(f"{group}-client-secret", "server", section=_OAUTH, help=argparse.SUPPRESS)  # as the exchange's
        yield _option(
            f"{group}-client-auth",
            "server",
            variable=client_auth,
            section=_OAUTH,
            choices=_CLIENT_AUTH,
            help="how the gateway authenticates there (default client_secret_basic with a secret)",
        )
    yield _option(
        "oauth-issuer",
        "server",
        variable="MCP_SESSIONS_OAUTH_ISSUER",
        section=_OAUTH,
        metavar="URL",
        help="the upstream's authorization server, which its protected resource metadata must name (default: the "
        "first it names); required for a client secret there, which goes to no server but the one named",
    )
    yield _option(
        "oauth-scope",
        "server",
        variable="MCP_SESSIONS_OAUTH_SCOPE",
        section=_OAUTH,
        metavar="SCOPE",
        help="the scope asked for (default: the upstream's 401's, else its metadata's)",
    )
    yield _option(
        "oauth-callback",
        "server",
        variable="MCP_SESSIONS_OAUTH_CALLBACK",
        section=_OAUTH,
        metavar="URL",
        help="the gateway's /oauth/callback as browsers reach it (default: on --auth-resource's origin, else "
        "--auth-audience's); without --oauth-client-id the gateway registers this URL (RFC 7591)",
    )
    yield _option(
        "login-issuer",
        "server",
        variable="MCP_SESSIONS_LOGIN_ISSUER",
        section=_OAUTH,
        metavar="URL",
        help="the team's IdP (OpenID Connect), where a user signs in",
    )
    yield _option(
        "login-claim",
        "server",
        variable="MCP_SESSIONS_LOGIN_CLAIM",
        section=_OAUTH,
        metavar="CLAIM",
        help="the ID token's claim that must name the user who asked (default sub)",
    )


OPTIONS: Final = (
    *_served(),
    *_processes(),
    *_containment(),
    *_network(),
    *_serving(),
    *_users(),
    *_exchange(),
    *_oauth(),
)
"""Every option of ``mcp-sessions gateway``, in the order ``--help`` shows them: what it serves, its stdio processes
(how many, how long; how each runs), how it listens and forwards, who is asking, the upstream's credentials."""
KEYS: Final = {option.key: option for option in OPTIONS}
"""The options by key."""


def add_arguments(gateway: argparse.ArgumentParser, *, defaults: bool = True) -> None:
    """The options of ``gateway``, each as :data:`OPTIONS` defines it, in its order and its section; without
    ``defaults``, none has its default (a parser whose ``argument_default`` is ``SUPPRESS`` gives only those given)."""
    # One of --upstream, --stdio, --config is required: checked in run, so that a misspelt flag is named first.
    sections: dict[str | None, Any] = {None: gateway, _ONE_OF: gateway.add_mutually_exclusive_group()}
    for option in OPTIONS:
        if option.section not in sections:
            sections[option.section] = gateway.add_argument_group(option.section)
        definition = {name: value for name, value in option.definition.items() if defaults or name != "default"}
        sections[option.section].add_argument(f"--{option.key}", **definition)


def environed(args: argparse.Namespace, environ: Mapping[str, str]) -> argparse.Namespace:
    """``args`` with each option that has a variable and was not given taken from ``environ`` (its value stripped,
    a repeated option's comma-separated; an empty one is none): a new namespace, ``args`` as it was."""
    given = vars(args)
    taken: dict[str, object] = {}
    for option in OPTIONS:
        if option.variable is None or given.get(option.dest):
            continue
        value = environ.get(option.variable, "").strip()
        if option.repeats:
            values = [each.strip() for each in value.split(",") if each.strip()]
            taken[option.dest] = values or given.get(option.dest)
        else:
            taken[option.dest] = value or given.get(option.dest) or None
    return argparse.Namespace(**{**given, **taken})

"""The gateway's configuration, whole: what ``mcp-sessions gateway`` serves and how, built once from its flags and
the environment (``_cli.configured``), typed and frozen, as uvicorn's ``Config`` is; what ``_lifecycle.serve`` and
the apps (``gateway_app``'s ``forwarding_app``, ``stdio_gateway_app``) take, whole, and read.

Every default is here, once: the flags' (``--help`` says these), and the apps' for those who build one themselves.
What a value must be is checked as it is made (a ``ValueError`` that names it), whoever makes it. What the gateway
serves (``serves``: an upstream's replicas, or a stdio server's processes) is apart from what is the gateway's
(how it listens, the sessions, the hosts it serves, who is asking), so that a server named in a file is one more
such value beside the others.

Nothing here reads a flag, the environment or a file: the values are checked and built (the sandbox tried, the
users' authentication and the token exchange made) before they land here. It imports no part of the gateway at run
time, so that ``mcp-sessions --help`` loads what it loads without it."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, get_args

from .._config import SessionsConfig

if TYPE_CHECKING:
    import argparse

    from .auth._exchange import TokenExchange, UpstreamToken
    from .auth._oauth import IdTokens, IssuerGrants
    from .auth._tools import ToolPolicy
    from .auth._users import GatewayAuth
    from .sealed._sandbox import SandboxPolicy

LogLevel = Literal["critical", "error", "warning", "info", "debug"]
LOG_LEVELS: Final = get_args(LogLevel)  # --log-level's choices
LogFormat = Literal["text", "json"]
LOG_FORMATS: Final = get_args(LogFormat)  # --log-format's choices
Processes = Literal["auto", "per-conversation", "shared"]
"""Whose conversations a process serves (``--processes``): ``"auto"`` becomes ``"per-conversation"`` or
``"per-caller"`` (``stdio._table.Table.choose``)."""
PROCESSES: Final = get_args(Processes)
Sessionless = Literal["per-caller", "per-request", "shared"]
"""Where the requests that name no conversation go (``--sessionless``)."""
SESSIONLESS: Final = get_args(Sessionless)
StateKept = Literal["process", "disk"]
"""Where a server keeps a conversation's state (``--conversation-state``): in its process, which a restart ends with it
(``"process"``, the default: a conversation whose process the gateway no longer has is told so once), or in its
granted directories, or nowhere (``"disk"``: such a conversation's next call gets a new process, and its answer)."""
STATES_KEPT: Final = get_args(StateKept)

DEFAULT_SHUTDOWN_TIMEOUT: Final = 10.0
"""On SIGTERM, the gateway drains (``_lifecycle``): it waits for the calls in flight for this long at most, then
cancels what still runs (each upstream request closed) and stops."""
STDIO_SHUTDOWN_TIMEOUT: Final = 30.0
"""With --stdio: long enough for a tool call of a team's usual length (a build, a search, a model's answer) to end, as
Kubernetes gives a pod 30 s (``terminationGracePeriodSeconds``): 4 s cut such calls, each then told to send it again,
which ran a ``write_file`` twice. Then every child gets its stdin closed, SIGTERM and SIGKILL
(``stdio._child.stop_group``): all gone within 36 s of the gateway's SIGTERM, at once with no call in flight."""

DEFAULT_KEEPALIVE: Final = 15.0
DEFAULT_CONNECT_TIMEOUT: Final = 5.0
DEFAULT_FIRST_BYTE_TIMEOUT: Final = 300.0
DEFAULT_FAILURE_COOLDOWN: Final = 10.0

FOOTPRINT: Final = 80 << 20
"""A conversation's process, as :func:`default_max_processes` sizes the host by: what the host pays for one of the
ecosystem's common stdio servers, eight of each at once, at rest and after a call (``benchmarks/process_memory.py``,
node 20, Python 3.11), its proportional memory (PSS: the pages it shares with its siblings divided among them), the
processes it starts included: npm's server-memory and server-filesystem 32 MiB each (68 MiB resident), a Python
server on the ``mcp`` SDK 50 MiB (70 MiB), server-memory through ``npx`` 66 MiB (147 MiB: ``npm exec`` runs beside
it); the largest, rounded up, as a conversation's process grows with its use."""
MOST_PROCESSES: Final = 256
"""The most processes :func:`default_max_processes` sizes a gateway for, whatever its host's memory: each idle one
costs the gateway 1.4 ms of CPU a second where its bounds are watched (``sealed._cgroups``), a third of a core at
256."""
DEFAULT_WARM: Final = 2
"""Processes started ahead for new conversations and requests of every kind (``--warm``)."""
DEFAULT_MAX_PROCESSES_PER_CALLER: Final = 8
"""A caller's processes at once (``--max-processes-per-principal``): a person's few conversations, and the scripts she
runs that end none (the docs' ``call.py`` six times in a minute, before it ended its own), within one caller's
share of :func:`default_max_processes`."""
EVICT_AFTER: Final = 10.0
"""How long a conversation may be idle before a new one ends it to make room, at its caller's
``--max-processes-per-principal`` or the gateway's ``--max-processes`` (``stdio._admission``): long enough that two
calls of one turn keep it, short enough that a team's new conversations in a minute find room."""
DEFAULT_PROCESS_IDLE: Final = 300.0
"""How long a conversation's process lives without a request (``--process-idle``): at most five minutes, as the
docs say, unless ``process_idle`` or the sessions' ``idle_ttl`` says otherwise."""


def default_max_processes(memory: int | None = None, servers: int = 1) -> int:
    """``max_processes`` (``--max-processes``) unless given, for each of a gateway's ``servers`` stdio servers: half
    the host's ``memory`` (in bytes; this host's unless given) at :data:`FOOTPRINT` a process (at most
    :data:`MOST_PROCESSES`), shared by the servers, less each one's :data:`DEFAULT_WARM` started ahead and its shared
    one; at least 1. A 24 GiB host's 153 processes give one server 150, three 48 each: a team of 20 holds two
    conversations on each, in 12 GiB at most; a 4 GiB host's one server 22."""
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if memory is None else memory
    return max(min(host // 2 // FOOTPRINT, MOST_PROCESSES) // servers - DEFAULT_WARM - 1, 1)


@dataclass(frozen=True)
class Listening:
    """How the gateway serves, whatever it serves: its address, how long its drain lasts, the operator's status
    port and Unix socket (loopback only), its log lines' level and form (``_logs``), and the Unix socket on which
    it takes its predecessor's listening socket and hands its own to the next (``--handover``)."""

    host: str = "127.0.0.1"
    port: int = 8000
    log_level: LogLevel = "info"
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT
    status_port: int | None = None
    status_socket: str | None = None
    log_format: LogFormat = "text"
    handover: str | None = None


@dataclass(frozen=True)
class Forwarding:
    """An ``--upstream`` gateway's: the replicas' URLs, and how long it waits for them (``gateway_app``'s options,
    which say what each is); ``upstream_token`` ``None``: the default ``gateway_app`` says. ``path``: where the
    endpoint is served, if not at the upstream's own path (a ``--config`` server's own path), the path its sessions
    are minted at and bound to; what a client sends under it reaches the upstream under the upstream's path."""

    upstreams: tuple[str, ...]
    keepalive: float | None = DEFAULT_KEEPALIVE
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    first_byte_timeout: float = DEFAULT_FIRST_BYTE_TIMEOUT
    failure_cooldown: float = DEFAULT_FAILURE_COOLDOWN
    upstream_token: UpstreamToken | None = None
    path: str | None = None

    def __post_init__(self) -> None:
        for name, value in (
            ("connect_timeout", self.connect_timeout),
            ("first_byte_timeout", self.first_byte_timeout),
            ("keepalive", 1.0 if self.keepalive is None else self.keepalive),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds")


@dataclass(frozen=True, kw_only=True)
class StdioProcesses:
    """A ``--stdio`` gateway's: the server's processes (``stdio_gateway_app``), refused as it is made when no
    gateway could serve with it (a ``ValueError`` that says which value).

    ``command`` is the server's program and its arguments (split as a shell would, run without one). ``processes``:
    a process per conversation, or one ``"shared"`` by all, or (``"auto"``, the default) as ``Table.choose`` says.
    ``process_idle``: how long a conversation's process (and a 2025 transport session) lives without a request
    (default: the sessions' ``idle_ttl``, else :data:`DEFAULT_PROCESS_IDLE`). ``max_processes``: how many
    conversations' processes may run at once (default :func:`default_max_processes`, from the host's memory);
    ``max_processes_per_principal``: how many of them one caller (its principal, else its client address) may have;
    at either, a new conversation ends the one idle longest, if idle :data:`EVICT_AFTER` seconds. ``sessionless``:
    the requests of a caller that name no conversation reach that caller's own process (``"per-caller"``, the
    default: a conversation of hers), or each a process of its own (``"per-request"``: ended once it is answered, or
    retained for the retry that brings the input it asked for), or the ``"shared"`` one; each new conversation takes
    one of ``warm`` started ahead. ``environ``
    (default ``os.environ``; never printed) is where the processes' variables come from, by allow-list: the ``mcp``
    SDK's defaults (``PATH``, ``HOME``...) and ``pass_env``'s names; and each gets ``MCP_SESSION_ID``, the process's
    own random id (none in the shared one). ``process_env`` (``NAME=claim:CLAIM``, ``NAME=header:HEADER-NAME``,
    ``NAME=exchange:AUDIENCE``, with ``exchange_scope``) sets each conversation's own values of those variables, from
    the request that starts it (``auth._users.ProcessEnv``; no process is started ahead then, as it could not know
    them). ``sandbox``: how each runs and is contained (the ``--process-*`` flags, a value: what runs it, its uid
    pool, control groups and egress table, is the app's; ``None``: as the gateway runs, in its process group).
    ``state``: where the server keeps a conversation's state (:data:`StateKept`): with ``"disk"``, a conversation
    this gateway has no process for (it restarted, was killed, or another replica served it) gets a new one, as
    nothing it held is lost; with ``"process"``, the operator's word is that it was. ``path``: where the endpoint
    is served (a ``--config`` server's own path), the path its sessions are minted at and bound to."""

    command: tuple[str, ...]
    processes: Processes = "auto"
    sessionless: Sessionless = "per-caller"
    process_idle: float | None = None
    max_processes: int = field(default_factory=default_max_processes)
    max_processes_per_principal: int = DEFAULT_MAX_PROCESSES_PER_CALLER
    warm: int = DEFAULT_WARM
    pass_env: tuple[str, ...] = ()
    process_env: tuple[str, ...] = ()
    exchange_scope: str | None = None
    sandbox: SandboxPolicy | None = None
    state: StateKept = "process"
    path: str = "/mcp"
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.command:
            raise ValueError("--stdio needs a command")
        if self.processes not in PROCESSES:
            raise ValueError("processes is 'auto', 'per-conversation' or 'shared'")
        if min(self.max_processes, self.max_processes_per_principal) < 1:
            raise ValueError("max_processes and max_processes_per_principal must be at least 1")
        if self.sessionless not in SESSIONLESS or self.warm < 0:
            raise ValueError("sessionless is 'per-caller', 'per-request' or 'shared', and warm is 0 or more")
        if self.process_idle is not None and not self.process_idle > 0:
            raise ValueError("process_idle must be a positive number of seconds")
        if self.state not in STATES_KEPT:
            raise ValueError("state is 'process' or 'disk'")


@dataclass(frozen=True, kw_only=True)
class GatewayConfig:
    """Everything ``mcp-sessions gateway`` serves with, in either mode: what it serves (``serves``: an upstream's
    replicas, or a stdio server's processes), how it listens (``listening``), the sessions (``sessions``, default
    the ``MCP_SESSIONS_*`` variables), the hosts and origins it serves (its DNS-rebinding allow-lists, default
    localhost names; empty: no check), the proxies in front whose forwarded headers count (``forwarded_allow_ips``,
    uvicorn's option; default none), who is asking (``auth``), the token exchange (``exchange``, closed with the
    app), a stdio server's ID-JAG subject where it is the user's ID token of the gateway's own login (``id_tokens``)
    and its ``oauth:`` variables' grants (``process_grants``, by name), whose sign-in routes the app serves, and
    which of the server's tools each caller lists and calls (``tools``, default every tool).

    With ``servers`` (``--config FILE``), the gateway serves each at its path, with a configuration of its own (its
    ``serves``, ``tools`` and ``auth``, whose audience and resource may be its own); this one is then the first's,
    ``listening`` the gateway's (its drain long enough for a stdio server's calls where there is one)."""

    serves: Forwarding | StdioProcesses
    listening: Listening = field(default_factory=Listening)
    sessions: SessionsConfig = field(default_factory=SessionsConfig.from_env, repr=False)
    allowed_hosts: Collection[str] | None = None
    allowed_origins: Collection[str] | None = None
    forwarded_allow_ips: str | Collection[str] | None = None
    auth: GatewayAuth | None = None
    exchange: TokenExchange | None = None
    id_tokens: IdTokens | None = None
    process_grants: Mapping[str, IssuerGrants] | None = None
    tools: ToolPolicy | None = None
    servers: tuple[Served, ...] = ()

    @property
    def each(self) -> tuple[GatewayConfig, ...]:
        """Every server's configuration (``servers``'), else this one."""
        return tuple(served.config for served in self.servers) or (self,)

    @property
    def sandbox(self) -> SandboxPolicy | None:
        """How the stdio processes run (``StdioProcesses.sandbox``); ``None`` for an upstream's, or for processes
        run as the gateway runs."""
        return self.serves.sandbox if isinstance(self.serves, StdioProcesses) else None


@dataclass(frozen=True)
class ServerFlags:
    """One server of the file: its ``name``, the ``path`` it is served at, and its ``flags`` (the gateway's and its
    own, as the command line would give them); ``env``, its own variables, never printed; ``where``, how a line
    about it names it (``servers.NAME``, or ``mcpServers.NAME``); ``table``, its table as the file gave it, and
    ``gateway``, the file's ``[gateway]`` table: what a reload compares (a server whose table changed is replaced;
    the gateway's, no reload changes)."""

    name: str
    path: str
    flags: argparse.Namespace
    env: Mapping[str, str]
    where: str
    table: Mapping[str, object] = field(default_factory=dict)
    gateway: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Served:
    """One server of a gateway's file (``--config``): its ``name``, the ``path`` it is served at, and its
    configuration, whole (the gateway's values and its own); ``flags``, what the file said of it
    (:class:`ServerFlags`), which a reload compares with what the file says then."""

    name: str
    path: str
    config: GatewayConfig
    flags: ServerFlags | None = field(default=None, compare=False, repr=False)

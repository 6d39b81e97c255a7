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
    from .auth._exchange import TokenExchange, UpstreamToken
    from .auth._users import GatewayAuth
    from .sealed._cgroups import Cgroups
    from .sealed._edge import Edge
    from .sealed._network import EgressRules
    from .sealed._sandbox import Sandbox

LogLevel = Literal["critical", "error", "warning", "info", "debug"]
LOG_LEVELS: Final = get_args(LogLevel)  # --log-level's choices
Processes = Literal["auto", "per-conversation", "shared"]
"""Whose conversations a process serves (``--processes``): ``"auto"`` becomes ``"per-conversation"`` or
``"per-caller"`` (``stdio._table.Table.choose``)."""
PROCESSES: Final = get_args(Processes)
Sessionless = Literal["per-caller", "per-request", "shared"]
"""Where the requests that name no conversation go (``--sessionless``)."""
SESSIONLESS: Final = get_args(Sessionless)

DEFAULT_SHUTDOWN_TIMEOUT: Final = 10.0
"""On SIGTERM, the gateway drains (``_lifecycle``): it waits for the calls in flight for this long at most, then
cancels what still runs (each upstream request closed) and stops."""
STDIO_SHUTDOWN_TIMEOUT: Final = 4.0
"""With --stdio: then every child gets its stdin closed, SIGTERM and SIGKILL (``stdio._child.stop_group``): all
gone within 10 s of the gateway's SIGTERM."""

DEFAULT_KEEPALIVE: Final = 15.0
DEFAULT_CONNECT_TIMEOUT: Final = 5.0
DEFAULT_FIRST_BYTE_TIMEOUT: Final = 300.0
DEFAULT_FAILURE_COOLDOWN: Final = 10.0

DEFAULT_PROCESS_IDLE: Final = 600.0
"""A conversation's process without a request this long ends, unless ``process_idle`` or the sessions' ``idle_ttl``
says otherwise."""
DEFAULT_MAX_PROCESSES: Final = 16
DEFAULT_WARM: Final = 2
"""Processes started ahead for new conversations and requests of every kind."""
DEFAULT_MAX_PROCESSES_PER_CALLER: Final = 4
"""A caller's processes at once: a person runs a few conversations at a time, and one caller cannot take every
slot of the default ``max_processes``."""


@dataclass(frozen=True)
class Listening:
    """How the gateway serves, whatever it serves: its address, its log level, how long its drain lasts, and the
    operator's status port and Unix socket (loopback only)."""

    host: str = "127.0.0.1"
    port: int = 8000
    log_level: LogLevel = "info"
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT
    status_port: int | None = None
    status_socket: str | None = None


@dataclass(frozen=True)
class Forwarding:
    """An ``--upstream`` gateway's: the replicas' URLs, and how long it waits for them (``gateway_app``'s options,
    which say what each is); ``upstream_token`` ``None``: the default ``gateway_app`` says."""

    upstreams: tuple[str, ...]
    keepalive: float | None = DEFAULT_KEEPALIVE
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    first_byte_timeout: float = DEFAULT_FIRST_BYTE_TIMEOUT
    failure_cooldown: float = DEFAULT_FAILURE_COOLDOWN
    upstream_token: UpstreamToken | None = None

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
    conversations' processes may run at once; ``max_processes_per_principal``: how many of them one caller (its
    principal, else its client address) may have. ``sessionless``: the requests of a caller that name no
    conversation reach that caller's own process (``"per-caller"``, the default: a conversation of hers), or each a
    process of its own (``"per-request"``: ended once it is answered, or retained for the retry that brings the input
    it asked for), or the ``"shared"`` one; each new conversation takes one of ``warm`` started ahead. ``environ``
    (default ``os.environ``; never printed) is where the processes' variables come from, by allow-list: the ``mcp``
    SDK's defaults (``PATH``, ``HOME``...) and ``pass_env``'s names; and each gets ``MCP_SESSION_ID``, the process's
    own random id (none in the shared one). ``process_env`` (``NAME=claim:CLAIM``, ``NAME=header:HEADER-NAME``,
    ``NAME=exchange:AUDIENCE``, with ``exchange_scope``) sets each conversation's own values of those variables, from
    the request that starts it (``auth._users.ProcessEnv``; no process is started ahead then, as it could not know
    them). ``sandbox``: how each runs and is contained (the ``--process-*`` flags; ``None``: as the gateway runs,
    in its process group)."""

    command: tuple[str, ...]
    processes: Processes = "auto"
    sessionless: Sessionless = "per-caller"
    process_idle: float | None = None
    max_processes: int = DEFAULT_MAX_PROCESSES
    max_processes_per_principal: int = DEFAULT_MAX_PROCESSES_PER_CALLER
    warm: int = DEFAULT_WARM
    pass_env: tuple[str, ...] = ()
    process_env: tuple[str, ...] = ()
    exchange_scope: str | None = None
    sandbox: Sandbox | None = None
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


@dataclass(frozen=True, kw_only=True)
class GatewayConfig:
    """Everything ``mcp-sessions gateway`` serves with, in either mode: what it serves (``serves``: an upstream's
    replicas, or a stdio server's processes), how it listens (``listening``), the sessions (``sessions``, default
    the ``MCP_SESSIONS_*`` variables), the hosts and origins it serves (its DNS-rebinding allow-lists, default
    localhost names; empty: no check), the proxies in front whose forwarded headers count (``forwarded_allow_ips``,
    uvicorn's option; default none), who is asking (``auth``) and the token exchange (``exchange``, closed with the
    app)."""

    serves: Forwarding | StdioProcesses
    listening: Listening = field(default_factory=Listening)
    sessions: SessionsConfig = field(default_factory=SessionsConfig.from_env, repr=False)
    allowed_hosts: Collection[str] | None = None
    allowed_origins: Collection[str] | None = None
    forwarded_allow_ips: str | Collection[str] | None = None
    auth: GatewayAuth | None = None
    exchange: TokenExchange | None = None

    @property
    def sandbox(self) -> Sandbox | None:
        """How the stdio processes run (``StdioProcesses.sandbox``); ``None`` for an upstream's, or for processes
        run as the gateway runs."""
        return self.serves.sandbox if isinstance(self.serves, StdioProcesses) else None

    @property
    def egress(self) -> EgressRules | None:
        """The stdio processes' egress rules (``--process-network egress``), which the gateway installs before any
        process starts and removes once they have all ended; ``None`` for an upstream's."""
        return None if self.sandbox is None else self.sandbox.egress

    @property
    def cgroups(self) -> Cgroups | None:
        """The stdio processes' control groups (``--process-memory``, ``--process-pids``, ``--process-cpu``), whose
        gateway's own groups go as it stops; ``None`` without them."""
        return None if self.sandbox is None else self.sandbox.cgroups

    @property
    def edge(self) -> Edge | None:
        """The stdio processes' masked credentials' proxy (``sealed._edge.Edge``, ``--process-env-mask``), whose
        values and certificates' directory go as the gateway stops; ``None`` without it."""
        return None if self.sandbox is None else self.sandbox.edge

"""The gateway's configuration, whole: what ``mcp-sessions gateway`` serves and how, built once from its flags and
the environment (``_cli.configured``), typed and frozen, as uvicorn's ``Config`` is; what ``_lifecycle.serve`` takes.

Nothing here reads a flag, the environment or a file: the values are checked and built (the sandbox tried, the
users' authentication and the token exchange made) before they land here. It imports no part of the gateway at run
time, so that ``mcp-sessions --help`` loads what it loads without it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, get_args

from .._config import SessionsConfig
from .stdio._modes import Processes, Sessionless

if TYPE_CHECKING:
    from .auth._exchange import TokenExchange, UpstreamToken
    from .auth._tools import ToolPolicy
    from .auth._users import GatewayAuth
    from .sealed._cgroups import Cgroups
    from .sealed._edge import Edge
    from .sealed._network import EgressRules
    from .sealed._sandbox import Sandbox

LogLevel = Literal["critical", "error", "warning", "info", "debug"]
LOG_LEVELS: Final = get_args(LogLevel)  # --log-level's choices


@dataclass(frozen=True)
class Listening:
    """How the gateway serves, whatever it serves: its address, its log level, how long its drain lasts, and the
    operator's status port and Unix socket (loopback only)."""

    host: str
    port: int
    log_level: LogLevel
    shutdown_timeout: float
    status_port: int | None = None
    status_socket: str | None = None


@dataclass(frozen=True)
class Forwarding:
    """An ``--upstream`` gateway's: the replicas' URLs, and how long it waits for them (``gateway_app``'s options)."""

    upstreams: tuple[str, ...]
    keepalive: float | None
    connect_timeout: float
    first_byte_timeout: float
    failure_cooldown: float
    upstream_token: UpstreamToken | None = None


@dataclass(frozen=True, kw_only=True)
class StdioProcesses:
    """A ``--stdio`` gateway's: the server's command, split as a shell would, which process a request reaches and
    how many run for how long (``StdioGateway``'s options), and how each runs (``sandbox``, the containment chosen,
    its egress rules in it). ``environ`` is where ``pass_env``'s variables are read (never printed)."""

    command: tuple[str, ...]
    processes: Processes
    sessionless: Sessionless
    process_idle: float | None
    max_processes: int
    max_processes_per_principal: int
    warm: int
    pass_env: tuple[str, ...]
    process_env: tuple[str, ...]
    exchange_scope: str | None
    sandbox: Sandbox
    environ: Mapping[str, str] = field(repr=False, compare=False)


@dataclass(frozen=True, kw_only=True)
class GatewayConfig:
    """Everything ``mcp-sessions gateway`` serves with, in either mode: what it serves (``serves``: an upstream's
    replicas, or a stdio server's processes), how it listens (``listening``), the sessions (``sessions``, the
    ``MCP_SESSIONS_*`` variables), the hosts, origins and proxies in front it trusts, who is asking (``auth``),
    the token exchange (``exchange``, closed with the app), and which of the server's tools each caller lists and
    calls (``tools``: the one server's, as a server's table of a file will carry its own)."""

    serves: Forwarding | StdioProcesses
    listening: Listening
    sessions: SessionsConfig = field(repr=False)
    allowed_hosts: tuple[str, ...] | None = None
    allowed_origins: tuple[str, ...] | None = None
    forwarded_allow_ips: str | None = None
    auth: GatewayAuth | None = None
    exchange: TokenExchange | None = None
    tools: ToolPolicy | None = None

    @property
    def egress(self) -> EgressRules | None:
        """The stdio processes' egress rules (``--process-network egress``), which the gateway installs before any
        process starts and removes once they have all ended; ``None`` for an upstream's."""
        return self.serves.sandbox.egress if isinstance(self.serves, StdioProcesses) else None

    @property
    def cgroups(self) -> Cgroups | None:
        """The stdio processes' control groups (``--process-memory``, ``--process-pids``, ``--process-cpu``), whose
        gateway's own groups go as it stops; ``None`` without them."""
        return self.serves.sandbox.cgroups if isinstance(self.serves, StdioProcesses) else None

    @property
    def edge(self) -> Edge | None:
        """The stdio processes' masked credentials' proxy (``sealed._edge.Edge``, ``--process-env-mask``), whose
        values and certificates' directory go as the gateway stops; ``None`` without it."""
        return self.serves.sandbox.edge if isinstance(self.serves, StdioProcesses) else None

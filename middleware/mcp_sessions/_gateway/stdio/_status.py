"""What ``gateway --stdio`` runs, for its operator (``_operator.OperatorStatus`` serves it) and for each user.

A user's own view (``GET /mcp/sessions``, on the clients' port, served where the gateway authenticates): her
conversations, as the operator's view lists them; ``DELETE /mcp/sessions/DIGEST`` ends one of hers, by the path
its kind ends by (a 2025 transport session's ``DELETE``, a data-layer session's revocation), so that its client
gets the error of its kind.

The metrics (``opentelemetry-api`` only, on the sessions' meter provider): ``mcp_sessions.gateway.processes``,
an observable gauge of the live processes by ``mcp_sessions.process.kind`` (read from the snapshot when the SDK
collects); counters ``mcp_sessions.gateway.process.starts``, ``.ends`` by ``mcp_sessions.process.end_reason`` (a
fixed vocabulary) and ``.refusals`` by ``mcp_sessions.process.limit`` (the option that refused).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio.to_thread
from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from starlette.types import ASGIApp, Receive, Scope, Send

from ..._asgi import send_json
from ..._version import __version__
from ._models import EndReason, Owner, ProcessEvents, ProcessView, known_as
from ._table import Table

if TYPE_CHECKING:
    pass

STATUS_PATH: Final = "/status"
GRANTS_STATUS_PATH: Final = "/status/grants"
LOOPBACK_NAMES: Final = frozenset({"127.0.0.1", "localhost", "[::1]"})
CONVERSATIONS: Final = frozenset(
    {"transport-session", "data-layer-session", "host-conversation", "sessionless", "request", "caller"}
)
"""The kinds the limits count: a conversation's, a request's own or a caller's own (not the shared one, nor those
started ahead)."""


async def processes(children: Table) -> dict[str, Any]:
    """Every live process with its memory, each user's and everyone's count against the limits, and how many
    processes ended, by their end's label (the ends metric's words)."""
    views = children.pool.views()
    memory = await anyio.to_thread.run_sync(_memory, [view.pid for view in views])
    counted = [view for view in views if view.kind in CONVERSATIONS]
    users = Counter(view.principal for view in counted if view.principal is not None)
    return {
        "processes": [{**_shown(view), "memory": rss} for view, rss in zip(views, memory, strict=True)],
        "users": [
            {"principal": owner.name, "processes": count, "limit": children.admission.per_caller}
            for owner, count in sorted(users.items(), key=lambda item: item[0].name)
        ],
        "total": {"processes": len(counted), "limit": children.admission.max_processes},
        "ended": dict(children.pool.ends),
    }


class OwnConversations:
    """``app``, and under its ``endpoint`` (``/mcp/sessions``) the caller's own conversations: listed, and one ended
    (see the module)."""

    def __init__(self, app: ASGIApp, children: Table, endpoint: str) -> None:
        self.app = app
        self.children = children
        self.path = endpoint + "/sessions"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        own = self.path
        if path != own and not path.startswith(own + "/"):
            return await self.app(scope, receive, send)
        mine = known_as(scope)
        if path == own and scope["method"] == "GET":
            views = [view for view in self.children.pool.views() if _hers(view, mine)]
            return await send_json(send, 200, {"conversations": [_own(view) for view in views]}, b"")
        digest = path.removeprefix(own + "/")
        if scope["method"] != "DELETE" or path == own:
            return await send_json(send, 405, {"error": f"GET {own}, or DELETE {own}/DIGEST"}, b"")
        if not await self.children.end(digest, mine):
            return await send_json(send, 404, {"error": "no conversation of yours has this digest"}, b"")
        await send_json(send, 200, {"ended": digest}, b"")


def _hers(view: ProcessView, principal: Owner) -> bool:
    return view.kind in CONVERSATIONS and view.principal == principal


def _own(view: ProcessView) -> dict[str, Any]:
    """What a user sees of her own conversation: the operator's view without her name or the process's id."""
    return {key: value for key, value in _shown(view).items() if key not in ("principal", "pid")}


def _shown(view: ProcessView) -> dict[str, Any]:
    principal = None if view.principal is None else view.principal.name
    return {**asdict(view), "principal": principal, "age": round(view.age, 1), "idle": round(view.idle, 1)}


def _memory(pids: Sequence[int | None]) -> list[int | None]:
    """Each server's resident memory in bytes (``VmRSS`` of ``/proc/PID/status``), as an operator sizing
    ``--process-memory`` needs it; ``None`` where it is gone or not yet found."""
    found: list[int | None] = []
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
            fields = dict(line.partition(":")[::2] for line in lines)
            found.append(int(fields["VmRSS"].split()[0]) * 1024)
        except (OSError, ValueError, KeyError):
            found.append(None)
    return found


KINDS: Final = (
    "transport-session",
    "data-layer-session",
    "host-conversation",
    "sessionless",
    "request",
    "caller",
    "shared",
    "warm",
)


class ProcessMetrics(ProcessEvents):
    """The process table's instruments (see the module); ``kinds`` counts its processes (``Pool.kinds``)."""

    def __init__(self, kinds: Callable[[], Counter[str]], meter_provider: MeterProvider | None) -> None:
        self.kinds = kinds
        meter = metrics.get_meter("mcp_sessions.gateway", __version__, meter_provider)
        meter.create_observable_gauge(
            "mcp_sessions.gateway.processes",
            [self._observe],
            unit="{process}",
            description="Live server processes of gateway --stdio, by kind.",
        )
        self.starts = meter.create_counter(
            "mcp_sessions.gateway.process.starts", unit="{process}", description="Server processes started."
        )
        self.ends = meter.create_counter(
            "mcp_sessions.gateway.process.ends", unit="{process}", description="Server processes ended, by reason."
        )
        self.refusals = meter.create_counter(
            "mcp_sessions.gateway.process.refusals",
            unit="{request}",
            description="Requests refused a process, by the limit that refused them.",
        )

    def started(self) -> None:
        self.starts.add(1)

    def ended(self, why: EndReason) -> None:
        self.ends.add(1, {"mcp_sessions.process.end_reason": why.label})

    def refused(self, limit: str) -> None:
        self.refusals.add(1, {"mcp_sessions.process.limit": limit})

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        """Each kind's count, every kind named (0 too), so a kind's last process's end shows."""
        # the reader's thread, beside the event loop's: a table that changes as it is read is read next time
        try:
            counted = self.kinds()
        except RuntimeError:
            return []
        return [Observation(counted[kind], {"mcp_sessions.process.kind": kind}) for kind in KINDS]

"""The metrics of ``gateway --stdio``'s processes (``opentelemetry-api`` only, on the sessions' meter provider).

``mcp_sessions.gateway.processes``, an observable gauge: the live processes by ``mcp_sessions.process.kind``, read
from the table's snapshot when the SDK collects. Counters: ``mcp_sessions.gateway.process.starts``,
``mcp_sessions.gateway.process.ends`` by ``mcp_sessions.process.end_reason`` (a fixed vocabulary) and
``mcp_sessions.gateway.process.refusals`` by ``mcp_sessions.process.limit`` (the option that refused).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Final

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from .._version import __version__

if TYPE_CHECKING:
    from ._stdio_table import ProcessView

KINDS: Final = ("transport-session", "data-layer-session", "host-conversation", "request", "shared", "warm")
REASONS: Final = {
    "idle": "idle",
    "expired": "expired",
    "evicted": "evicted",
    "answered": "answered",
    "shutdown": "shutdown",
    "its session ended": "session_ended",
    "its input came too late": "input_late",
    "failed to start": "failed_to_start",
    "it did not initialize": "failed_to_start",
    "ended by its user": "ended_by_user",
}
"""Why a process ended, as the ends counter records it; a crash of any kind is ``crash``, anything else ``other``."""


class ProcessMetrics:
    """The process table's instruments; ``processes`` is its snapshot (``Children.processes``)."""

    def __init__(self, processes: Callable[[], Sequence[ProcessView]], meter_provider: MeterProvider | None) -> None:
        self.processes = processes
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

    def ended(self, why: str) -> None:
        reason = REASONS.get(why, "crash" if why.startswith("crash") else "other")
        self.ends.add(1, {"mcp_sessions.process.end_reason": reason})

    def refused(self, limit: str) -> None:
        self.refusals.add(1, {"mcp_sessions.process.limit": limit})

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        """Each kind's count, every kind named (0 too), so a kind's last process's end shows."""
        try:  # the reader's thread, beside the event loop's: a table that changes as it is read is read next time
            counted = Counter(view.kind for view in self.processes())
        except RuntimeError:
            return []
        return [Observation(counted[kind], {"mcp_sessions.process.kind": kind}) for kind in KINDS]

"""The scenarios, one a wire, and how one runs at one era against one server."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ._draft import run_draft
from ._hosts import run_hosts
from ._model import ERAS, LEGACY, Bail, ConformanceCheck, Recorder, load_traceability, now
from ._peer import Peer, ProbeError, Unusable
from ._sep1364 import run_alt1, run_alt2
from ._strawman import run_strawman

if TYPE_CHECKING:
    import httpx

__all__ = ["SCENARIOS", "Scenario", "applicable", "run_scenario"]


@dataclass(frozen=True)
class Scenario:
    """A session wire as the official suite sees a feature: one scenario, many checks."""

    wire: str
    name: str
    eras: tuple[str, ...]
    """The eras the wire exists in, oldest first: the newest is the default."""
    run: Callable[[Peer, Recorder], None]
    capabilities: Mapping[str, object] = field(default_factory=dict)
    """What the pack declares as the client (the strawman's reference client declares its wire)."""


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("draft", "sessions-draft", ERAS, run_draft),
    Scenario("strawman", "sessions-strawman", ERAS, run_strawman, {"experimental": {"session": {"version": 1}}}),
    Scenario("sep1364-alt1", "sessions-sep1364-alt1", ERAS, run_alt1),
    Scenario("sep1364-alt2", "sessions-sep1364-alt2", (LEGACY,), run_alt2),
    Scenario("hosts", "sessions-hosts", ERAS, run_hosts),
)


def run_scenario(
    scenario: Scenario, http: httpx.Client, url: str, era: str, headers: Mapping[str, str]
) -> list[ConformanceCheck]:
    """The checks of ``scenario`` against ``url`` at ``era``; a run that could not go on ends in a failed check."""
    recorder = Recorder(load_traceability(scenario.name), era)
    try:
        scenario.run(Peer(http, url, era, headers, scenario.capabilities), recorder)
    except Bail:
        pass  # the gate's own check says why
    except (ProbeError, Unusable) as exc:
        recorder.checks.append(
            {
                "id": scenario.name,
                "name": scenario.name,
                "description": "Failed to run scenario",
                "status": "FAILURE",
                "timestamp": now(),
                "errorMessage": str(exc),
            }
        )
    return recorder.checks


def applicable(scenario: Scenario, era: str | None) -> str | None:
    """The era ``scenario`` runs at (the newest it exists in, unless one is asked for); ``None`` if not at ``era``."""
    if era is None:
        return scenario.eras[-1]
    return era if era in scenario.eras else None

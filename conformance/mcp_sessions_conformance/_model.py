"""Checks as the official MCP conformance suite writes them, and the requirements they come from.

Each wire's requirements are one traceability file (``traceability/<scenario>.yaml``,
in the shape of the official suite's ``src/seps/sep-NNNN.yaml``): a row is a
normative sentence, quoted, with the check that tests it (its id, its level and
the section it sits in) or the reason it cannot be checked from outside. A
check's status follows the sentence's keyword, as the official suite rules:
MUST → ``FAILURE``, SHOULD → ``WARNING``. A row marked ``convention`` quotes this
project's own reading (docs/wire.md, docs/clients.md), not the wire's text: its
check runs only when asked (``--conventions``), never in the default run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any, Final, Literal, NotRequired, TypedDict

import yaml

MODERN: Final = "2026-07-28"
"""The stateless era: every request carries its envelope in ``params._meta``."""
LEGACY: Final = "2025-11-25"
"""The handshake era: ``initialize`` first, ``Mcp-Session-Id`` is the server's transport session."""
ERAS: Final = (LEGACY, MODERN)

Status = Literal["SUCCESS", "FAILURE", "WARNING", "SKIPPED", "INFO"]
Level = Literal["MUST", "SHOULD"]
_STATUS_OF: Final[Mapping[Level, Status]] = {"MUST": "FAILURE", "SHOULD": "WARNING"}
_PACKAGE: Final = __name__.rpartition(".")[0]
_CHECK_ID: Final = re.compile(r"sessions-[a-z0-9]+(?:-[a-z0-9]+)*")


class ConformanceCheck(TypedDict):
    """One check's outcome, field for field the official suite's ``ConformanceCheck``."""

    id: str
    name: str
    description: str
    status: Status
    timestamp: str
    specReferences: NotRequired[list[dict[str, str]]]
    details: NotRequired[dict[str, object]]
    errorMessage: NotRequired[str]


@dataclass(frozen=True)
class Requirement:
    """A normative sentence and the check that tests it."""

    check: str
    level: Level
    text: str
    section: str
    era: str | None
    """The only era the check applies to, or ``None`` for both."""
    convention: bool = False
    """This project's own rule, quoted from its docs: checked only with ``--conventions``."""
    needs: str | None = None
    """What the check needs of the server beyond the wire (a tool), for the docs' table."""


@dataclass(frozen=True)
class Settings:
    """What a run was told: the opt-in conventions, the tool to call, the alternative error codes accepted."""

    conventions: bool = False
    tool: str | None = None
    """``--tool``: the tool the checks that need one call (else one is found in ``tools/list``)."""
    not_found: tuple[int, ...] = ()
    """``--not-found-code``: codes accepted besides the wire's own "session not found" code."""
    required: tuple[int, ...] = ()
    """``--required-code``: codes accepted besides the wire's own "session required" code."""


@dataclass(frozen=True)
class Excluded:
    """A normative sentence no check tests, and why it cannot be checked from outside."""

    text: str
    reason: str


@dataclass(frozen=True)
class Traceability:
    """One wire's traceability file: every requirement, checked or excluded."""

    wire: str
    scenario: str
    spec: str
    spec_url: str | None
    """Where the spec is published, when it is (this project's own pages are in the repository)."""
    conventions: str
    """The document the ``convention`` rows quote (this project's own)."""
    requirements: tuple[Requirement, ...]
    excluded: tuple[Excluded, ...]

    def requirement(self, check: str) -> Requirement:
        """The requirement ``check`` tests (a check without one is a programming error)."""
        for requirement in self.requirements:
            if requirement.check == check:
                return requirement
        raise KeyError(f"{check} has no row in traceability/{self.scenario}.yaml")


def now() -> str:
    """The time as JavaScript's ``Date.toISOString`` writes it, as the official suite stamps checks."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def read_yaml(text: str, where: str) -> Any:
    """One YAML document, read by PyYAML's safe loader (plain data only); ``ValueError`` naming ``where``.

    A key given twice in one mapping is an error, as in the official suite's YAML library (PyYAML keeps the last).
    """

    class UniqueKeys(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen = set()
            for key in (key for key, _ in node.value if isinstance(key, yaml.ScalarNode)):
                if key.value in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"{key.value!r} appears twice", key.start_mark)
                seen.add(key.value)
            return super().construct_mapping(node, deep)

    try:
        return yaml.load(text, UniqueKeys)  # noqa: S506 - a SafeLoader: plain data only
    except yaml.YAMLError as exc:
        raise ValueError(f"{where}: {exc}") from None
    except RecursionError:  # PyYAML reads nested collections recursively
        raise ValueError(f"{where}: nested too deeply") from None


def _text(row: Mapping[str, Any], key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: {key!r} must be a non-empty string")
    return value


def load_traceability(scenario: str) -> Traceability:
    """The traceability file of ``scenario``, read from the package and checked."""
    where = f"traceability/{scenario}.yaml"
    document = read_yaml(resources.files(_PACKAGE).joinpath(where).read_text(encoding="utf-8"), where)
    if not isinstance(document, dict):
        raise ValueError(f"{where}: expected a mapping")
    rows = document.get("requirements")
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ValueError(f"{where}: 'requirements' must be a list of rows")
    requirements, excluded = [], []
    for row in rows:
        assert isinstance(row, dict)
        text = _text(row, "text", where)
        if "excluded" in row:
            excluded.append(Excluded(text, _text(row, "excluded", where)))
            continue
        check, level, era = _text(row, "check", where), row.get("level"), row.get("era")
        convention, needs = row.get("convention", False), row.get("needs")
        well_formed = level in ("MUST", "SHOULD") and era in (None, *ERAS) and isinstance(convention, bool)
        if not _CHECK_ID.fullmatch(check) or not well_formed or not isinstance(needs, str | None):
            raise ValueError(f"{where}: {check}: a check id, level MUST or SHOULD, an era, convention and needs")
        keyword: Level = "MUST" if level == "MUST" else "SHOULD"
        section = _text(row, "section", where)
        requirements.append(Requirement(check, keyword, text, section, era, convention, needs))
    return Traceability(
        wire=_text(document, "wire", where),
        scenario=_text(document, "scenario", where),
        spec=_text(document, "spec", where),
        spec_url=_text(document, "spec_url", where) if "spec_url" in document else None,
        conventions=_text(document, "conventions", where),
        requirements=tuple(requirements),
        excluded=tuple(excluded),
    )


class Bail(Exception):
    """A gate failed: nothing after it can be exercised, so the scenario ends (its own check says why)."""


class Recorder:
    """Collects one scenario's checks at one era, each stamped from its requirement."""

    def __init__(self, traceability: Traceability, era: str, settings: Settings | None = None) -> None:
        self.traceability = traceability
        self.era = era
        self.settings = settings or Settings()
        self.checks: list[ConformanceCheck] = []

    @property
    def conventions(self) -> bool:
        """Whether this run checks this project's conventions too (``--conventions``)."""
        return self.settings.conventions

    def applies(self, check: str) -> bool:
        """Whether ``check`` runs here: its era, and the opt-in for a convention (the runner drops it otherwise)."""
        requirement = self.traceability.requirement(check)
        return requirement.era in (None, self.era) and (self.settings.conventions or not requirement.convention)

    def record(self, check: str, problem: str | None, details: Mapping[str, object] | None = None) -> None:
        """``SUCCESS`` when ``problem`` is ``None``, else the requirement's level."""
        self._emit(check, "SUCCESS" if problem is None else None, problem, details or {})

    def gate(self, check: str, problem: str | None, details: Mapping[str, object] | None = None) -> None:
        """Record ``check``; when it failed, end the scenario: the checks after it need what it checks."""
        self.record(check, problem, details)
        if problem is not None:
            raise Bail(check)

    def skip(self, check: str, reason: str, details: Mapping[str, object] | None = None) -> None:
        """Not checked here: an optional feature the server did not take up, or a fixture it does not have."""
        self._emit(check, "SKIPPED", None, {"reason": reason, **(details or {})})

    def untestable(self, check: str, reason: str) -> None:
        """A prerequisite the run itself should have made is missing (an earlier step failed): failed at the
        requirement's level, saying so (the official ``untestableCheck``). A fixture the server lacks is a skip."""
        self._emit(check, None, f"Not testable: {reason}", {"untestable": True, "reason": reason})

    def _emit(self, check: str, status: Status | None, problem: str | None, details: Mapping[str, object]) -> None:
        """Add ``check`` (at the requirement's level when ``status`` is ``None``) if it applies at this era."""
        if not self.applies(check):
            return
        requirement = self.traceability.requirement(check)
        if requirement.convention:
            reference = {"id": f"{self.traceability.conventions} §{requirement.section}"}
        else:
            reference = {"id": f"{self.traceability.spec} §{requirement.section}"}
            if self.traceability.spec_url is not None:
                reference["url"] = self.traceability.spec_url
        emitted: ConformanceCheck = {
            "id": check,
            "name": "".join(part.capitalize() for part in check.split("-")),
            "description": requirement.text,
            "status": status or _STATUS_OF[requirement.level],
            "timestamp": now(),
            "specReferences": [reference],
            "details": {
                "level": requirement.level,
                "specVersion": self.era,
                **({"convention": True} if requirement.convention else {}),
                **details,
            },
        }
        if problem is not None:
            emitted["errorMessage"] = problem
        self.checks.append(emitted)

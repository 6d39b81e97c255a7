"""What a check needs of a server beyond its wire: a tool to call, a counter to read, the error codes it accepts.

The pack brings no fixture into a stranger's server, so it takes what the server offers: the tool
``--tool`` names, or one ``tools/list`` lists that takes no argument (a read-only one first, never
one annotated as destructive). Only the checks of a session's context need more than a call: a
tool whose answer shows the session, which is the quickstart's ``count`` (1, 2 in one session, 1
in another). Where the server offers none of these, the check is SKIPPED and says what it needed;
a missing fixture is never a FAILURE.

A server that documents other codes than the wire's for "not found" and "required" (this
middleware's ``error_codes=``, a 2026-07-28 server that keeps out of the reserved range) passes
only when told: ``--not-found-code`` and ``--required-code`` add to the codes accepted, and each
check says which sentence its code comes from and which were accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ._model import Recorder, Settings
from ._peer import Exchange, member

COUNTER: Final = "count"
"""The quickstart's counter: the one tool whose answer shows which session a request was in."""
NO_TOOL: Final = "the server lists no tool that takes no arguments: pass --tool NAME to name one"


def _takes_no_arguments(tool: object) -> bool:
    """Whether ``tool`` (a ``tools/list`` entry) can be called with ``{}``: its input schema requires nothing."""
    required = member(tool, "inputSchema", "required")
    return isinstance(member(tool, "name"), str) and required in (None, [])


def pick_tool(listed: Exchange, settings: Settings) -> str | None:
    """The tool the checks call: ``--tool``, else the first listed that takes no arguments, read-only ones first."""
    if settings.tool is not None:
        return settings.tool
    tools = member(listed.result, "tools")
    offered = tools if isinstance(tools, list) else []
    callable_ = [tool for tool in offered if _takes_no_arguments(tool)]
    read_only = [tool for tool in callable_ if _hint(tool, "readOnlyHint") is True]
    harmless = [tool for tool in callable_ if _hint(tool, "destructiveHint") is not True]
    chosen = (read_only or harmless)[:1]
    name = member(chosen[0], "name") if chosen else None
    return name if isinstance(name, str) else None


def _hint(tool: object, name: str) -> object:
    """The annotation ``name`` of ``tool`` (a ``tools/list`` entry), ``None`` when it has none."""
    return member(tool, "annotations", name)


def call_params(tool: str) -> dict[str, object]:
    """``tools/call`` params for ``tool`` with no arguments."""
    return {"name": tool, "arguments": {}}


def record_counts(rec: Recorder, check: str, counts: Sequence[str | None]) -> None:
    """The counter twice in one session, then once in another: 1, 2, 1.

    In the default run a ``count`` tool that answers, but not 1, in a new session is another server's tool of
    that name, not the quickstart's counter: the check is SKIPPED. With ``--conventions`` it is the fixture.
    """
    first = counts[0] if counts else None
    if not rec.conventions and first not in (None, "1"):
        reason = (
            f"the server's '{COUNTER}' tool answered {first[:40]!r} in a new session: it is not a "
            "counter from 1 (the quickstart's), so its answers cannot show the session"
        )
        rec.skip(check, reason)
        return
    counted = list(counts)
    expected = ["1", "2", "1"][: len(counted)]
    problem = None if counted == expected else f"{COUNTER} answered {counted}, expected {expected}"
    rec.record(check, problem, {"counts": counted, "tool": COUNTER})


@dataclass(frozen=True)
class Code:
    """An error code a sentence of the wire fixes, and the others the run was told to accept."""

    code: int
    sentence: str
    """Where the code comes from: the sentence (or test vector) that names it."""
    accepted: tuple[int, ...] = ()
    option: str = ""

    def problem(self, exchange: Exchange) -> str | None:
        """Why ``exchange`` is not this error, or ``None`` when it is (or is one of the accepted codes)."""
        if self.matches(exchange.error_code):
            return None
        accepted = ", ".join(map(str, self.accepted))
        also = f" (or {accepted}, {self.option})" if self.accepted else ""
        return f"expected error {self.code}{also}, got {exchange.summary()}"

    def details(self) -> dict[str, object]:
        """What a check's ``details`` say of the code: which sentence, and what else was accepted."""
        said: dict[str, object] = {"code": self.code, "codeFrom": self.sentence}
        if self.accepted:
            said["accepted"] = {"codes": list(self.accepted), "option": self.option}
        return said

    def matches(self, code: object) -> bool:
        """Whether ``code`` is this error's code or an accepted one."""
        return code == self.code or code in self.accepted


def not_found_code(code: int, sentence: str, settings: Settings) -> Code:
    """The wire's "session not found" code, with ``--not-found-code``'s."""
    return Code(code, sentence, settings.not_found, "--not-found-code")


def required_code(code: int, sentence: str, settings: Settings) -> Code:
    """The wire's "session required" code, with ``--required-code``'s."""
    return Code(code, sentence, settings.required, "--required-code")

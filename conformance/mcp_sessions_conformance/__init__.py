"""The conformance pack: ``mcp-sessions-conformance URL`` checks a server's session wires from outside.

Black-box and client-side: it speaks each wire over HTTP as the drafts' clients
do, and reports every normative sentence of the wire's own text as a check, in
the official MCP conformance suite's shapes (console lines, ``checks.json``, the
expected-failures baseline). Each wire's requirements, and the reason for each
one no client can check, are in ``traceability/<scenario>.yaml``. This
project's own conventions are checked only when asked (``--conventions``); a run
without ``--wire`` checks the wires the server advertises.

A distribution of its own (``mcp-sessions-conformance``, needing httpx and PyYAML only) that imports
nothing of ``mcp_sessions``: ``mcp-sessions conformance`` runs :func:`main` when it is installed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from ._answers import printable
from ._draft import run_draft
from ._hosts import run_hosts
from ._link import DEADLINE, Link
from ._model import ERAS, LEGACY, Bail, ConformanceCheck, Recorder, Settings, load_traceability, now
from ._peer import Peer, ProbeError, Unusable
from ._report import (
    Palette,
    evaluate,
    load_expected_failures,
    print_baseline,
    print_checks,
    print_summary,
    write_checks,
)
from ._select import Discovery
from ._strawman import run_strawman
from ._version import __version__

__all__ = ["__version__", "main"]

EXIT_USAGE = 2


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
    convention: bool = False
    """Whether the whole wire is this project's own: it runs only with ``--conventions``."""


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("draft", "sessions-draft", ERAS, run_draft),
    Scenario("strawman", "sessions-strawman", ERAS, run_strawman, {"experimental": {"session": {"version": 1}}}),
    Scenario("hosts", "sessions-hosts", ERAS, run_hosts, convention=True),
)


def failed_to_run(name: str, why: str) -> ConformanceCheck:
    """The one check of a scenario that could not run, as the official runner reports it."""
    return {
        "id": name,
        "name": name,
        "description": "Failed to run scenario",
        "status": "FAILURE",
        "timestamp": now(),
        "errorMessage": why,
    }


def run_scenario(
    scenario: Scenario, link: Link, url: str, era: str, headers: Mapping[str, str], settings: Settings | None = None
) -> list[ConformanceCheck]:
    """The checks of ``scenario`` against ``url`` at ``era``; a run that could not go on ends in a failed check."""
    recorder = Recorder(load_traceability(scenario.name), era, settings)
    peer = Peer(link, url, era, headers, scenario.capabilities)
    try:
        if era == LEGACY:
            peer.handshake()
        scenario.run(peer, recorder)
    except Bail:
        pass  # the gate's own check says why
    except (ProbeError, Unusable) as exc:
        why = str(exc)
        if isinstance(exc, Unusable) and peer.last is not None:
            why += f" (the last answer: {peer.last.explained(era)})"
        recorder.checks.append(failed_to_run(scenario.name, why))
    return recorder.checks


def _parser(prog: str) -> argparse.ArgumentParser:
    """The command line, named ``prog`` (``mcp-sessions conformance`` when that command runs it)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Run the session wires' conformance checks against the MCP endpoint URL: one line per check, "
            "a 'Passed:' line per scenario, the totals. Exit status: 0 when nothing failed (or only what "
            "--expected-failures lists), 1 otherwise, 2 on a usage error. See docs/conformance.md."
        ),
    )
    parser.add_argument("url", help="the MCP endpoint, e.g. http://127.0.0.1:8000/mcp")
    parser.add_argument(
        "--wire",
        action="append",
        choices=[scenario.wire for scenario in SCENARIOS],
        help="a wire to check (repeat for several; default: every wire the server advertises)",
    )
    _add_judging_options(parser)
    parser.add_argument(
        "--spec-version",
        choices=ERAS,
        help="the era to speak (default: each wire's newest, 2026-07-28)",
    )
    parser.add_argument("--expected-failures", metavar="FILE", help="the official suite's YAML baseline of failures")
    parser.add_argument(
        "--json", "-o", "--output-dir", metavar="DIR", help="write each scenario's checks.json under DIR"
    )
    parser.add_argument(
        "--header", action="append", default=[], metavar="'NAME: VALUE'", help="add a header (e.g. Authorization)"
    )
    parser.add_argument(
        "--request-timeout",
        type=_seconds,
        default=DEADLINE,
        metavar="SECONDS",
        help=f"the most one request may take, from connect to its answer's last byte (default {DEADLINE:g})",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def _add_judging_options(parser: argparse.ArgumentParser) -> None:
    """The options that decide what is judged: the conventions, the tool to call, the codes accepted."""
    parser.add_argument(
        "--conventions",
        action="store_true",
        help=(
            "also check mcp-sessions' own conventions, which are this project's and not the drafts' (batches, "
            "experimental.sessions, exact codes the drafts leave open, signed state, host conversation ids, the "
            "quickstart's fixture tools)"
        ),
    )
    parser.add_argument(
        "--tool", metavar="NAME", help="the tool to call where a check needs one (default: one tools/list offers)"
    )
    parser.add_argument(
        "--not-found-code",
        type=int,
        action="append",
        default=[],
        metavar="CODE",
        help="accept CODE too for 'session not found' (a server's documented alternative; repeat for several)",
    )
    parser.add_argument(
        "--required-code",
        type=int,
        action="append",
        default=[],
        metavar="CODE",
        help="accept CODE too for 'session required' (a server's documented alternative; repeat for several)",
    )


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (argparse's ``type``)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"a positive number of seconds, not {text!r}")
    return value


def _headers(texts: Sequence[str]) -> dict[str, str]:
    headers = {}
    for text in texts:
        name, colon, value = text.partition(":")
        if not colon or not name.strip():
            raise ValueError(f"--header takes 'Name: value', got {text!r}")
        headers[name.strip()] = value.strip()
    return headers


def _selected(args: argparse.Namespace, out: TextIO) -> list[tuple[Scenario, str]]:
    """The scenarios ``--wire``, ``--spec-version`` and ``--conventions`` ask for, each with its era."""
    selected = []
    for scenario in SCENARIOS:
        if args.wire and scenario.wire not in args.wire:
            continue
        if scenario.convention and not args.conventions:
            if args.wire:
                out.write(
                    f"SKIPPED: scenario '{scenario.name}' checks this project's conventions: add --conventions.\n"
                )
            continue
        if args.spec_version not in (None, *scenario.eras):
            out.write(
                f"SKIPPED: scenario '{scenario.name}' is not applicable at spec version {args.spec_version} "
                f"(it exists in {', '.join(scenario.eras)}).\n"
            )
            continue
        selected.append((scenario, args.spec_version or scenario.eras[-1]))
    return selected


def _advertised(
    link: Link, args: argparse.Namespace, headers: Mapping[str, str], out: TextIO, selected: list[tuple[Scenario, str]]
) -> tuple[list[tuple[Scenario, str]], list[tuple[str, list[ConformanceCheck]]]]:
    """Without ``--wire``: the selected scenarios whose wire the server advertises. Without ``--spec-version``,
    a server that refuses 2026-07-28 as one that speaks only 2025-11-25 does is checked at 2025-11-25. An era
    whose capabilities cannot be read is one failure (with that hint when it was asked for)."""
    if args.wire:
        return selected, []
    found: dict[str, Discovery] = {}
    kept: list[tuple[Scenario, str]] = []
    failures: list[tuple[str, list[ConformanceCheck]]] = []

    def discovered(era: str) -> Discovery:  # read once an era
        if era not in found:
            found[era] = Discovery(link, args.url, era, headers)
        return found[era]

    for scenario, era in selected:
        discovery = discovered(era)
        if discovery.legacy_only and args.spec_version is None and LEGACY in scenario.eras:
            if LEGACY not in found:  # no era was asked for: the server's wires are judged at the one it speaks
                out.write(f"The server speaks only {LEGACY} (it refused {era} as such a server does): checked there.\n")
            era, discovery = LEGACY, discovered(LEGACY)
        if discovery.error is not None:
            if not any(name == f"sessions-discover-{era}" for name, _ in failures):
                failures.append((f"sessions-discover-{era}", [failed_to_run("sessions-discover", discovery.error)]))
            continue
        lacking = discovery.error or discovery.advertises(scenario.wire)
        if lacking is None:
            kept.append((scenario, era))
        else:
            out.write(
                f"SKIPPED: scenario '{scenario.name}': the server does not advertise it at {era} ({lacking}); "
                f"--wire {scenario.wire} checks it anyway.\n"
            )
    return kept, failures


def _run(
    link: Link, args: argparse.Namespace, headers: Mapping[str, str], out: TextIO, palette: Palette
) -> list[tuple[str, list[ConformanceCheck]]]:
    settings = Settings(args.conventions, args.tool, tuple(args.not_found_code), tuple(args.required_code))
    selected, results = _advertised(link, args, headers, out, _selected(args, out))
    url = printable(args.url)
    for name, checks in results:
        out.write(f"\n=== Reading what the server advertises: {name} ===\n")
        if args.json:
            out.write(f"Results saved to {write_checks(Path(args.json), name, checks)}\n")
        print_checks(checks, out, palette)
    if not selected and not results and not args.wire:
        out.write("The server advertises none of the session wires: nothing to check (--wire WIRE checks one).\n")
    out.write(f"Running session wires ({len(selected)} scenarios) against {url}\n\n")
    for scenario, era in selected:
        out.write(f"\n=== Running scenario: {scenario.name} ===\n")
        out.write(f"Running client scenario '{scenario.name}' against server: {url} (spec version {era})\n")
        checks = run_scenario(scenario, link, args.url, era, headers, settings)
        if args.json:
            out.write(f"Results saved to {write_checks(Path(args.json), scenario.name, checks)}\n")
        print_checks(checks, out, palette)
        results.append((scenario.name, checks))
    return results


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
    prog: str = "mcp-sessions-conformance",
) -> int:
    """Run the pack's command line on ``argv`` (default: the process's arguments); returns the exit status.

    A usage error argparse finds exits (status 2) as any command line does; ``prog`` names the command
    in its messages."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    environ = os.environ if environ is None else environ
    args = _parser(prog).parse_args(argv)
    try:
        headers = _headers(args.header)
        baseline = None if args.expected_failures is None else load_expected_failures(Path(args.expected_failures))
    except (ValueError, OSError) as exc:
        print(f"{prog}: {exc}", file=stderr)
        return EXIT_USAGE
    palette = Palette.for_stream(stdout, environ)
    with Link(args.request_timeout) as link:
        results = _run(link, args, headers, stdout, palette)
    failed = print_summary(results, stdout)
    if baseline is None:
        return 1 if failed else 0
    verdict = evaluate(results, baseline)
    print_baseline(verdict, stdout, palette)
    return verdict.exit_code

"""``mcp-sessions conformance``: the conformance pack's own command, run when its distribution is installed.

The pack is ``mcp-sessions-conformance``, a distribution of its own (``conformance/`` in the repository)
that imports nothing of this package; this command hands it every argument after ``conformance``, so
both commands take the same arguments, run the same checks and end with the same statuses.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Final, TextIO

from ._exit import EXIT_USAGE

INSTALL: Final = (
    "mcp-sessions conformance runs the conformance pack, which is not installed. It is the distribution "
    "mcp-sessions-conformance, not on the package index: from a clone of the mcp-sessions repository, "
    "pip install ./conformance (see docs/conformance.md)."
)


def add_conformance_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """List ``conformance`` among the commands; :func:`run_conformance` reads what follows it, never argparse."""
    commands.add_parser(
        "conformance",
        add_help=False,
        help="check how well a server implements each session wire (needs the pack: pip install ./conformance)",
    )


def run_conformance(argv: Sequence[str], stdout: TextIO, stderr: TextIO, environ: Mapping[str, str]) -> int:
    """Run the pack's command line on ``argv`` (the arguments after ``conformance``); returns the exit status."""
    try:
        from mcp_sessions_conformance import main
    except ModuleNotFoundError as exc:
        if exc.name != "mcp_sessions_conformance":
            raise  # installed, but broken: its own error says what is missing
        print(INSTALL, file=stderr)
        return EXIT_USAGE
    return main(argv, stdout=stdout, stderr=stderr, environ=environ, prog="mcp-sessions conformance")

"""``mcp-sessions delete URL [SESSION]``: end a session, the counterpart of ``create``, over the same guarded client."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Final, TextIO

from . import EXIT_OK, Failed, UsageError
from ._create import add_request_arguments, sent

DESCRIPTION: Final = (
    "Send sessions/delete to the MCP endpoint URL for SESSION, the sessionId "
    "create printed: '-' (the default) reads it from standard input, which "
    "keeps the bearer secret out of ps and your shell history. Exit status: "
    "0 deleted, 1 unknown to the server, refused or unreachable, 2 usage error."
)


def add_arguments(delete: argparse.ArgumentParser) -> None:
    """The arguments of ``delete``."""
    delete.add_argument("url", help="the MCP endpoint, e.g. http://127.0.0.1:8000/mcp")
    delete.add_argument(
        "session",
        nargs="?",
        default="-",
        help="the sessionId, or '-' (the default): standard input",
    )
    add_request_arguments(delete)


def run(
    args: argparse.Namespace,
    stdin: TextIO,
    stdout: TextIO,
    stderr: TextIO,
    environ: Mapping[str, str],
) -> int:
    """Run ``delete``: end the session; returns the exit status."""
    given = stdin.read() if args.session == "-" else args.session
    token = given.strip()
    if not token:
        raise UsageError("no session: give its sessionId as SESSION, or on standard input")
    deleted = sent(args, environ, "delete", lambda shim, **request: shim.delete(args.url, **request), token)
    if not deleted:
        raise Failed("the server no longer knew this session (deleted, or expired)")
    stdout.write("deleted\n")
    return EXIT_OK

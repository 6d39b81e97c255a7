"""``mcp-sessions grants``: the grants a gateway holds for users at vendors' authorization servers (its
``--upstream-token oauth``, ``oauth:`` variables, ``--id-jag-subject id_token``), listed or revoked, never a token.

As for ``sessions`` and ``gateway status``, the two views are two doors. A user's own: ``mcp-sessions grants URL``
(the gateway's MCP endpoint) asks ``GET /oauth/grants`` at its origin with her token (``--bearer-env`` or
``--bearer-file``, never the command line), and ``--revoke`` asks ``DELETE`` (``--server ISSUER``: the one there).
The operator's: ``--status URL`` (the gateway's ``--status-port``) or ``--status-socket PATH`` asks ``GET
/status/grants``, every user's (``--principal``, ``--server``: some), sending no credential (the loopback or the
socket's directory is the guard), and ``--revoke --principal NAME`` asks ``DELETE``. A revocation is the gateway's:
in its store, then at the vendor (RFC 7009), whose line says where the vendor was not told. A ``--config``
gateway's grants are each a server's of its file: its name the first column, as for ``sessions``. Requests and
answers as ``sessions``' (``_sessions.fetched``); times in UTC; ``--json`` prints the gateway's answer (wall-clock
seconds).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from typing import Any, Final, TextIO
from urllib.parse import urlencode, urlsplit

from . import EXIT_OK, UsageError
from ._credentials import add_credential_arguments, credential_headers
from ._sessions import cell, fetched, table, with_server

DESCRIPTION: Final = (
    "List your grants at vendors' servers held by the gateway whose MCP endpoint is URL, or revoke them "
    "(--revoke; --server ISSUER: one), with your token from --bearer-env VAR or --bearer-file FILE. An operator: "
    "--status URL (the gateway's --status-port) or --status-socket PATH, every user's grants (--principal NAME: "
    "hers), or --revoke --principal NAME. Exit status: 0 done, 1 refused or unreachable, 2 usage error."
)
COLUMNS: Final = ("authorization_server", "resource", "scope", "granted_at", "expires_at")
HEADINGS: Final = {"authorization_server": "AUTHORIZATION SERVER", "granted_at": "GRANTED", "expires_at": "EXPIRES"}
HERE_ONLY: Final = ", in the gateway only: the server was not told (revoke it there too)"


def add_arguments(grants: argparse.ArgumentParser) -> None:
    """The arguments of ``grants``."""
    grants.add_argument(
        "url",
        nargs="?",
        help="the gateway's MCP endpoint, e.g. http://127.0.0.1:8000/mcp (your own grants)",
    )
    grants.add_argument("--status", metavar="URL", help="the gateway's status port instead: every user's grants")
    grants.add_argument("--status-socket", metavar="PATH", help="the gateway's status socket instead")
    grants.add_argument("--principal", metavar="NAME", help="with --status or --status-socket: this user's alone")
    grants.add_argument("--server", metavar="ISSUER", help="the grant at this authorization server alone")
    grants.add_argument("--revoke", action="store_true", help="revoke them, at the server and in the gateway")
    add_credential_arguments(grants)
    grants.add_argument("--json", action="store_true", help="print the gateway's answer as JSON")


def run(
    args: argparse.Namespace,
    stdin: TextIO,
    stdout: TextIO,
    stderr: TextIO,
    environ: Mapping[str, str],
) -> int:
    """Run ``grants``: list or revoke the caller's own, or, at the status port or socket, anyone's."""
    if [args.url, args.status, args.status_socket].count(None) != 2:
        raise UsageError("give the gateway's MCP endpoint (your grants), or --status URL or --status-socket PATH")
    operator = args.url is None
    query = {name: value for name, value in (("principal", args.principal), ("server", args.server)) if value}
    if operator:
        if args.revoke and not args.principal:
            raise UsageError("--revoke at the status port needs --principal NAME: whose grants to revoke")
        base = "http://localhost" if args.status is None else args.status.rstrip("/")
        url = base.removesuffix("/status") + "/status/grants"
        headers: dict[str, str] = {}
    else:
        if args.principal is not None:
            raise UsageError("--principal is the operator's (--status URL or --status-socket PATH): yours are yours")
        headers = credential_headers(args, environ)
        if "authorization" not in {name.lower() for name in headers}:
            raise UsageError("no token: give --bearer-env VAR or --bearer-file FILE")
        parts = urlsplit(args.url)
        url = f"{parts.scheme}://{parts.netloc}/oauth/grants"
    if query:
        url += "?" + urlencode(query)
    answer = fetched("DELETE" if args.revoke else "GET", url, headers, uds=args.status_socket)
    if args.json:
        stdout.write(json.dumps(answer, indent=2) + "\n")
        return EXIT_OK
    if args.revoke:
        revoked = answer.get("revoked") or []
        for each in revoked:
            entry = each if isinstance(each, dict) else {"authorization_server": each}
            whose = f"{cell(entry['principal'])}'s grant" if "principal" in entry else "the grant"  # the operator's
            said = HERE_ONLY if entry.get("notified") is False else ""
            stdout.write(f"revoked {whose} at {cell(entry.get('authorization_server'))}{said}\n")
        if not revoked:
            stdout.write("no grant to revoke\n")
        return EXIT_OK
    listed = [row for row in answer.get("grants", []) if isinstance(row, dict)]
    columns = with_server(listed, ("principal", *COLUMNS) if operator else COLUMNS)
    rows = [[_shown(column, row.get(column)) for column in columns] for row in listed]
    stdout.write(table([HEADINGS.get(column, column.upper()) for column in columns], rows))
    return EXIT_OK


def _shown(column: str, value: Any) -> str:
    """A cell: a time (wall-clock seconds) in UTC to the second, anything else as ``sessions`` shows it."""
    if column in ("granted_at", "expires_at") and isinstance(value, int | float) and not isinstance(value, bool):
        return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(value))
    return cell(value)

"""What a ``gateway --stdio`` runs: ``mcp-sessions sessions URL``, a user's own conversations, listed, and one
ended; ``mcp-sessions gateway status URL``, the operator's view of every process.

The gateway answers with the caller's own only (``GET /mcp/sessions`` beside the MCP endpoint; ``DELETE
/mcp/sessions/DIGEST`` ends one), so the command needs the user's token: from the variable ``--bearer-env`` names
or the file ``--bearer-file`` names (``_credentials``), never the command line, where ``ps`` and the shell's
history would show it. Its requests go over ``create``'s guarded HTTP transport: no redirect followed, each answer
bounded, every string of the server's printed :func:`printable`. ``gateway status`` reads the gateway's
``--status-port`` (``http://127.0.0.1:PORT``), served on the loopback address alone, or its ``--status-socket
PATH``, and sends no credential (the loopback or the socket's directory is the guard): every live process (its kind,
whose, a digest of its conversation, age, idle time, memory, requests served), then each user's processes and
everyone's against the limits. The tables say each duration and size with its unit; ``--json`` prints the
gateway's numbers (seconds, bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Mapping
from typing import Any, Final, TextIO

from .._wire import printable
from . import EXIT_OK, Failed, UsageError
from ._create import DEADLINE, _guarded, excerpt
from ._credentials import add_credential_arguments, credential_headers

DESCRIPTION: Final = (
    "List your own conversations on the gateway whose MCP endpoint is URL "
    "(its --stdio processes), or end one (--end DIGEST). Your token comes "
    "from --bearer-env VAR or --bearer-file FILE. Exit status: 0 done, "
    "1 refused, unknown or unreachable, 2 usage error."
)
COLUMNS: Final = ("conversation", "kind", "age", "idle", "requests")
STATUS_DESCRIPTION: Final = (
    "Show what a gateway --stdio runs, from its --status-port or --status-socket: each process, "
    "and each user's against the limits. Exit status: 0 shown, 1 unreachable "
    "or refused, 2 usage error."
)
STATUS_COLUMNS: Final = ("kind", "principal", "conversation", "pid", "age", "idle", "memory", "requests")


def add_arguments(sessions: argparse.ArgumentParser) -> None:
    """The arguments of ``sessions``."""
    sessions.add_argument(
        "url",
        help="the gateway's MCP endpoint, e.g. http://127.0.0.1:8000/mcp",
    )
    sessions.add_argument(
        "--end",
        metavar="DIGEST",
        help="end the conversation of yours the list names so",
    )
    add_credential_arguments(sessions)
    sessions.add_argument(
        "--json",
        action="store_true",
        help="print the gateway's answer as JSON",
    )


def add_status_arguments(status: argparse.ArgumentParser) -> None:
    """The arguments of ``gateway status``."""
    status.add_argument(
        "url",
        nargs="?",
        help="the gateway's status port, e.g. http://127.0.0.1:8001",
    )
    status.add_argument(
        "--status-socket",
        metavar="PATH",
        help="the gateway's status socket instead (its --status-socket)",
    )
    status.add_argument(
        "--json",
        action="store_true",
        help="print the gateway's answer as JSON",
    )


def run(
    args: argparse.Namespace,
    stdin: TextIO,
    stdout: TextIO,
    stderr: TextIO,
    environ: Mapping[str, str],
) -> int:
    """Run ``sessions`` (list the caller's conversations, or end one), or ``gateway status``; the exit status."""
    if args.command == "status":
        if (args.url is None) == (args.status_socket is None):
            raise UsageError("give the status port's URL, or --status-socket PATH")
        if args.status_socket is not None:  # any name: no page reaches a Unix socket
            return _status("http://localhost", args.json, stdout, args.status_socket)
        return _status(args.url.rstrip("/"), args.json, stdout)
    headers = credential_headers(args, environ)
    if "authorization" not in {name.lower() for name in headers}:
        raise UsageError("no token: give --bearer-env VAR or --bearer-file FILE")
    url = args.url.rstrip("/") + "/sessions"
    if args.end is not None:
        answer = fetched("DELETE", f"{url}/{args.end}", headers)
        if args.json:
            stdout.write(json.dumps(answer, indent=2) + "\n")
        else:
            stdout.write(f"ended {printable(args.end)}\n")
        return EXIT_OK
    answer = fetched("GET", url, headers)
    if args.json:
        stdout.write(json.dumps(answer, indent=2) + "\n")
        return EXIT_OK
    conversations = answer.get("conversations", [])
    columns = with_server(conversations, COLUMNS)
    rows = [[_shown(column, row.get(column)) for column in columns] for row in conversations]
    stdout.write(table([column.upper() for column in columns], rows))
    return EXIT_OK


def with_server(rows: list[Any], columns: tuple[str, ...]) -> tuple[str, ...]:
    """``columns``, and first the server's where the rows name one (a gateway of many servers: ``--config``)."""
    return ("server", *columns) if any(isinstance(row, dict) and "server" in row for row in rows) else columns


def _status(url: str, as_json: bool, stdout: TextIO, path: str | None = None) -> int:
    """``gateway status``: the operator's view (from the Unix socket ``path`` if given), as JSON or as a table and
    the limits."""
    if not url.endswith("/status"):
        url += "/status"
    answer = fetched("GET", url, uds=path)
    if as_json:
        stdout.write(json.dumps(answer, indent=2) + "\n")
        return EXIT_OK
    processes = answer.get("processes", [])
    columns = with_server(processes, STATUS_COLUMNS)
    rows = [[_shown(column, process.get(column)) for column in columns] for process in processes]
    stdout.write(table([column.upper() for column in columns], rows))
    stdout.write("\n")
    totals = [("", answer.get("total", {}))]
    if isinstance(servers := answer.get("servers"), dict) and servers:  # many (--config): each against its own
        totals = [(f" on {cell(name)}", each.get("total", {})) for name, each in servers.items()]
    for where, total in totals:
        running, limit = cell(total.get("processes")), cell(total.get("limit"))
        stdout.write(f"processes{where}: {running} of {limit} (--max-processes)\n")
    for user in answer.get("users", []):
        principal = cell(user.get("principal"))
        if "server" in user:  # a gateway of many servers (--config): each user's count is one server's
            principal += f" on {cell(user['server'])}"
        running = cell(user.get("processes"))
        limit = cell(user.get("limit"))
        said = f"{running} of {limit} (--max-processes-per-principal)"
        stdout.write(f"  {principal}: {said}\n")
    if isinstance(ended := answer.get("ended"), dict) and ended:
        stdout.write("ended: " + ", ".join(f"{cell(count)} {cell(why)}" for why, count in sorted(ended.items())) + "\n")
    if isinstance(keys := answer.get("keys"), dict):
        error = keys.get("error")
        state = "fetched" if error is None else f"failing: {cell(error)}"
        count = cell(keys.get("keys"))
        source = cell(keys.get("jwks"))
        stdout.write(f"\nkeys: {count} from {source}, {state}\n")
    return EXIT_OK


def _shown(column: str, value: Any) -> str:
    """A cell with its unit: memory (bytes) in MiB, age and idle time (seconds) in the largest unit that keeps two."""
    if column == "memory" and isinstance(value, int):
        return f"{value / (1 << 20):.1f} MiB"
    if column in ("age", "idle") and isinstance(value, int | float):
        return _duration(value)
    return cell(value)


def _duration(seconds: float) -> str:
    """``seconds`` as a person reads it: ``45 s``, ``3 min``, ``5 h``, ``12 d`` (whole units, at least two of them)."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


def fetched(method: str, url: str, headers: Mapping[str, str] | None = None, uds: str | None = None) -> dict[str, Any]:
    """The JSON object a gateway answers ``method url`` with (through the Unix socket ``uds``, if given);
    :class:`Failed`, saying why, for anything else."""
    try:
        import httpx
    except ImportError as exc:
        raise UsageError(f"{exc} (pip install 'mcp-sessions[gateway]')") from None
    transport, _ = _guarded(DEADLINE, uds)

    async def send() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport) as client:
            return await client.request(method, url, headers=headers)

    try:
        answer = asyncio.run(send())
    except (httpx.HTTPError, OSError) as exc:
        where = printable(url if uds is None else uds)
        raise Failed(f"no answer from {where}: {excerpt(str(exc))}") from None
    try:
        body = answer.json()
    except ValueError:
        body = None
    if answer.status_code != 200 or not isinstance(body, dict):
        said = body.get("error") if isinstance(body, dict) else None
        shown = excerpt(str(said) if said else answer.content)
        raise Failed(f"HTTP {answer.status_code}: {shown}")
    return body


def cell(value: object) -> str:
    """A value as a table shows it: nothing as ``-``, the server's strings printable."""
    return "-" if value is None else printable(str(value))


def table(header: list[str], rows: list[list[str]]) -> str:
    """Columns aligned by their widest cell, two spaces apart."""
    every_row = [header, *rows]
    widths = [max(len(row[i]) for row in every_row) for i in range(len(header))]
    lines = []
    for row in every_row:
        cells = [text.ljust(width) for text, width in zip(row, widths, strict=True)]
        lines.append("  ".join(cells).rstrip() + "\n")
    return "".join(lines)

"""``mcp-sessions create``: open a session on a server and print how to pass it through request metadata."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
from typing import TYPE_CHECKING, Final, TextIO

from ._exit import EXIT_INVALID, EXIT_OK, UsageError

if TYPE_CHECKING:
    from ..client import SessionHandle

INSPECTOR_META_KEY: Final = "io.modelcontextprotocol/session"
LEGACY_VERSION: Final = "2025-11-25"


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise UsageError(f"--header takes 'Name: value', got {text!r}")
    return name.strip(), value.strip()


def run_create(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run ``create``: open a session and print how to pass it; returns the exit status."""
    try:
        from ..client import HttpxSessionTransport, SessionError
    except ImportError as exc:
        raise UsageError(f"{exc} (create sends its request with httpx)") from None
    headers = dict(_header(h) for h in args.header)
    version = LEGACY_VERSION if args.legacy else args.protocol_version

    async def create() -> SessionHandle:
        shim = HttpxSessionTransport(auto_create=False)
        try:
            return await shim.create(args.url, protocol_version=version, headers=headers)
        finally:
            await shim.aclose()

    try:
        session = asyncio.run(create())
    except SessionError as exc:
        print(f"mcp-sessions create: the server refused sessions/create: {exc}", file=stderr)
        return EXIT_INVALID
    except OSError as exc:
        print(f"mcp-sessions create: could not reach {args.url}: {exc}", file=stderr)
        return EXIT_INVALID
    except Exception as exc:  # httpx's errors, without importing httpx here
        print(f"mcp-sessions create: no session from {args.url}: {type(exc).__name__}: {exc}", file=stderr)
        return EXIT_INVALID
    token = session.token
    meta = json.dumps({"sessionId": token}, separators=(",", ":"))
    expires = session.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ") if session.expires_at else None
    if args.json:
        report = {
            "sessionId": token,
            "id": session.id,
            "expiresAt": expires,
            "meta": {INSPECTOR_META_KEY: {"sessionId": token}},
        }
        stdout.write(json.dumps(report, indent=2) + "\n")
        return EXIT_OK
    stdout.write(
        f"session: {session.id}  (the stable id: safe to log)\n"
        f"expires: {expires}\n"
        f"sessionId: {token}\n"
        "  (a bearer secret: whoever holds it uses the session)\n"
        "\n"
        "Send it in each request's params._meta, for example with the MCP Inspector CLI:\n"
        f"  --metadata {shlex.quote(f'{INSPECTOR_META_KEY}={meta}')}\n"
        "or any client's request metadata:\n"
        f"  {json.dumps({INSPECTOR_META_KEY: {'sessionId': token}})}\n"
    )
    return EXIT_OK

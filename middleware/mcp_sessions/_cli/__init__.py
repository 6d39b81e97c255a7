"""``mcp-sessions``: generate signing keys, inspect session tokens, open a session for a client that cannot.

    mcp-sessions keygen                          HS256: MCP_SESSIONS_SECRET=...
    mcp-sessions keygen --alg ES256 --kid k1     a P-256 key pair: MCP_SESSIONS_KEYS='{"keys":[...]}'
    mcp-sessions keygen --alg EdDSA --format jwks --out keys.jwk --public-out public.jwk
    mcp-sessions inspect -  < token.txt          decode (no verification)
    MCP_SESSIONS_SECRET=... mcp-sessions inspect -   decode, verify, and say why it is or is not valid
    mcp-sessions create http://127.0.0.1:8000/mcp   open a session; print its id and how to pass it
    mcp-sessions gateway --upstream http://127.0.0.1:3001/mcp   sessions in front of any MCP server
    mcp-sessions conformance http://127.0.0.1:8000/mcp   check each session wire the server implements

Private key material goes only to standard output or to a new file with mode
0600. ``inspect`` never prints the token it is given, only its header and
claims; pass ``-`` (or nothing) to read it from standard input and keep it
out of your shell history.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from .._conformance import add_conformance_parser, run_conformance
from .._gateway import add_gateway_parser, run_gateway
from ..profiles import SESSION_META_KEY
from ._exit import EXIT_INVALID, EXIT_OK, EXIT_USAGE, UsageError
from ._inspect import run_inspect
from ._keygen import run_keygen

if TYPE_CHECKING:
    from ..client import SessionHandle

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-sessions",
        description="Keys and tokens for mcp-sessions (data-layer sessions for MCP servers).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_key_commands(commands)
    add_conformance_parser(commands)
    add_gateway_parser(commands)
    return parser


def _add_key_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``keygen``, ``inspect`` and ``create``: keys, tokens, and a session for a client that cannot open one."""
    keygen = commands.add_parser(
        "keygen",
        help="generate a signing key (HS256 secret, or an ES256 or Ed25519 key pair)",
        description=(
            "Generate a signing key. Default: an HS256 secret as MCP_SESSIONS_SECRET=... With --kid, "
            "kid:secret for MCP_SESSIONS_KEYS. ES256 and EdDSA: a private JWKS in MCP_SESSIONS_KEYS. "
            "Private material goes to standard output, or to --out (a new file, mode 0600)."
        ),
    )
    keygen.add_argument("--alg", default="HS256", help="HS256 (default), ES256, or EdDSA (Ed25519)")
    keygen.add_argument("--kid", help="the key id (default: generated); needed to rotate keys later")
    keygen.add_argument(
        "--format", choices=("env", "jwks"), default="env", help="an environment line (default) or a JWKS document"
    )
    keygen.add_argument("--out", metavar="FILE", help="write the private key here (mode 0600) instead of stdout")
    keygen.add_argument("--public-out", metavar="FILE", help="also write the public JWKS here (ES256, EdDSA)")
    keygen.add_argument("--force", action="store_true", help="overwrite existing files")

    inspect = commands.add_parser(
        "inspect",
        help="decode a session token and, given keys, say whether and why it is valid",
        description=(
            "Decode a session id (or state token) without verification, and verify it when keys are given "
            "(--secret, --keys, or MCP_SESSIONS_SECRET / MCP_SESSIONS_KEYS). The token itself is never printed. "
            "Exit status: 0 decoded (and valid, if checked), 1 invalid, 2 usage error."
        ),
    )
    inspect.add_argument("token", nargs="?", help="the token, or '-' (the default) to read it from standard input")
    inspect.add_argument("--secret", help="the HS256 secret (prefer MCP_SESSIONS_SECRET: arguments show in ps)")
    inspect.add_argument("--keys", help="a JWKS, kid:secret pairs, or @FILE, as in MCP_SESSIONS_KEYS")
    inspect.add_argument("--issuer", help="expected iss (default MCP_SESSIONS_ISSUER or 'mcp-sessions')")
    inspect.add_argument("--audience", help="expected aud (default MCP_SESSIONS_AUDIENCE or 'mcp-sessions')")
    inspect.add_argument("--leeway", type=float, default=0.0, help="seconds of clock skew to allow (default 0)")
    inspect.add_argument("--json", action="store_true", help="print a JSON report")

    create = commands.add_parser(
        "create",
        help="open a session on a server and print how to pass it (for clients that can only add metadata)",
        description=(
            "Send sessions/create to the MCP endpoint URL and print the new session: its stable id, its "
            "sessionId (a bearer secret) and the exact argument that passes it through tools that can only "
            "add request metadata, such as the MCP Inspector CLI's --metadata. Exit status: 0 created, "
            "1 refused or unreachable, 2 usage error."
        ),
    )
    create.add_argument("url", help="the MCP endpoint, e.g. http://127.0.0.1:8000/mcp")
    create.add_argument("--protocol-version", default="2026-07-28", help="the era of the request (default 2026-07-28)")
    create.add_argument("--legacy", action="store_true", help="send it as a 2025-11-25 request")
    create.add_argument(
        "--header", action="append", default=[], metavar="'NAME: VALUE'", help="add a header (e.g. Authorization)"
    )
    create.add_argument("--json", action="store_true", help="print the session as JSON")


def main(
    argv: Sequence[str] | None = None,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run the command line; returns the exit status."""
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    environ = os.environ if environ is None else environ
    args = _parser().parse_args(argv)
    try:
        if args.command == "keygen":
            return run_keygen(args, stdout, stderr)
        if args.command == "create":
            return run_create(args, stdout, stderr)
        if args.command == "gateway":
            return run_gateway(args, stderr, environ)
        if args.command == "conformance":
            return run_conformance(args, stdout, stderr, environ)
        return run_inspect(args, stdin, stdout, environ)
    except UsageError as exc:
        print(f"mcp-sessions {args.command}: {exc}", file=stderr)
        return EXIT_USAGE


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
    version = "2025-11-25" if args.legacy else args.protocol_version

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
            "meta": {SESSION_META_KEY: {"sessionId": token}},
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
        f"  --metadata {shlex.quote(f'{SESSION_META_KEY}={meta}')}\n"
        "or any client's request metadata:\n"
        f"  {json.dumps({SESSION_META_KEY: {'sessionId': token}})}\n"
    )
    return EXIT_OK

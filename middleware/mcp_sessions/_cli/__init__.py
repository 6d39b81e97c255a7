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
out of your shell history. ``conformance`` is the conformance pack's own command line
(the ``mcp-sessions-conformance`` distribution, ``pip install ./conformance`` from a clone),
run with every argument after it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from .._gateway import add_gateway_parser, run_gateway
from ._conformance import add_conformance_parser, run_conformance
from ._create import add_create_parser, run_create
from ._exit import EXIT_USAGE, UsageError
from ._inspect import run_inspect
from ._keygen import run_keygen

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-sessions",
        description="Keys and tokens for mcp-sessions (data-layer sessions for MCP servers).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_key_commands(commands)
    add_create_parser(commands)
    add_conformance_parser(commands)
    add_gateway_parser(commands)
    return parser


def _add_key_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``keygen`` and ``inspect``: keys and tokens."""
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
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["conformance"]:  # the pack's arguments, read by the pack
        return run_conformance(argv[1:], stdout, stderr, environ)
    args = _parser().parse_args(argv)
    try:
        if args.command == "keygen":
            return run_keygen(args, stdout, stderr)
        if args.command == "create":
            return run_create(args, stdout, stderr)
        if args.command == "gateway":
            return run_gateway(args, stderr, environ)
        return run_inspect(args, stdin, stdout, environ)
    except UsageError as exc:
        print(f"mcp-sessions {args.command}: {exc}", file=stderr)
        return EXIT_USAGE

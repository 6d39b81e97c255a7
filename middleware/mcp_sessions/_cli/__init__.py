"""``mcp-sessions``: keys, tokens, a session on a server, the gateway in front of one, the conformance pack.

    mcp-sessions keygen                          HS256: MCP_SESSIONS_SECRET=...
    mcp-sessions keygen --alg ES256 --kid k1     a P-256 key pair: MCP_SESSIONS_KEYS='{"keys":[...]}'
    mcp-sessions keygen --alg EdDSA --format jwks --out keys.jwk --public-out public.jwk
    mcp-sessions inspect -  < token.txt          decode (no verification)
    MCP_SESSIONS_SECRET=... mcp-sessions inspect -   decode, verify, and say why it is or is not valid
    mcp-sessions create http://127.0.0.1:8000/mcp   open a session; print its id and how to pass it
    mcp-sessions delete http://127.0.0.1:8000/mcp -  < session.txt   end it (its sessionId from stdin)
    mcp-sessions gateway --upstream http://127.0.0.1:3001/mcp   sessions in front of any MCP server
    mcp-sessions connect https://mcp.example.com/mcp   a remote server as a host's stdio server, per conversation
    mcp-sessions gateway status http://127.0.0.1:8001   what a gateway --stdio runs (its --status-port)
    mcp-sessions sessions http://127.0.0.1:8000/mcp --bearer-file me.jwt   your own conversations there
    mcp-sessions grants http://127.0.0.1:8000/mcp --bearer-file me.jwt   your grants at vendors' servers there
    mcp-sessions grants --status http://127.0.0.1:8001   every user's (--revoke --principal NAME: revoke hers)
    mcp-sessions conformance http://127.0.0.1:8000/mcp   check each session wire the server implements

Private key material goes only to standard output or to a new file with mode
0600. ``inspect`` never prints the token it is given, only its header and
claims; pass ``-`` (or nothing) to read it from standard input and keep it
out of your shell history. ``conformance`` is the conformance pack's own command line
(the ``mcp-sessions-conformance`` distribution, ``pip install ./conformance`` from a clone),
run with every argument after it. ``keygen`` is here; each other command's module is imported when that
command runs.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import importlib
import json
import os
import secrets
import shlex
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from types import FrameType, ModuleType
from typing import Any, Final, NoReturn, TextIO

from .._version import __version__

__all__ = ["main"]

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """A problem with the command line or its inputs: reported on stderr with exit status 2."""


class Failed(Exception):
    """The command's request was refused, unanswered, or found no session: reported on stderr with exit status 1."""


COMMANDS: Final = {
    "keygen": "generate a signing key (HS256 secret, or an ES256 or Ed25519 key pair)",
    "inspect": "decode a session token and, given keys, say whether and why it is valid",
    "create": "open a session on a server and print how to pass it (for clients that can only add metadata)",
    "delete": "end a session on a server (the sessionId create printed)",
    "gateway": (
        "serve sessions in front of any MCP server (any language), forwarding "
        "to it over HTTP; 'gateway status URL': what a gateway --stdio runs"
    ),
    "sessions": "list your own conversations on a gateway --stdio, or end one",
    "grants": "list or revoke your grants at vendors' servers on a gateway (an operator: anyone's, --status)",
    "connect": "serve a remote MCP server to a stdio host (Claude Code…), naming the host's conversation",
    "conformance": "check how well a server implements each session wire (needs the pack: pip install ./conformance)",
}
"""Every command and what it does, as ``mcp-sessions --help`` lists them."""
ALGORITHMS: Final = ("HS256", "ES256", "EdDSA")
_ALIASES: Final = {"hs256": "HS256", "es256": "ES256", "eddsa": "EdDSA", "ed25519": "EdDSA"}
_KID_PREFIX: Final = {"HS256": "hs", "ES256": "es", "EdDSA": "ed"}
KEYGEN: Final = (
    "Generate a signing key. Default: an HS256 secret as "
    "MCP_SESSIONS_SECRET=... With --kid, kid:secret for MCP_SESSIONS_KEYS. "
    "ES256 and EdDSA: a private JWKS in MCP_SESSIONS_KEYS. Private material "
    "goes to standard output, or to --out (a new file, mode 0600)."
)

INSTALL: Final = (
    "mcp-sessions conformance runs the conformance pack, which is not "
    "installed. It is the distribution mcp-sessions-conformance, not on the "
    "package index: from a clone of the mcp-sessions repository, "
    "pip install ./conformance (see docs/conformance.md)."
)
DESCRIPTION: Final = (
    "mcp-sessions (data-layer sessions for MCP servers): signing keys, "
    "session tokens, a session on a server, the gateway in front of any "
    "server, and the conformance pack."
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but a flag is taken by its whole name only (``--stdi`` is not ``--stdio``), and a usage
    error is one line that names the command and what was wrong, then exit status 2 (as git's and uvicorn's are)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} ({self.prog} --help shows how it is used)\n")


def _parser(command: str | None) -> argparse.ArgumentParser:
    """The command line, with the arguments of ``command`` only: the others are listed, not imported."""
    parser = _Parser(prog="mcp-sessions", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"mcp-sessions {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in COMMANDS.items():
        # The pack reads its own arguments.
        if name != command or name == "conformance":
            commands.add_parser(name, help=text, add_help=False)
        elif name == "keygen":
            keygen = commands.add_parser(name, help=text, description=KEYGEN)
            _add_keygen_arguments(keygen)
        else:
            module = _module(name)
            subparser = commands.add_parser(name, help=text, description=module.DESCRIPTION)
            module.add_arguments(subparser)
    return parser


def _status_parser() -> argparse.ArgumentParser:
    # What a gateway runs: the operator's view beside a user's own.
    module = _module("sessions")
    description = module.STATUS_DESCRIPTION
    prog = "mcp-sessions gateway status"
    parser = _Parser(prog=prog, description=description)
    module.add_status_arguments(parser)
    parser.set_defaults(command="status")
    return parser


def _module(name: str) -> ModuleType:
    """The module of the command ``name``, imported now: its ``add_arguments``, ``DESCRIPTION`` and ``run``."""
    relative = ".._gateway" if name == "gateway" else f"._{name}"
    return importlib.import_module(relative, __name__)


def main(
    argv: Sequence[str] | None = None,
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run the command line; returns the exit status."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    environ = os.environ if environ is None else environ
    argv = list(sys.argv[1:] if argv is None else argv)
    # The pack's arguments, read by the pack.
    if argv[:1] == ["conformance"]:
        return _run_conformance(argv[1:], stdout, stderr, environ)
    # The operator's view of a running gateway, not one to serve.
    if argv[:2] == ["gateway", "status"]:
        args = _status_parser().parse_args(argv[2:])
    else:
        command = argv[0] if argv else None
        with _ended_quietly(command == "gateway"):  # its modules load: nothing of it made yet
            parser = _parser(command)
            args, unknown = parser.parse_known_args(argv)
        if unknown:  # the command's, which argparse leaves to the top level to refuse
            name = f"{parser.prog} {args.command}"
            parser.exit(EXIT_USAGE, f"{name}: unrecognized arguments: {' '.join(unknown)} ({name} --help shows them)\n")
        if args.command == "gateway":  # which flags were given, whatever their values: --config's file yields to them
            args.command_line = argv[1:]
    try:
        if args.command == "keygen":
            return _keygen(args, stdout, stderr)
        name = "sessions" if args.command == "status" else args.command
        status: int = _module(name).run(args, stdin, stdout, stderr, environ)
        return status
    except (UsageError, Failed) as exc:
        name = "gateway status" if args.command == "status" else args.command
        print(f"mcp-sessions {name}: {exc}", file=stderr)
        return EXIT_USAGE if isinstance(exc, UsageError) else EXIT_INVALID


@contextlib.contextmanager
def _ended_quietly(gateway: bool) -> Iterator[None]:
    """While the gateway's modules load, before its start notes signals (``_gateway._serving.StartSignals``): a
    SIGTERM or Ctrl-C ends the command with exit status 0, as one during its start does, where the system's default
    ended it by the signal and Python's Ctrl-C printed a traceback (nothing is made yet). Another command, or a
    thread other than the main one (which signals never reach), is left as it is."""
    if not gateway or threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.signal(sig, _exit_quietly) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _exit_quietly(sig: int, frame: FrameType | None) -> NoReturn:
    raise SystemExit(0)


def _run_conformance(
    argv: Sequence[str],
    stdout: TextIO,
    stderr: TextIO,
    environ: Mapping[str, str],
) -> int:
    """Run the conformance pack's command line on ``argv`` (the arguments after ``conformance``).

    The pack is ``mcp-sessions-conformance``, a distribution of its own (``conformance/`` in the repository)
    that imports nothing of this package; it gets every argument after ``conformance``, so both commands
    take the same arguments, run the same checks and end with the same statuses.
    """
    try:
        from mcp_sessions_conformance import main as pack_main
    except ModuleNotFoundError as exc:
        if exc.name != "mcp_sessions_conformance":
            # Installed, but broken: its own error says what is missing.
            raise
        print(INSTALL, file=stderr)
        return EXIT_USAGE
    prog = "mcp-sessions conformance"
    return pack_main(argv, stdout=stdout, stderr=stderr, environ=environ, prog=prog)


def _add_keygen_arguments(keygen: argparse.ArgumentParser) -> None:
    """The options of ``keygen``."""
    keygen.add_argument(
        "--alg",
        default="HS256",
        help="HS256 (default), ES256, or EdDSA (Ed25519)",
    )
    keygen.add_argument(
        "--kid",
        help="the key id (default: generated); needed to rotate keys later",
    )
    keygen.add_argument(
        "--format",
        choices=("env", "jwks"),
        default="env",
        help="an environment line (default) or a JWKS document",
    )
    keygen.add_argument(
        "--out",
        metavar="FILE",
        help="write the private key here (mode 0600) instead of stdout",
    )
    keygen.add_argument(
        "--public-out",
        metavar="FILE",
        help="also write the public JWKS here (ES256, EdDSA)",
    )
    keygen.add_argument(
        "--force",
        action="store_true",
        help="overwrite existing files",
    )


def _generate(algorithm: str, kid: str | None) -> tuple[dict[str, str], str | None]:
    """A new private JWK (with ``kid``, ``alg``, ``use``) and, for HS256, the secret itself."""
    # Here, not at the top: the other commands (connect, which a host starts per conversation) never load them.
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    from jwt.algorithms import ECAlgorithm, OKPAlgorithm

    from .._tokens import keys_from_config

    if kid is None:
        kid = f"{_KID_PREFIX[algorithm]}-{secrets.token_hex(4)}"
    secret: str | None = None
    if algorithm == "HS256":
        # 43 characters: 256 bits, well over the 32-byte minimum.
        secret = secrets.token_urlsafe(32)
        encoded = base64.urlsafe_b64encode(secret.encode()).rstrip(b"=").decode()
        jwk: dict[str, str] = {"kty": "oct", "k": encoded}
    elif algorithm == "ES256":
        pair = ec.generate_private_key(ec.SECP256R1())
        jwk = ECAlgorithm.to_jwk(pair, as_dict=True)
    else:
        private = ed25519.Ed25519PrivateKey.generate()
        jwk = OKPAlgorithm.to_jwk(private, as_dict=True)
    named = {"kty": jwk["kty"], "kid": kid, "alg": algorithm, "use": "sig"}
    rest = {k: v for k, v in jwk.items() if k != "kty"}
    jwk = named | rest
    # Read the key back with the parser the middleware uses: what this prints is what a server accepts.
    keys_from_config(json.dumps({"keys": [jwk]}), "the generated key")
    return jwk, secret


def _reads_back(kid: str) -> bool:
    """Whether ``kid:<secret>`` reads back, with the parser the middleware uses, as one key of this kid.

    A ',' or ':' would split the kid, a leading '#' make the line a comment, spaces be stripped.
    """
    from .._tokens import keys_from_config

    try:
        [key] = keys_from_config(f"{kid}:{secrets.token_urlsafe(32)}", "--kid")
    except ValueError:
        return False
    return key.kid == kid


def _write(path: str, text: str, *, force: bool, private: bool) -> None:
    """Write ``text`` to a new file (``force``: or over an existing one); ``private``: readable by its owner only."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o600 if private else 0o666)
    except FileExistsError:
        said = f"{path} exists: choose another file, or pass --force to overwrite it"
        raise UsageError(said) from None
    except OSError as exc:
        reason = exc.strerror or exc
        raise UsageError(f"cannot write {path}: {reason}") from None
    with open(fd, "w", encoding="utf-8") as file:
        # An existing file (with --force) keeps its old mode otherwise.
        if private:
            os.fchmod(fd, 0o600)
        file.write(text)


def _keygen(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run ``keygen``: print or write the new key; returns the exit status."""
    algorithm = _ALIASES.get(args.alg.lower())
    if algorithm is None:
        choices = ", ".join(ALGORITHMS)
        raise UsageError(f"unknown --alg {args.alg!r}: choose one of {choices}")
    if args.kid is not None and not _reads_back(args.kid):
        rule = "1 to 64 visible ASCII characters, without ',' or ':', not starting with '#'"
        raise UsageError(f"--kid must be {rule}")
    if args.public_out and algorithm == "HS256":
        why = "an HS256 secret has no public part"
        raise UsageError(f"--public-out needs a key pair (--alg ES256 or EdDSA): {why}")
    jwk, secret = _generate(algorithm, args.kid)
    kid = jwk["kid"]
    if args.format == "jwks":
        text = json.dumps({"keys": [jwk]}, indent=2) + "\n"
    elif secret is not None and args.kid is None:
        text = f"MCP_SESSIONS_SECRET={secret}\n"
    elif secret is not None:
        # Quoted if the kid needs it.
        text = f"MCP_SESSIONS_KEYS={shlex.quote(kid + ':' + secret)}\n"
    else:
        # Single quotes: a shell (and most .env readers) keep the JSON as one value.
        compact = json.dumps({"keys": [jwk]}, separators=(",", ":"))
        text = "MCP_SESSIONS_KEYS='" + compact + "'\n"
    if args.public_out:
        # What verifiers get.
        public_jwk = {k: v for k, v in jwk.items() if k not in ("d", "k")}
        public = json.dumps({"keys": [public_jwk]}, indent=2) + "\n"
        _write(args.public_out, public, force=args.force, private=False)
        print(f"wrote the public key (kid {kid!r}) to {args.public_out}", file=stderr)
    if args.out:
        _write(args.out, text, force=args.force, private=True)
        said = f"wrote the private key (kid {kid!r}, {algorithm}) to {args.out} (mode 0600)"
        print(said, file=stderr)
    else:
        stdout.write(text)
    return EXIT_OK

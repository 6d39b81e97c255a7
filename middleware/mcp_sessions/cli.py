"""``mcp-sessions``: generate signing keys, inspect session tokens, open a session for a client that cannot.

    mcp-sessions keygen                          HS256: MCP_SESSIONS_SECRET=...
    mcp-sessions keygen --alg ES256 --kid k1     a P-256 key pair: MCP_SESSIONS_KEYS='{"keys":[...]}'
    mcp-sessions keygen --alg EdDSA --format jwks --out keys.jwk --public-out public.jwk
    mcp-sessions inspect -  < token.txt          decode (no verification)
    MCP_SESSIONS_SECRET=... mcp-sessions inspect -   decode, verify, and say why it is or is not valid
    mcp-sessions create http://127.0.0.1:8000/mcp   open a session; print its id and how to pass it

Private key material goes only to standard output or to a new file with mode
0600. ``inspect`` never prints the token it is given, only its header and
claims; pass ``-`` (or nothing) to read it from standard input and keep it
out of your shell history.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import json
import os
import secrets
import shlex
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, TextIO

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from jwt.algorithms import ECAlgorithm, OKPAlgorithm

from ._keys import SessionKey, _keys_from_config
from ._tokens import SESSION_TOKEN_TYPE, STATE_TOKEN_TYPE, InvalidToken, KeySet

__all__ = ["main"]

ALGORITHMS: Final = ("HS256", "ES256", "EdDSA")
_ALIASES: Final = {"hs256": "HS256", "es256": "ES256", "eddsa": "EdDSA", "ed25519": "EdDSA"}
_KID_PREFIX: Final = {"HS256": "hs", "ES256": "es", "EdDSA": "ed"}
EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


class _UsageError(Exception):
    """A problem with the command line or its inputs: reported on stderr with exit status 2."""


# -- keygen ---------------------------------------------------------------------------------


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def generate(algorithm: str, kid: str | None) -> tuple[dict[str, Any], str | None]:
    """A new private JWK (with ``kid``, ``alg``, ``use``) and, for HS256, the secret itself."""
    if kid is None:
        kid = f"{_KID_PREFIX[algorithm]}-{secrets.token_hex(4)}"
    secret: str | None = None
    if algorithm == "HS256":
        secret = secrets.token_urlsafe(32)  # 43 characters: 256 bits, well over the 32-byte minimum
        jwk: dict[str, Any] = {"kty": "oct", "k": _b64url(secret.encode())}
    elif algorithm == "ES256":
        jwk = ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()), as_dict=True)
    else:
        jwk = OKPAlgorithm.to_jwk(ed25519.Ed25519PrivateKey.generate(), as_dict=True)
    jwk = {"kty": jwk["kty"], "kid": kid, "alg": algorithm, "use": "sig"} | {k: v for k, v in jwk.items() if k != "kty"}
    # Read the key back with the parser the middleware uses: what this prints is what a server accepts.
    [parsed] = _keys_from_config(json.dumps({"keys": [jwk]}), "the generated key")
    if parsed.kid != kid or parsed.algorithm != algorithm or not parsed.can_sign:
        raise RuntimeError("the generated key does not read back as a signing key")  # pragma: no cover
    return jwk, secret


def public_jwk(jwk: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in jwk.items() if k not in ("d", "k")}


def _write_private(path: str, text: str, *, force: bool) -> None:
    """Write ``text`` to a new file readable by its owner only (0600)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise _UsageError(f"{path} exists: choose another file, or pass --force to overwrite it") from None
    except OSError as exc:
        raise _UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o600)  # an existing file (with --force) keeps its old mode otherwise
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            fd = -1
            file.write(text)
    finally:
        if fd != -1:
            os.close(fd)


def _keygen(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    algorithm = _ALIASES.get(args.alg.lower())
    if algorithm is None:
        raise _UsageError(f"unknown --alg {args.alg!r}: choose one of {', '.join(ALGORITHMS)}")
    if args.kid is not None and not (0 < len(args.kid) <= 64 and args.kid.isprintable() and ":" not in args.kid):
        raise _UsageError("--kid must be 1 to 64 printable characters without ':'")
    if args.public_out and algorithm == "HS256":
        raise _UsageError("--public-out needs a key pair (--alg ES256 or EdDSA): an HS256 secret has no public part")
    jwk, secret = generate(algorithm, args.kid)
    if args.format == "jwks":
        text = json.dumps({"keys": [jwk]}, indent=2) + "\n"
    elif secret is not None and args.kid is None:
        text = f"MCP_SESSIONS_SECRET={secret}\n"
    elif secret is not None:
        text = f"MCP_SESSIONS_KEYS={jwk['kid']}:{secret}\n"
    else:
        # Single quotes: a shell (and most .env readers) keep the JSON as one value.
        text = "MCP_SESSIONS_KEYS='" + json.dumps({"keys": [jwk]}, separators=(",", ":")) + "'\n"
    if args.public_out:
        public = json.dumps({"keys": [public_jwk(jwk)]}, indent=2) + "\n"
        try:
            with open(args.public_out, "w" if args.force else "x", encoding="utf-8") as file:
                file.write(public)
        except FileExistsError:
            raise _UsageError(f"{args.public_out} exists: choose another file, or pass --force") from None
        print(f"wrote the public key (kid {jwk['kid']!r}) to {args.public_out}", file=stderr)
    if args.out:
        _write_private(args.out, text, force=args.force)
        print(f"wrote the private key (kid {jwk['kid']!r}, {algorithm}) to {args.out} (mode 0600)", file=stderr)
    else:
        stdout.write(text)
    return EXIT_OK


# -- inspect --------------------------------------------------------------------------------


def _segment(part: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def decode_unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and claims of a compact JWS, decoded WITHOUT verification."""
    parts = token.split(".")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"not a compact JWS: expected 3 dot-separated parts, found {len(parts)}")
    try:
        header, claims = _segment(parts[0]), _segment(parts[1])
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValueError("not a compact JWS: the header or the claims are not base64url-encoded JSON") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise ValueError("not a compact JWS: the header and the claims must be JSON objects")
    return header, claims


def _iso(timestamp: Any) -> str | None:
    if type(timestamp) is not int:
        return None
    try:
        return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return None


def _span(seconds: float) -> str:
    """A duration in the two largest units that matter: "2 d 3 h", "5 h 12 min", "40 s"."""
    days, rest = divmod(abs(int(seconds)), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    units = [(days, "d"), (hours, "h"), (minutes, "min"), (secs, "s")]
    first = next((i for i, (value, _) in enumerate(units) if value), 3)
    return " ".join(f"{value} {unit}" for value, unit in units[first : first + 2] if value) or "0 s"


def _when(timestamp: Any, now: float) -> str:
    iso = _iso(timestamp)
    if iso is None:
        return "not a whole number of seconds"
    delta = timestamp - now
    return f"{iso}, {'in ' + _span(delta) if delta > 0 else _span(delta) + ' ago'}"


def build_verifier(
    *, secret: str | None, keys_text: str | None, issuer: str, audience: str, leeway: float
) -> KeySet | None:
    """The keys to verify with, or ``None`` when none were given (public keys only is fine)."""
    keys: list[SessionKey] = []
    try:
        if secret:
            keys.append(SessionKey.from_secret(secret))
        if keys_text:
            keys.extend(_keys_from_config(keys_text, "the keys (--keys or MCP_SESSIONS_KEYS)"))
    except ValueError as exc:
        raise _UsageError(str(exc)) from None
    if not keys:
        return None
    try:
        return KeySet(keys, issuer=issuer, audience=audience, leeway=leeway)
    except ValueError as exc:
        raise _UsageError(str(exc)) from None


def explain(reason: str, header: Mapping[str, Any], claims: Mapping[str, Any], keys: KeySet, now: float) -> str:
    """Why a token failed, in words that name what to check (never the token itself)."""
    kid, alg, typ = header.get("kid"), header.get("alg"), header.get("typ")
    known = {key.kid: key for key in keys.keys}
    if reason == "expired":
        return f"it expired at {_when(claims.get('exp'), now)} (exp, plus a leeway of {keys.leeway:g} s)"
    if reason == "not yet valid":
        return f"iat or nbf is in the future ({_when(claims.get('iat'), now)}): check both clocks"
    if reason == "unknown key id":
        return f"its kid {kid!r} is none of the keys given ({', '.join(map(repr, known)) or 'none'})"
    if reason == "algorithm not allowed for this key":
        key = known.get(kid) if isinstance(kid, str) else None
        pinned = key.algorithm if key is not None else "?"
        return f"its header says alg {alg!r}, but key {kid!r} is pinned to {pinned}: a key verifies one algorithm"
    if reason == "wrong token type":
        return f"its typ is {typ!r}, not {SESSION_TOKEN_TYPE!r} (a session id) or {STATE_TOKEN_TYPE!r} (state)"
    if reason == "bad signature":
        return (
            f"the signature does not match key {kid!r}: the token was signed with another key that has the "
            "same kid, or it was edited after signing"
        )
    if reason == "wrong audience":
        return f"its aud {claims.get('aud')!r} is not {keys.audience!r} (--audience, MCP_SESSIONS_AUDIENCE)"
    if reason == "wrong issuer":
        return f"its iss {claims.get('iss')!r} is not {keys.issuer!r} (--issuer, MCP_SESSIONS_ISSUER)"
    if reason == "oversized":
        return f"it is longer than {keys.max_token_length} characters, the most a server reads"
    if reason.startswith("missing claim"):
        return f"the claim {reason.removeprefix('missing claim ')!r} is required (iss, aud, sid, iat, exp)"
    if reason == "malformed sid claim":
        return "its sid is not 16 to 128 base64url characters"
    if reason == "state belongs to another session":
        return "the state is bound to another session's sid"
    return reason


def _read_token(value: str | None, stdin: TextIO) -> str:
    if value is None or value == "-":
        value = stdin.read()
    token = value.strip()
    if not token:
        raise _UsageError("no token given: pass it as an argument, or on standard input with '-'")
    return token


def _inspect(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, environ: Mapping[str, str]) -> int:
    token = _read_token(args.token, stdin)
    now = datetime.now(UTC).timestamp()
    try:
        header, claims = decode_unverified(token)
    except ValueError as exc:
        if args.json:
            stdout.write(json.dumps({"valid": False, "reason": str(exc)}) + "\n")
        else:
            stdout.write(f"not a token this tool can read: {exc}\n")
        return EXIT_INVALID
    keys = build_verifier(
        secret=args.secret if args.secret is not None else environ.get("MCP_SESSIONS_SECRET") or None,
        keys_text=args.keys if args.keys is not None else environ.get("MCP_SESSIONS_KEYS") or None,
        issuer=args.issuer or environ.get("MCP_SESSIONS_ISSUER") or "mcp-sessions",
        audience=args.audience or environ.get("MCP_SESSIONS_AUDIENCE") or "mcp-sessions",
        leeway=args.leeway,
    )
    kind = {SESSION_TOKEN_TYPE: "session id", STATE_TOKEN_TYPE: "session state"}.get(str(header.get("typ")), "unknown")
    valid: bool | None = None
    reason: str | None = None
    detail: str | None = None
    if keys is not None:
        try:
            if header.get("typ") == STATE_TOKEN_TYPE:
                sid = claims.get("sid")
                keys.verify_state(sid if isinstance(sid, str) else "", token)
            else:
                keys.verify_session_token(token, now=now)
            valid = True
        except InvalidToken as exc:
            valid, reason = False, exc.reason
            detail = explain(exc.reason, header, claims, keys, now)
    if args.json:
        report = {"kind": kind, "header": header, "claims": claims, "valid": valid, "reason": reason, "why": detail}
        stdout.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
    else:
        stdout.write(_render(kind, header, claims, valid, reason, detail, keys, now))
    return EXIT_INVALID if valid is False else EXIT_OK


def _render(
    kind: str,
    header: Mapping[str, Any],
    claims: Mapping[str, Any],
    valid: bool | None,
    reason: str | None,
    detail: str | None,
    keys: KeySet | None,
    now: float,
) -> str:
    lines = [f"kind: {kind}", "header:"]
    lines += [f"  {name}: {json.dumps(value)}" for name, value in header.items()]
    lines.append("claims (not verified unless stated below):")
    for name, value in claims.items():
        shown = json.dumps(value, ensure_ascii=False)
        if name in ("iat", "exp", "nbf"):
            shown += f"  ({_when(value, now)})"
        lines.append(f"  {name}: {shown}")
    if valid is None:
        lines.append(
            "verification: not checked (give keys with --secret or --keys, or set MCP_SESSIONS_SECRET or "
            "MCP_SESSIONS_KEYS)"
        )
    elif valid:
        assert keys is not None
        lines.append(
            f"verification: VALID: signed by key {header.get('kid')!r}, issuer {keys.issuer!r}, "
            f"audience {keys.audience!r}, not expired (a deletion or idle expiry is recorded in the server's "
            "store, which this check cannot see)"
            if kind != "session state"
            else f"verification: VALID: state signed by key {header.get('kid')!r}, bound to sid {claims.get('sid')!r}"
        )
    else:
        lines.append(f"verification: INVALID ({reason}): {detail}")
        lines.append("a server answers such a session with -32043 (session not found)")
    return "\n".join(lines) + "\n"


# -- create -----------------------------------------------------------------------------------------

INSPECTOR_META_KEY: Final = "io.modelcontextprotocol/session"
LEGACY_VERSION: Final = "2025-11-25"


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise _UsageError(f"--header takes 'Name: value', got {text!r}")
    return name.strip(), value.strip()


def _create(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    try:
        from .client import HttpxSessionTransport, SessionError
    except ImportError as exc:
        raise _UsageError(f"{exc} (create sends its request with httpx)") from None
    headers = dict(_header(h) for h in args.header)
    version = LEGACY_VERSION if args.legacy else args.protocol_version

    async def create() -> Any:
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


# -- the command line -----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-sessions",
        description="Keys and tokens for mcp-sessions (data-layer sessions for MCP servers).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
    return parser


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
    args = _parser().parse_args(argv)
    try:
        if args.command == "keygen":
            return _keygen(args, stdout, stderr)
        if args.command == "create":
            return _create(args, stdout, stderr)
        return _inspect(args, stdin, stdout, os.environ if environ is None else environ)
    except _UsageError as exc:
        print(f"mcp-sessions {args.command}: {exc}", file=stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())

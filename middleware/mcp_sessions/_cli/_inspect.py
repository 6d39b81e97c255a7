"""``mcp-sessions inspect``: decode a session token without verification and, given keys, say why it is valid or not.

The token itself is never printed, only its header and claims.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final, TextIO

from .._tokens import (
    SESSION_TOKEN_TYPE,
    STATE_TOKEN_TYPE,
    InvalidToken,
    KeySet,
    SessionKey,
    decode_unverified,
    keys_from_config,
)
from .._wire import iso
from . import EXIT_INVALID, EXIT_OK, UsageError

DESCRIPTION: Final = (
    "Decode a session id (or state token) without verification, and verify "
    "it when keys are given (--secret, --keys, or MCP_SESSIONS_SECRET / "
    "MCP_SESSIONS_KEYS). The token itself is never printed. Exit status: "
    "0 decoded (and valid, if checked), 1 invalid, 2 usage error."
)


def add_arguments(inspect: argparse.ArgumentParser) -> None:
    """The arguments of ``inspect``."""
    inspect.add_argument(
        "token",
        nargs="?",
        help="the token, or '-' (the default) to read it from standard input",
    )
    inspect.add_argument(
        "--secret",
        help="the HS256 secret (prefer MCP_SESSIONS_SECRET: arguments show in ps)",
    )
    inspect.add_argument(
        "--keys",
        help="a JWKS, kid:secret pairs, or @FILE, as in MCP_SESSIONS_KEYS",
    )
    inspect.add_argument(
        "--issuer",
        help="expected iss (default MCP_SESSIONS_ISSUER or 'mcp-sessions')",
    )
    inspect.add_argument(
        "--audience",
        help="expected aud (default MCP_SESSIONS_AUDIENCE or 'mcp-sessions')",
    )
    inspect.add_argument(
        "--leeway",
        type=float,
        default=0.0,
        help="seconds of clock skew to allow (default 0)",
    )
    inspect.add_argument("--json", action="store_true", help="print a JSON report")


def _span(seconds: float) -> str:
    """A duration in the two largest units that matter: "2 d 3 h", "5 h 12 min", "40 s"."""
    days, rest = divmod(abs(int(seconds)), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    units = [(days, "d"), (hours, "h"), (minutes, "min"), (secs, "s")]
    first = 3
    for index, (value, _) in enumerate(units):
        if value:
            first = index
            break
    shown = [f"{value} {unit}" for value, unit in units[first : first + 2] if value]
    return " ".join(shown) or "0 s"


def _when(timestamp: object, now: float) -> str:
    if type(timestamp) is not int:
        return "not a whole number of seconds"
    try:
        when = iso(timestamp)
    except (OverflowError, OSError, ValueError):
        return "not a whole number of seconds"
    delta = timestamp - now
    if delta > 0:
        return f"{when}, in {_span(delta)}"
    return f"{when}, {_span(delta)} ago"


# Why a token failed, by the reason verification gives; the fields are explain()'s.
_WHY: Final = {
    "expired": "it expired at {exp} (exp, plus a leeway of {leeway:g} s)",
    "not yet valid": "iat or nbf is in the future ({iat}): check both clocks",
    "unknown key id": "its kid {kid!r} is none of the keys given ({known})",
    "algorithm not allowed for this key": (
        "its header says alg {alg!r}, but key {kid!r} is pinned to {pinned}: a key verifies one algorithm"
    ),
    "wrong token type": "its typ is {typ!r}, not {session_typ!r} (a session id) or {state_typ!r} (state)",
    "bad signature": (
        "the signature does not match key {kid!r}: the token was signed with another key that has the "
        "same kid, or it was edited after signing"
    ),
    "wrong audience": "its aud {aud!r} is not {audience!r} (--audience, MCP_SESSIONS_AUDIENCE)",
    "wrong issuer": "its iss {iss!r} is not {issuer!r} (--issuer, MCP_SESSIONS_ISSUER)",
    "oversized": "it is longer than {max_token_length} characters, the most a server reads",
    "missing claim": "the claim {claim!r} is required (iss, aud, sid, iat, exp)",
    "malformed sid claim": "its sid is not 16 to 128 base64url characters",
    "state belongs to another session": "the state is bound to another session's sid",
}


def explain(
    reason: str,
    header: Mapping[str, object],
    claims: Mapping[str, object],
    keys: KeySet,
    now: float,
) -> str:
    """Why a token failed, in words that name what to check (never the token itself)."""
    claim = reason.removeprefix("missing claim ")
    name = "missing claim" if claim != reason else reason
    template = _WHY.get(name)
    if template is None:
        return reason
    kid = header.get("kid")
    known = {key.kid: key for key in keys.keys}
    key = known.get(kid) if isinstance(kid, str) else None
    return template.format(
        exp=_when(claims.get("exp"), now),
        iat=_when(claims.get("iat"), now),
        kid=kid,
        alg=header.get("alg"),
        typ=header.get("typ"),
        session_typ=SESSION_TOKEN_TYPE,
        state_typ=STATE_TOKEN_TYPE,
        known=", ".join(map(repr, known)) or "none",
        pinned=key.algorithm if key is not None else "?",
        aud=claims.get("aud"),
        iss=claims.get("iss"),
        claim=claim,
        leeway=keys.leeway,
        audience=keys.audience,
        issuer=keys.issuer,
        max_token_length=keys.max_token_length,
    )


def run(
    args: argparse.Namespace,
    stdin: TextIO,
    stdout: TextIO,
    stderr: TextIO,
    environ: Mapping[str, str],
) -> int:
    """Run ``inspect``: decode the token, verify it if keys are given, report; returns the exit status."""
    given = stdin.read() if args.token in (None, "-") else args.token
    token = given.strip()
    if not token:
        raise UsageError("no token given: pass it as an argument, or on standard input with '-'")
    now = datetime.now(UTC).timestamp()
    try:
        header, claims = decode_unverified(token)
    except ValueError as exc:
        if args.json:
            answer = {"valid": False, "reason": str(exc)}
            stdout.write(json.dumps(answer) + "\n")
        else:
            stdout.write(f"not a token this tool can read: {exc}\n")
        return EXIT_INVALID
    secret = args.secret
    if secret is None:
        secret = environ.get("MCP_SESSIONS_SECRET") or None
    keys_text = args.keys
    if keys_text is None:
        keys_text = environ.get("MCP_SESSIONS_KEYS") or None
    issuer = args.issuer or environ.get("MCP_SESSIONS_ISSUER") or "mcp-sessions"
    audience = args.audience or environ.get("MCP_SESSIONS_AUDIENCE") or "mcp-sessions"
    # The keys to verify with, if any were given (public keys only is fine).
    keys: KeySet | None = None
    try:
        verifying = [SessionKey.from_secret(secret)] if secret else []
        if keys_text:
            verifying += keys_from_config(keys_text, "the keys (--keys or MCP_SESSIONS_KEYS)")
        if verifying:
            keys = KeySet(verifying, issuer=issuer, audience=audience, leeway=args.leeway)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    kinds = {SESSION_TOKEN_TYPE: "session id", STATE_TOKEN_TYPE: "session state"}
    kind = kinds.get(str(header.get("typ")), "unknown")
    report: dict[str, object] = dict(kind=kind, header=header, claims=claims)
    report.update(valid=None, reason=None, why=None)
    if keys is not None:
        try:
            if header.get("typ") == STATE_TOKEN_TYPE:
                sid = claims.get("sid")
                keys.verify_state(sid if isinstance(sid, str) else "", token)
            else:
                keys.verify_session_token(token, now=now)
            report["valid"] = True
        except InvalidToken as exc:
            why = explain(exc.reason, header, claims, keys, now)
            report.update(valid=False, reason=exc.reason, why=why)
    if args.json:
        stdout.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
    else:
        stdout.write(_render(report, header, claims, keys, now))
    return EXIT_INVALID if report["valid"] is False else EXIT_OK


def _render(
    report: Mapping[str, object],
    header: Mapping[str, object],
    claims: Mapping[str, object],
    keys: KeySet | None,
    now: float,
) -> str:
    kid = header.get("kid")
    lines = [f"kind: {report['kind']}", "header:"]
    lines += [f"  {name}: {json.dumps(value)}" for name, value in header.items()]
    lines.append("claims (not verified unless stated below):")
    for name, value in claims.items():
        shown = json.dumps(value, ensure_ascii=False)
        if name in ("iat", "exp", "nbf"):
            shown += f"  ({_when(value, now)})"
        lines.append(f"  {name}: {shown}")
    if keys is None:
        lines.append(
            "verification: not checked (give keys with --secret or --keys, "
            "or set MCP_SESSIONS_SECRET or MCP_SESSIONS_KEYS)"
        )
    elif report["valid"] and report["kind"] == "session state":
        sid = claims.get("sid")
        lines.append(f"verification: VALID: state signed by key {kid!r}, bound to sid {sid!r}")
    elif report["valid"]:
        lines.append(
            f"verification: VALID: signed by key {kid!r}, "
            f"issuer {keys.issuer!r}, audience {keys.audience!r}, not expired "
            "(a deletion or idle expiry is recorded in the server's store, "
            "which this check cannot see)"
        )
    else:
        lines.append(f"verification: INVALID ({report['reason']}): {report['why']}")
        lines.append("a server answers such a session with -32043 (session not found)")
    return "\n".join(lines) + "\n"

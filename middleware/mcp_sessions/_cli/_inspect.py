"""``mcp-sessions inspect``: decode a session token without verification and, given keys, say why it is valid or not.

The token itself is never printed, only its header and claims.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TextIO

from .._tokens import SESSION_TOKEN_TYPE, STATE_TOKEN_TYPE, InvalidToken, KeySet, SessionKey, keys_from_config
from ._exit import EXIT_INVALID, EXIT_OK, UsageError

__all__ = ["build_verifier", "decode_unverified", "explain", "run_inspect"]


def _segment(part: str) -> object:
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def decode_unverified(token: str) -> tuple[dict[str, object], dict[str, object]]:
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


def _iso(timestamp: int) -> str | None:
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


def _when(timestamp: object, now: float) -> str:
    if type(timestamp) is not int or (iso := _iso(timestamp)) is None:
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
            keys.extend(keys_from_config(keys_text, "the keys (--keys or MCP_SESSIONS_KEYS)"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not keys:
        return None
    try:
        return KeySet(keys, issuer=issuer, audience=audience, leeway=leeway)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def explain(reason: str, header: Mapping[str, object], claims: Mapping[str, object], keys: KeySet, now: float) -> str:
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
        raise UsageError("no token given: pass it as an argument, or on standard input with '-'")
    return token


def run_inspect(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, environ: Mapping[str, str]) -> int:
    """Run ``inspect``: decode the token, verify it if keys are given, report; returns the exit status."""
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
    header: Mapping[str, object],
    claims: Mapping[str, object],
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

"""``mcp-sessions keygen``: a new HS256 secret, or an ES256 or Ed25519 key pair, as an env line or a JWKS."""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import shlex
from typing import Final, TextIO

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from jwt.algorithms import ECAlgorithm, OKPAlgorithm

from .._tokens import keys_from_config
from ._exit import EXIT_OK, UsageError

ALGORITHMS: Final = ("HS256", "ES256", "EdDSA")
_ALIASES: Final = {"hs256": "HS256", "es256": "ES256", "eddsa": "EdDSA", "ed25519": "EdDSA"}
_KID_PREFIX: Final = {"HS256": "hs", "ES256": "es", "EdDSA": "ed"}


def generate(algorithm: str, kid: str | None) -> tuple[dict[str, str], str | None]:
    """A new private JWK (with ``kid``, ``alg``, ``use``) and, for HS256, the secret itself."""
    if kid is None:
        kid = f"{_KID_PREFIX[algorithm]}-{secrets.token_hex(4)}"
    secret: str | None = None
    if algorithm == "HS256":
        secret = secrets.token_urlsafe(32)  # 43 characters: 256 bits, well over the 32-byte minimum
        jwk: dict[str, str] = {"kty": "oct", "k": base64.urlsafe_b64encode(secret.encode()).rstrip(b"=").decode()}
    elif algorithm == "ES256":
        jwk = ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()), as_dict=True)
    else:
        jwk = OKPAlgorithm.to_jwk(ed25519.Ed25519PrivateKey.generate(), as_dict=True)
    jwk = {"kty": jwk["kty"], "kid": kid, "alg": algorithm, "use": "sig"} | {k: v for k, v in jwk.items() if k != "kty"}
    # Read the key back with the parser the middleware uses: what this prints is what a server accepts.
    [parsed] = keys_from_config(json.dumps({"keys": [jwk]}), "the generated key")
    if parsed.kid != kid or parsed.algorithm != algorithm or not parsed.can_sign:
        raise RuntimeError("the generated key does not read back as a signing key")  # pragma: no cover
    return jwk, secret


def _reads_back(kid: str) -> bool:
    """Whether ``kid:<secret>`` reads back, with the parser the middleware uses, as one key of this kid.

    A ',' or ':' would split the kid, a leading '#' make the line a comment, spaces be stripped.
    """
    try:
        [key] = keys_from_config(f"{kid}:{secrets.token_urlsafe(32)}", "--kid")
    except ValueError:
        return False
    return key.kid == kid


def _write_private(path: str, text: str, *, force: bool) -> None:
    """Write ``text`` to a new file readable by its owner only (0600)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise UsageError(f"{path} exists: choose another file, or pass --force to overwrite it") from None
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    with open(fd, "w", encoding="utf-8") as file:
        os.fchmod(fd, 0o600)  # an existing file (with --force) keeps its old mode otherwise
        file.write(text)


def run_keygen(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run ``keygen``: print or write the new key; returns the exit status."""
    algorithm = _ALIASES.get(args.alg.lower())
    if algorithm is None:
        raise UsageError(f"unknown --alg {args.alg!r}: choose one of {', '.join(ALGORITHMS)}")
    if args.kid is not None and not _reads_back(args.kid):
        raise UsageError("--kid must be 1 to 64 visible ASCII characters, without ',' or ':', not starting with '#'")
    if args.public_out and algorithm == "HS256":
        raise UsageError("--public-out needs a key pair (--alg ES256 or EdDSA): an HS256 secret has no public part")
    jwk, secret = generate(algorithm, args.kid)
    if args.format == "jwks":
        text = json.dumps({"keys": [jwk]}, indent=2) + "\n"
    elif secret is not None and args.kid is None:
        text = f"MCP_SESSIONS_SECRET={secret}\n"
    elif secret is not None:
        text = f"MCP_SESSIONS_KEYS={shlex.quote(jwk['kid'] + ':' + secret)}\n"  # quoted if the kid needs it
    else:
        # Single quotes: a shell (and most .env readers) keep the JSON as one value.
        text = "MCP_SESSIONS_KEYS='" + json.dumps({"keys": [jwk]}, separators=(",", ":")) + "'\n"
    if args.public_out:
        public_jwk = {k: v for k, v in jwk.items() if k not in ("d", "k")}  # what verifiers get
        public = json.dumps({"keys": [public_jwk]}, indent=2) + "\n"
        try:
            with open(args.public_out, "w" if args.force else "x", encoding="utf-8") as file:
                file.write(public)
        except FileExistsError:
            raise UsageError(f"{args.public_out} exists: choose another file, or pass --force") from None
        print(f"wrote the public key (kid {jwk['kid']!r}) to {args.public_out}", file=stderr)
    if args.out:
        _write_private(args.out, text, force=args.force)
        print(f"wrote the private key (kid {jwk['kid']!r}, {algorithm}) to {args.out} (mode 0600)", file=stderr)
    else:
        stdout.write(text)
    return EXIT_OK

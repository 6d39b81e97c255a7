"""The team's authorization server, as the gateway tests stand it in: one RSA key, its JWKS served on loopback,
and tokens signed by it (the gateway verifies them with ``--auth-jwks``)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from conftest import serve

ISSUER = "https://issuer.example"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
KEYS = {"keys": [{**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key())), "kid": "k1"}]}


@contextlib.contextmanager
def jwks() -> Iterator[str]:
    """The authorization server's JWKS on loopback: its URL."""
    with serve(Starlette(routes=[Route("/jwks.json", lambda request: JSONResponse(KEYS))])) as url:
        yield url + "/jwks.json"


def signed(claims: dict[str, Any]) -> str:
    """``claims`` as a token of the authorization server's (its key ``k1``)."""
    return jwt.encode(claims, KEY, algorithm="RS256", headers={"kid": "k1"})

"""The tests' real authorization server, idpyoidc's (``_idpyoidc_server``, in its own environment), started on
loopback (:func:`authorization_server`), and a user's login there (:func:`login`)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx

from _redis import missing, only_skips
from e2e._gateway import MAIN, Process, started

APP, GATEWAY = ("app", "app-secret"), ("gateway", "gateway-secret")
"""The client a user logs in with, and the gateway's own (which exchanges her token): each id and secret."""
REDIRECT = "http://127.0.0.1/callback"


@contextlib.contextmanager
def authorization_server(
    lifetime: int, audiences: list[str], keys: dict[str, dict[str, str]] | None = None
) -> Iterator[Process]:
    """idpyoidc's server, its access tokens living ``lifetime`` seconds, exchanged for ``audiences`` alone, with the
    clients ``APP`` and ``GATEWAY`` (by their secrets) and ``keys``' (client id to public JWK: ``private_key_jwt``)
    (its environment: ``make test`` builds it; a missing one skips, or fails under CI)."""
    __tracebackhide__ = only_skips
    venvs = os.environ.get("AUTH_SERVER_VENVS", str(MAIN / ".venv-idpyoidc")).split()
    python = Path(next((v for v in venvs if v.endswith("-idpyoidc")), MAIN / ".venv-idpyoidc")) / "bin" / "python"
    if not python.exists():
        missing(f"{python} is missing: `make .venv-idpyoidc/.installed` builds that environment")
    script = str(MAIN / "tests" / "e2e" / "_idpyoidc_server.py")
    clients = dict([APP, GATEWAY])

    def command(port: int) -> tuple[list[str], dict[str, str]]:
        settings = {"port": port, "lifetime": lifetime, "audiences": audiences, "clients": clients, "keys": keys or {}}
        return [str(python), script, json.dumps(settings)], {}

    server = started("idpyoidc", command)
    try:
        yield server
    finally:
        server.stop()


def login(server: Process, user: str, audience: str) -> str:
    """``user``'s access token for ``audience`` from ``server``: the code its login gives the client ``app``,
    redeemed at its token endpoint."""
    code = httpx.post(server.url("/login"), data={"user": user}).json()["code"]
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "resource": audience}
    answer = httpx.post(server.url("/token"), data=form, auth=APP)
    assert answer.status_code == 200, answer.text
    token: str = answer.json()["access_token"]
    return token

"""What a sealed process may keep (issue 92): a home of its own, and the host's directories the operator grants
(``--process-mount SOURCE:TARGET[:rw]``), a user's own among them (``{user}`` in SOURCE). A real gateway process, run
as root under bubblewrap and unshare, in front of the hostile stdio server of ``e2e._sealed``, reached by two users
with JWKS-signed tokens.
"""

from __future__ import annotations

import contextlib
import json
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from _mcp import ModernClient
from _uids import uids
from e2e._gateway import Process, readable_directory
from e2e._issuer import ISSUER, signed
from e2e._issuer import jwks as served_jwks
from e2e._sealed import OPEN, call, client, gateway, hostile, needs, team, text

UIDS = uids(450, 40)
CONTAINMENTS = ["bwrap", "unshare"]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The hostile server's command (``e2e._sealed.hostile``)."""
    with hostile() as command:
        yield command


@pytest.fixture(scope="module")
def jwks() -> Iterator[str]:
    """The authorization server's JWKS on loopback: its URL."""
    with served_jwks() as url:
        yield url


def run(mcp: ModernClient, session: dict[str, Any], *argv: str) -> dict[str, Any]:
    """``argv`` run by the user's process (the hostile server's ``run``): its exit status and output."""
    done: dict[str, Any] = json.loads(text(call(mcp, "run", session, argv=list(argv))))
    return done


@pytest.mark.parametrize("containment", CONTAINMENTS)
def test_a_process_s_home_is_its_own(server: str, jwks: str, containment: str) -> None:
    """Its home is its uid's and gid's, mode 0700 (not root's 1777): it may chmod it, and ``git init`` there works
    (git refuses a repository in a directory of another owner's: "dubious ownership")."""
    needs("root", containment)
    options = (*team(jwks)[:-2], "--process-uids", UIDS, "--process-containment", containment)
    with gateway(server, *options) as process:
        alice = client(process, user="alice")
        hers = alice.create_session()
        she = json.loads(text(call(alice, "whoami", hers)))
        home = she["environ"]["HOME"]
        assert run(alice, hers, "stat", "-c", "%u %g %a", home)["stdout"].split() == [
            str(she["uid"]),
            str(she["gid"]),
            "700",
        ]
        assert text(call(alice, "chmod", hers, path=home, mode=0o750)) == "changed"
        assert text(call(alice, "mode", hers, path=home)) == "0o750"
        made = run(alice, hers, "git", "init", f"{home}/project")
        assert made["returncode"] == 0, made
        status = run(alice, hers, "git", "-C", f"{home}/project", "status", "--short")
        assert (status["returncode"], status["stderr"]) == (0, ""), status


@contextlib.contextmanager
def users_directory() -> Iterator[Path]:
    """The USERS of ``--process-mount USERS/{user}:...``: root's, mode 0711, where a process may see it (not under
    /tmp)."""
    with readable_directory("mcp-sessions-users-") as users:
        users.chmod(0o711)
        yield users


def signed_in(process: Process, principal: str) -> ModernClient:
    """A client of the gateway's, signed in as ``principal`` (a token's subject, any string)."""
    claims = {"iss": ISSUER, "aud": f"http://127.0.0.1:{process.port}/mcp", "sub": principal}
    http = httpx.Client(
        timeout=30, headers={"Authorization": f"Bearer {signed({**claims, 'exp': int(time.time()) + 600})}"}
    )
    OPEN.append(http)
    return ModernClient(http, f"http://127.0.0.1:{process.port}")


def verified(jwks: str) -> tuple[str, ...]:
    """The gateway's auth: tokens of the test's issuer, verified with ``jwks``."""
    return ("--auth-jwks", jwks, "--auth-issuer", ISSUER, "--auth-audience", "{url}")


@pytest.mark.parametrize("containment", CONTAINMENTS)
def test_a_user_s_directory_is_hers_across_conversations_and_restarts_and_no_one_else_s(
    server: str, jwks: str, containment: str
) -> None:
    """``USERS/{user}:/tmp/data:rw``: what alice writes in one conversation, her next one reads and edits (another
    process, another uid), and so does her conversation after the gateway's restart; bob's /tmp/data is his own, empty,
    and her directory, which his process sees on the host's read-only view, he can neither list, read nor write (her
    group is hers alone); the directory is made on her first use, root's, mode 2770, named by a digest."""
    needs("root", containment)
    with users_directory() as users:
        options = (*verified(jwks), "--process-uids", UIDS, "--process-containment", containment)
        options += ("--process-mount", f"{users}/{{user}}:/tmp/data:rw")
        with gateway(server, *options) as process:
            alice, bob = client(process, user="alice"), client(process, user="bob")
            first = alice.create_session()
            she = json.loads(text(call(alice, "whoami", first)))
            assert text(call(alice, "write", first, path="/tmp/data/notes")) == "4"
            [hers] = list(users.iterdir())
            found = hers.stat()
            assert (found.st_uid, stat.S_IMODE(found.st_mode), len(hers.name)) == (0, 0o2770, 52)
            assert found.st_gid in she["groups"] and found.st_gid != she["uid"]
            assert (hers / "notes").stat().st_gid == found.st_gid
            second = alice.create_session()
            assert json.loads(text(call(alice, "whoami", second)))["uid"] != she["uid"]  # another process
            assert text(call(alice, "read", second, path="/tmp/data/notes")) == "mine"
            assert text(call(alice, "write", second, path="/tmp/data/notes")) == "4"  # hers to edit, whichever uid
            his = bob.create_session()
            assert text(call(bob, "listdir", his, path="/tmp/data")) == "[]"
            tried = [
                text(call(bob, "listdir", his, path=str(hers))),
                text(call(bob, "read", his, path=f"{hers}/notes")),
                text(call(bob, "write", his, path=f"{hers}/planted")),
            ]
            assert tried == ["denied: Permission denied"] * 3
            assert text(call(bob, "write", his, path="/tmp/data/his")) == "4"
            assert len(list(users.iterdir())) == 2  # his, made as he asked
        with gateway(server, *options) as process:
            alice = client(process, user="alice")
            again = alice.create_session()
            assert text(call(alice, "listdir", again, path="/tmp/data")) == '["notes"]'
            assert text(call(alice, "read", again, path="/tmp/data/notes")) == "mine"

"""What a sealed process may keep (issue 92): a home of its own, and the host's directories the operator grants
(``--process-mount SOURCE:TARGET[:rw]``), a user's own among them (``{user}`` in SOURCE). A real gateway process, run
as root under bubblewrap and unshare, in front of the hostile stdio server of ``e2e._sealed``, reached by two users
with JWKS-signed tokens.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from _mcp import ModernClient
from _uids import uids
from e2e._issuer import jwks as served_jwks
from e2e._sealed import call, client, gateway, hostile, needs, team, text

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

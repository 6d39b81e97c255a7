"""The names of the users' own directories (``--process-mount USERS/{user}``): one per identity, which no other
identity can take, and a plain file name whatever the principal holds."""

from __future__ import annotations

import re

from mcp_sessions._gateway.sealed._grants import directory_name

PRINCIPALS = ["alice", "../x", "a/b", "..", "", "x" * 10_000, "\udcff\udcfe", "é", "e\u0301", "alice\0bob", "/"]


def test_each_identity_s_directory_is_a_plain_name_of_its_own() -> None:
    identities = [(kind, principal) for kind in ("token", "proxy") for principal in PRINCIPALS]
    names = [directory_name(identity) for identity in identities]
    assert len(set(names)) == len(identities)  # a proxy's "alice" is not a token's
    assert all(re.fullmatch(r"[a-z2-7]{52}", name) for name in names), names
    assert directory_name(("token", "alice")) == directory_name(["token", "alice"])  # the same, on any day
    # No two parts run together: ("a", "b/c") is not ("a/b", "c").
    assert directory_name(("token", "a\0b")) != directory_name(("token\0a", "b"))

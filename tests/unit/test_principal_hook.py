"""The default principal hook: a principal is never a field a user can choose (issue 36, item 3)."""

from __future__ import annotations

import logging
import uuid

import pytest
from starlette.authentication import BaseUser, SimpleUser, UnauthenticatedUser

from _users import User
from mcp_sessions import authenticated_user


def principal(user: BaseUser) -> str | None:
    return authenticated_user({"type": "http", "user": user})


def test_an_identity_of_any_type_is_the_principal_typed() -> None:
    key = uuid.uuid4()
    principals = [principal(User(1)), principal(User("1")), principal(User(key)), principal(User(str(key)))]
    assert None not in principals
    assert len(set(principals)) == 4  # 1 and "1" are two users, and so are a UUID and its text
    assert principal(User(7, "Alice")) == principal(User(7, "Mallory"))
    assert principal(User(7, "Alice")) != principal(User(8, "Alice"))


def test_a_string_identity_and_a_simple_users_name_are_the_principal_as_they_are() -> None:
    assert principal(User("alice-id")) == "alice-id"
    assert principal(SimpleUser("alice")) == "alice"


@pytest.mark.parametrize("identity", [NotImplemented, None, ""], ids=["missing", "none", "empty"])
def test_a_user_without_an_identity_is_bound_to_no_one_and_the_log_says_so_once(
    identity: object, caplog: pytest.LogCaptureFixture
) -> None:
    class Nameless(User):  # a class of its own: the warning is said once per user class
        pass

    with caplog.at_level(logging.WARNING, logger="mcp_sessions"):
        assert principal(Nameless(identity, "Alice")) is None
        assert principal(Nameless(identity, "Bob")) is None
    said = [r.getMessage() for r in caplog.records if "no identity" in r.getMessage()]
    assert len(said) == 1
    assert "Nameless" in said[0]
    assert "Alice" not in said[0]


def test_an_unauthenticated_user_is_no_principal() -> None:
    assert authenticated_user({"type": "http"}) is None
    assert authenticated_user({"type": "http", "user": UnauthenticatedUser()}) is None

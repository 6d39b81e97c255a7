"""The sign-ins under way of one sign-in (``_oauth.SignIn``): each sign-in URL made for a user, until a flow spends
it or it expires, and each leg of a flow (the login at the IdP, then the grant at the server) from the browser's
leaving to its coming back, by the leg's ``state``. Each is kept :data:`SIGN_IN_WITHIN` seconds on the sign-in's
clock, at most :data:`MAX_PENDING` of each, the oldest forgotten first; a leg is taken as the callback reads it, so
that a replay, a tampered or unknown ``state`` finds nothing."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from ..._bounded import BoundedDict
from ._grants import User

SIGN_IN_WITHIN: Final = 600.0
"""How long a sign-in URL, and each leg of its flow, may wait for the browser."""
MAX_PENDING: Final = 10_000
"""Sign-in URLs and legs under way kept; the oldest are forgotten first."""


@dataclass(frozen=True)
class Leg:
    """A browser's sign-in under way: whose, the sign-in URL's id it began at, the browser's cookie (its name's
    ``flow``, its value ``binding``: a browser may have two sign-ins under way), PKCE's verifier, for the login leg
    the ID token's ``nonce``, the server it was sent to, whether that server names itself (``iss``), and where it
    was told to send the browser back (the server's own callback: a code that comes back at another's is redeemed
    nowhere)."""

    user: User
    sign_in: str
    flow: str
    binding: str = field(repr=False)
    verifier: str = field(repr=False)
    nonce: str | None
    issuer: str
    sends_iss: bool
    redirect_uri: str


class Pending:
    """The sign-in URLs and legs under way (see the module), their deadlines counted on ``clock``."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        # A sign-in URL's id to its user and deadline; a user's URL while it waits, so that retries get the same.
        self._urls: BoundedDict[str, tuple[User, float]] = BoundedDict(MAX_PENDING)
        self._url_of: BoundedDict[User, str] = BoundedDict(MAX_PENDING)
        # A leg's state to the leg and its deadline: the login's, then the grant's.
        self._logins: BoundedDict[str, tuple[Leg, float]] = BoundedDict(MAX_PENDING)
        self._grantings: BoundedDict[str, tuple[Leg, float]] = BoundedDict(MAX_PENDING)

    def sign_in(self, user: User) -> str:
        """The id of the user's sign-in URL: the one she was given while it waits, else a new one."""
        now = self._clock()
        known = self._url_of.get(user)
        if known is not None and known in self._urls and self._urls[known][1] > now:
            return known
        one_time = secrets.token_urlsafe(32)
        self._urls[one_time] = (user, now + SIGN_IN_WITHIN)
        self._url_of[user] = one_time
        return one_time

    def opened(self, one_time: str) -> User | None:
        """Whose sign-in URL ``one_time`` is, while it waits (``None``: unknown, spent or expired). Opening it
        spends nothing: a link preview's fetch would spend it for her."""
        user, until = self._urls.get(one_time, (None, 0.0))
        return None if self._clock() > until else user

    def sent(self, leg: Leg, *, login: bool) -> str:
        """The ``state`` of ``leg``, the browser sent to the IdP's login (``login``) or to the server."""
        state = secrets.token_urlsafe(32)
        (self._logins if login else self._grantings)[state] = (leg, self._clock() + SIGN_IN_WITHIN)
        return state

    def back(self, state: str) -> tuple[Leg, bool] | None:
        """The leg ``state`` names, taken (a replay finds nothing), and whether it is the login's; ``None`` where
        it is unknown, taken or expired."""
        now = self._clock()
        login = True
        taken = self._logins.pop(state, None)
        if taken is None:
            login = False
            taken = self._grantings.pop(state, None)
        if taken is None or now > taken[1]:
            return None
        return taken[0], login

    def spend(self, leg: Leg) -> None:
        """The sign-in URL ``leg`` began at, spent: her next request gets a new one."""
        self._urls.pop(leg.sign_in, None)
        if self._url_of.get(leg.user) == leg.sign_in:
            del self._url_of[leg.user]

    def holds(self, *, sign_in: str = "", state: str = "") -> bool:
        """Whether the sign-in URL whose id is ``sign_in``, or a leg whose ``state`` is ``state``, is here."""
        return sign_in in self._urls or state in self._logins or state in self._grantings

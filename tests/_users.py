"""A Starlette user with an identity of any type (or none) and a display name of the user's own choosing."""

from __future__ import annotations

from starlette.authentication import BaseUser


class User(BaseUser):
    """Signed in; ``identity`` as given (``NotImplemented``: the class has none, as ``BaseUser`` says)."""

    def __init__(self, identity: object = NotImplemented, name: str = "Alice") -> None:
        self._identity, self.name = identity, name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def display_name(self) -> str:
        return self.name

    @property
    def identity(self) -> str:
        if self._identity is NotImplemented:
            raise NotImplementedError
        return self._identity  # type: ignore[return-value]  # any type, as a database key is

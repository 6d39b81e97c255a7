"""A kind of handle (``basket``): its name, prefix, lifetimes, and the schema it gives a tool parameter."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from . import _format as fmt

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema

__all__ = ["DEFAULT_TTL", "MAX_TTL", "HandleKind", "check_ttl"]

DEFAULT_TTL: Final = 24 * 3600
MAX_TTL: Final = 10 * 365 * 24 * 3600


def check_ttl(name: str, value: float) -> None:
    """Refuse a lifetime that is not a positive number of seconds up to ten years."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TTL:
        raise ValueError(f"{name} must be a positive number of seconds, at most {MAX_TTL} (ten years)")


class HandleKind:
    """One kind of handle (``basket``): its name, prefix, lifetimes and the tool that creates one.

    Declare it at module level and register it with :meth:`Handles.register`
    (or let :meth:`Handles.kind` do both). Use it as a tool parameter's type
    metadata, ``Annotated[Handle, basket]``: the input schema shows a string
    with the kind's ``pattern`` and a description, and the tool receives the
    verified :class:`Handle`.

    ``prefix`` (1 to 4 characters, ``[a-z][a-z0-9]*``) starts every handle of
    the kind (``bsk_…``). ``ttl`` is the default lifetime, ``idle_ttl`` ends a
    handle unused for that long. ``create`` names the tool that mints one
    (default ``create_<name>``): error messages tell the model to call it.
    """

    __slots__ = ("create", "description", "idle_ttl", "length", "name", "pattern", "prefix", "ttl")

    def __init__(
        self,
        name: str,
        *,
        prefix: str,
        ttl: float = DEFAULT_TTL,
        idle_ttl: float | None = None,
        create: str | None = None,
        description: str | None = None,
    ) -> None:
        if not isinstance(name, str) or not name or len(name) > 64 or not name.isprintable():
            raise ValueError("a handle kind's name must be 1 to 64 printable characters")
        if not isinstance(prefix, str) or not fmt.PREFIX_SHAPE.fullmatch(prefix):
            raise ValueError(
                f"the prefix {prefix!r} is not 1 to {fmt.MAX_PREFIX_CHARS} characters of [a-z0-9] "
                "starting with a letter (it keeps handles within 40 characters)"
            )
        check_ttl("ttl", ttl)
        if idle_ttl is not None:
            check_ttl("idle_ttl", idle_ttl)
        self.name = name
        self.prefix = prefix
        self.ttl = float(ttl)
        self.idle_ttl = None if idle_ttl is None else float(idle_ttl)
        self.create = create or f"create_{name}"
        self.description = description or (
            f"A {name} handle ({prefix}_…) as {self.create} returned it; pass it exactly as returned, "
            f"or call {self.create} for a new one."
        )
        self.pattern = fmt.pattern(prefix)
        self.length = len(prefix) + 1 + fmt.PAYLOAD_CHARS

    def __repr__(self) -> str:
        return f"HandleKind({self.name!r}, prefix={self.prefix!r})"

    @property
    def shown(self) -> str:
        """How messages name a handle of this kind: its prefix and an ellipsis."""
        return f"{self.prefix}_…"

    # -- pydantic -----------------------------------------------------------------

    def __get_pydantic_core_schema__(self, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        from ._params import core_schema_for

        return core_schema_for(self)

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {
            "type": "string",
            "pattern": self.pattern,
            "minLength": self.length,
            "maxLength": self.length,
            "description": self.description,
        }

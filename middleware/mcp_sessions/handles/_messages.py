"""The words a refused handle gets: one message per reason, naming the kind and the tool that makes a new one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final, Protocol

__all__ = ["ANY_KIND", "KindWords", "iso", "message"]


def iso(timestamp: float) -> str:
    """``timestamp`` as an ISO 8601 UTC instant to the second (``2026-01-01T00:00:00Z``)."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KindWords(Protocol):
    """What a message says of a kind: its name, how its handles look, and the tool that makes one."""

    @property
    def name(self) -> str: ...
    @property
    def prefix(self) -> str: ...
    @property
    def create(self) -> str: ...
    @property
    def shown(self) -> str: ...
    @property
    def length(self) -> int: ...


class _AnyKind:
    """Stands in for the kind in messages about strings that name no registered kind."""

    name = "handle"
    prefix = ""
    create = "the tool that creates it"
    shown = "handle"
    length = 0


ANY_KIND: Final = _AnyKind()


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def message(
    reason: str,
    spec: KindWords,
    *,
    other: KindWords | None = None,
    at: int | None = None,
    idle: float | None = None,
    session: bool = False,
) -> str:
    """The message for a handle refused for ``reason``: what went wrong and how to get a valid one."""
    what = f"{spec.name} handle {spec.shown}" if spec is not ANY_KIND else "this value"
    again = f"call {spec.create} for a new one"
    if reason == "malformed":
        if spec is ANY_KIND:
            return "this value is not a handle any tool here issued; pass a handle exactly as it was returned"
        return (
            f"{what} is incomplete or mistyped (a {spec.name} handle is exactly {spec.length} characters "
            f"starting {spec.prefix}_); pass it exactly as {spec.create} returned it, or {again}"
        )
    if reason == "forged":
        return f"{what} was never issued or was mistyped; pass it exactly as {spec.create} returned it, or {again}"
    if reason == "wrong_kind":
        assert other is not None  # every wrong_kind refusal names the kind it was given
        return (
            f"this argument takes a {spec.name} handle ({spec.shown}), not {_article(other.name)} {other.name} "
            f"handle ({other.shown}); "
            f"pass the {spec.name} handle {spec.create} returned, or {again}"
        )
    if reason == "expired":
        if idle is not None:
            return f"{what} expired after {idle:g} seconds unused; {again}"
        return f"{what} expired at {iso(at or 0)}; {again}"
    if reason == "revoked":
        ended = "its session ended" if session else "it was closed or revoked"
        return f"{what} has ended ({ended}) and cannot be used again; {again}"
    if reason == "other_principal":
        return f"{what} belongs to another user and cannot be used here; call {spec.create} for your own"
    return f"{what} was refused; {again}"  # pragma: no cover - every reason is handled above

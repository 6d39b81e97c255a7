"""The kinds one registry knows, by name and by prefix, each with its MAC bases (one per key that can sign)."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from . import _format as fmt
from ._keys import kind_macs
from ._kind import HandleKind

__all__ = ["KindTable"]


class KindTable:
    """Registered kinds: how a handle string is recognised, and the keyed MACs that sign and check it."""

    __slots__ = ("_audience", "_bases", "_by_name", "_by_prefix", "_mac_keys", "creators", "prefixes")

    def __init__(self, mac_keys: dict[str, tuple[int, bytes]], audience: str) -> None:
        self._mac_keys = mac_keys
        self._audience = audience
        self._by_name: dict[str, HandleKind] = {}
        self._by_prefix: dict[str, HandleKind] = {}
        self.prefixes: tuple[str, ...] = ()
        """``"bsk_"`` for each kind: how a handle is recognised."""
        self.creators: frozenset[str] = frozenset()
        """Each kind's ``create`` tool."""
        # kind name -> kid -> (key hint, HMAC already fed the domain, the audience and the kind's name)
        self._bases: dict[str, dict[str, tuple[int, hmac.HMAC]]] = {}

    def register(self, kind: HandleKind) -> HandleKind:
        """Add ``kind``; names and prefixes must be unique (registering the same kind again is a no-op)."""
        if not isinstance(kind, HandleKind):
            raise TypeError("register takes a HandleKind")
        if self._by_name.get(kind.name) is kind:
            return kind
        if kind.name in self._by_name:
            raise ValueError(f"the handle kind {kind.name!r} is already registered")
        if kind.prefix in self._by_prefix:
            raise ValueError(
                f"the prefix {kind.prefix!r} already belongs to the kind {self._by_prefix[kind.prefix].name!r}"
            )
        self._bases[kind.name] = kind_macs(self._mac_keys, self._audience, kind.name)
        self._by_name[kind.name] = kind
        self._by_prefix[kind.prefix] = kind
        self.prefixes = (*self.prefixes, f"{kind.prefix}_")
        self.creators = self.creators | {kind.create}
        return kind

    @property
    def by_name(self) -> Mapping[str, HandleKind]:
        """The registered kinds, by name (a copy)."""
        return dict(self._by_name)

    def of(self, value: str) -> HandleKind | None:
        """The kind whose prefix ``value`` starts with (``bsk_…``), if any."""
        prefix, sep, _ = value.partition("_")
        return self._by_prefix.get(prefix) if sep else None

    def lookup(self, kind: HandleKind | str) -> HandleKind:
        """The registered kind ``kind`` names; an unregistered one is refused."""
        if isinstance(kind, HandleKind):
            if self._by_name.get(kind.name) is not kind:
                raise ValueError(f"the kind {kind.name!r} is not registered here: call handles.register(kind) first")
            return kind
        found = self._by_name.get(kind)
        if found is None:
            raise KeyError(f"no handle kind {kind!r} is registered: call handles.kind({kind!r}, prefix=...) first")
        return found

    def signing_base(self, kind: HandleKind, kid: str) -> tuple[int, hmac.HMAC]:
        """The key hint and MAC base with which the key ``kid`` signs handles of ``kind``."""
        return self._bases[kind.name][kid]

    def mac_matches(self, kind: HandleKind, payload: fmt.Payload, principal: str | None) -> bool:
        """Whether some key made ``payload``'s MAC, for ``kind`` and ``principal`` (a digest, or ``None``)."""
        for hint, base in self._bases[kind.name].values():
            if hint == payload.hint and hmac.compare_digest(fmt.mac(base, payload.signed, principal), payload.mac):
                return True
        return False

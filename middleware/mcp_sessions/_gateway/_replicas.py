"""The replicas of the one upstream server: which one a request goes to, and which are out for a while.

A conversation (a data-layer session, a host's conversation id) goes to the replica that rendezvous hashing
(highest random weight) names for its stable id among the replicas in service: every gateway given the same
replica URLs computes the same order, so several gateways agree without talking to each other, and a replica
that leaves moves only its own conversations. A 2025-era transport session lives in the process that minted
it, so the gateway gives the client the upstream's id prefixed with the tag of the replica that issued it (a
digest of that replica's URL, the same in every gateway) and signed (``_transport_ids``), and forwards the
id only there; an id the gateway did not sign names no replica. A request that opens a transport session
goes as any request without one: to its conversation's replica when it names a conversation, else, as
anything of no conversation, to the replica with the fewest requests in flight (``_proxy._route``).
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ._transport_ids import MAX_UPSTREAM_ID, TAG_LENGTH, TransportIds

if TYPE_CHECKING:
    from .._tokens import KeySet

logger = logging.getLogger("mcp_sessions.gateway")


class Replica:
    """One upstream replica: where it is, its tag, how many requests it serves now, until when it is out."""

    __slots__ = ("down_until", "in_flight", "origin", "path", "seed", "tag", "url")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        # The URL goes in logs: it may carry nothing secret, and no credential to mix with the client's.
        if parts.username is not None or parts.password is not None:
            raise ValueError("an upstream URL carries no credentials: the upstream gets the client's Authorization")
        if parts.query or parts.fragment:
            raise ValueError("an upstream URL names the MCP endpoint, without a query or a fragment")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"an upstream is an http:// or https:// URL of the MCP endpoint, got {url!r}")
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.path = parts.path or "/"
        self.url = self.origin + self.path
        digest = hashlib.sha256(self.url.encode()).digest()
        self.tag = digest.hex()[:TAG_LENGTH].encode()
        """What the transport session ids this replica issues start with, for the client."""
        self.seed = digest[:16]
        self.in_flight = 0
        self.down_until = 0.0

    def __repr__(self) -> str:
        return f"<Replica {self.url} tag={self.tag.decode()}>"


class Replicas:
    """The replicas of one server, as every gateway in front of them sees them (see the module's docstring)."""

    __slots__ = ("_by_tag", "_clock", "_cooldown", "_ids", "all")

    def __init__(
        self, urls: Sequence[str], *, keys: KeySet, cooldown: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if isinstance(urls, str) or not urls:
            raise ValueError("give the gateway one upstream URL or more (a list: --upstream URL, repeated)")
        self.all = tuple(Replica(url) for url in dict.fromkeys(urls))
        if len({replica.path for replica in self.all}) != 1:
            raise ValueError("the upstreams are replicas of one server: give them all the same MCP endpoint path")
        self._by_tag = {replica.tag: replica for replica in self.all}
        if len(self._by_tag) != len(self.all):
            raise ValueError("two upstream URLs share a tag: give each replica a URL of its own")
        if not cooldown >= 0:
            raise ValueError("the failure cooldown is a number of seconds, 0 or more")
        self._cooldown = cooldown
        self._clock = clock
        self._ids = TransportIds(keys)

    @property
    def path(self) -> str:
        """The MCP endpoint's path, the same on every replica."""
        return self.all[0].path

    def for_conversation(self, key: str) -> list[Replica]:
        """The replicas to try for a conversation, best first: in service by rendezvous weight, then the others."""
        if len(self.all) == 1:
            return list(self.all)
        data = key.encode("utf-8", "surrogatepass")
        ranked = sorted(self.all, key=lambda r: hashlib.blake2b(data, digest_size=8, key=r.seed).digest(), reverse=True)
        return self._in_service_first(ranked)

    def least_loaded(self) -> list[Replica]:
        """The replicas to try for a request of no conversation: in service by requests in flight, then the others."""
        if len(self.all) == 1:
            return list(self.all)
        shuffled = random.sample(self.all, len(self.all))  # ties spread, not all on the first
        return self._in_service_first(sorted(shuffled, key=lambda replica: replica.in_flight))

    def _in_service_first(self, ranked: list[Replica]) -> list[Replica]:
        now = self._clock()
        return [r for r in ranked if r.down_until <= now] + [r for r in ranked if r.down_until > now]

    def issued(self, replica: Replica, upstream_id: bytes) -> bytes | None:
        """The id the client gets for a transport session ``replica`` issued; ``None`` for one too long to carry."""
        issued = self._ids.sign(replica.tag, upstream_id)
        if issued is None:  # the client gets no id: the upstream's next answer says it has no session
            logger.warning(
                "mcp-sessions gateway: upstream %s issued a transport session id the gateway cannot carry "
                "(%d bytes: empty, or longer than %d characters as it is); the client does not get it",
                replica.url,
                len(upstream_id),
                MAX_UPSTREAM_ID,
            )
        return issued

    def issuer(self, client_id: bytes) -> tuple[Replica, bytes] | None:
        """The replica that issued a transport session id the gateway gave a client, and the id it issued.

        ``None`` for an id the gateway did not sign (forged, altered, cut, too long) or of a replica it no
        longer has: such an id is never forwarded.
        """
        verified = self._ids.verify(client_id)
        if verified is None:
            return None
        replica = self._by_tag.get(verified[0])
        return None if replica is None else (replica, verified[1])

    def failed(self, replica: Replica) -> None:
        """``replica`` could not be reached: out of service for the cooldown (its conversations go elsewhere)."""
        if replica.down_until <= self._clock():
            logger.warning(
                "mcp-sessions gateway: upstream %s cannot be reached; out of service for %.0f s",
                replica.url,
                self._cooldown,
            )
        replica.down_until = self._clock() + self._cooldown

    def reached(self, replica: Replica) -> None:
        """``replica`` answered: in service again, if it was out."""
        if replica.down_until:
            replica.down_until = 0.0
            logger.info("mcp-sessions gateway: upstream %s answers again", replica.url)

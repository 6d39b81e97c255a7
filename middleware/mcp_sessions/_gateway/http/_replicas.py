"""The replicas of the one upstream server: which one a request goes to, and which are out for a while.

A conversation (a data-layer session, a host's conversation id) goes to the replica that rendezvous hashing
(highest random weight) names for its stable id among the replicas in service: every gateway given the same
replica URLs computes the same order, so several gateways agree without talking to each other, and a replica
that leaves moves only its own conversations. One that another replica served while its own was out (down, or
draining) stays there once its own returns (:meth:`Replicas.served`): it would move back to a replica that never
served it, and, where its server kept its state in its process, be told it ended (a second wave after a rolling
restart). The gateway remembers the moves it made itself, in its memory (at most :data:`MAX_MOVED`, the oldest
forgotten first): what it needs is which replica answered, which it alone sees, and no session token carries it (a
host's conversation has none).

A 2025-era transport session lives in the process that minted it, so the gateway gives the client the upstream's id
prefixed with the tag of the replica that issued it (a digest of that replica's URL, the same in every gateway) and
signed (:class:`TransportIds`), and forwards the id there (to one other while it cannot be reached or drains:
``UpstreamProxy._route``); an id the gateway did not sign names no replica. A request that opens a transport session
goes as any request without one: to its conversation's replica when it names a conversation, else, as
anything of no conversation, to the replica with the fewest requests in flight (``UpstreamProxy._route``).

**Transport session ids** (:class:`TransportIds`): the upstream's id with the issuing replica's tag in front,
and a MAC behind: ``TAG~ID~MAC``. The MAC is HMAC-SHA256 over
everything before it, cut to 16 bytes (22 base64url characters), under a key derived from the deployment's
session keys (its ``KeySet``, with its audience): every gateway given the same keys signs and accepts the
same ids, and nothing else can make one. An upstream id that is not visible ASCII, or holds a dot, travels
base64url-encoded, ``TAG!B64~MAC``: the gateway's ids are visible ASCII, never hold a dot (a session
token's JWT shape has two), and are at most 256 characters (the bound the session pipeline and the spec's
examples use), so an upstream id of at most 224 characters (168 bytes encoded) fits.

An id is signed by the key set's signer and accepted under any of its keys that can sign (a rotation adds
the new key everywhere first). Checking is constant-time (``hmac.compare_digest``) and bounded in length
before any MAC is computed; an id that does not verify names no replica, as one the gateway never gave out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Final
from urllib.parse import urlsplit

from ..._bounded import BoundedDict
from ..._tokens import KeySet, derived_key

logger = logging.getLogger("mcp_sessions.gateway")

TAG_LENGTH: Final = 8
MAX_ID: Final = 256
"""The longest id the gateway gives a client or accepts from one."""
# After the tag: the upstream's id as it is, or base64url-encoded.
_PLAIN: Final = b"~"
_ENCODED: Final = b"!"
_MAC_SEPARATOR: Final = b"~"
_MAC_BYTES: Final = 16
# base64url of 16 bytes, unpadded.
_MAC_LENGTH: Final = 22
_OVERHEAD: Final = TAG_LENGTH + 1 + 1 + _MAC_LENGTH
MAX_UPSTREAM_ID: Final = MAX_ID - _OVERHEAD
"""The longest upstream id the gateway can carry as it is (224): an encoded one must fit in as many characters."""
_LABEL: Final = b"mcp-sessions gateway transport session id\x00"
MAX_MOVED: Final = 100_000
"""The conversations remembered on a replica other than their own (``Replicas.served``), oldest forgotten first."""


class TransportIds:
    """Signs the transport session ids replicas issue, for clients, and checks those clients send back; with an
    ``endpoint``, ids of that endpoint alone (a gateway's server that opens an id again itself, where no upstream
    would refuse another server's)."""

    def __init__(self, keys: KeySet, endpoint: str = "") -> None:
        label = _LABEL + keys.audience.encode() + (b"\x00" + endpoint.encode() if endpoint else b"")
        if keys.signer is None:
            raise ValueError("the gateway signs transport session ids: give it a key that can sign")
        self._signing = derived_key(keys.signer, label)
        checking = [self._signing]
        for key in keys.keys:
            if key.can_sign and key is not keys.signer:
                checking.append(derived_key(key, label))
        self._checking = tuple(checking)

    def sign(self, tag: bytes, upstream_id: bytes) -> bytes | None:
        """The id a client gets for ``upstream_id``, issued by the replica tagged ``tag``; ``None`` if too long."""
        visible = all(0x21 <= octet <= 0x7E for octet in upstream_id)
        if b"." not in upstream_id and visible:
            signed = tag + _PLAIN + upstream_id
        else:
            encoded = base64.urlsafe_b64encode(upstream_id).rstrip(b"=")
            signed = tag + _ENCODED + encoded
        longest = MAX_ID - len(_MAC_SEPARATOR) - _MAC_LENGTH
        if not upstream_id or len(signed) > longest:
            return None
        return signed + _MAC_SEPARATOR + _mac(self._signing, signed)

    def verify(self, client_id: bytes) -> tuple[bytes, bytes] | None:
        """The tag of the replica that issued ``client_id`` and the upstream's own id, if the gateway signed it."""
        if not _OVERHEAD < len(client_id) <= MAX_ID:
            return None
        if client_id[-_MAC_LENGTH - 1 : -_MAC_LENGTH] != _MAC_SEPARATOR:
            return None
        signed = client_id[: -_MAC_LENGTH - 1]
        mac = client_id[-_MAC_LENGTH:]
        macs = (_mac(key, signed) for key in self._checking)
        if not any(hmac.compare_digest(computed, mac) for computed in macs):
            return None
        tag = signed[:TAG_LENGTH]
        form = signed[TAG_LENGTH : TAG_LENGTH + 1]
        upstream_id = signed[TAG_LENGTH + 1 :]
        if form == _PLAIN:
            return tag, upstream_id
        # Signed, so :meth:`sign` encoded it: unpadded base64url, whose length is never 1 more than a multiple of 4.
        padding = b"=" * (-len(upstream_id) % 4)
        return tag, base64.urlsafe_b64decode(upstream_id + padding)


def _mac(key: bytes, signed: bytes) -> bytes:
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest[:_MAC_BYTES]).rstrip(b"=")


class Replica:
    """One upstream replica: where it is, its tag, how many requests it serves now, until when it is out."""

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

    def __init__(
        self, urls: Sequence[str], *, keys: KeySet, cooldown: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if isinstance(urls, str) or not urls:
            raise ValueError("give the gateway one upstream URL or more (a list: --upstream URL, repeated)")
        self.all = tuple(Replica(url) for url in dict.fromkeys(urls))
        paths = {replica.path for replica in self.all}
        if len(paths) != 1:
            raise ValueError("the upstreams are replicas of one server: give them all the same MCP endpoint path")
        self._by_tag = {replica.tag: replica for replica in self.all}
        if len(self._by_tag) != len(self.all):
            raise ValueError("two upstream URLs share a tag: give each replica a URL of its own")
        if not cooldown >= 0:
            raise ValueError("the failure cooldown is a number of seconds, 0 or more")
        self._cooldown = cooldown
        self._clock = clock
        self._ids = TransportIds(keys)
        self._moved: BoundedDict[str, Replica] = BoundedDict(MAX_MOVED)  # a conversation's key: the replica serving it

    @property
    def path(self) -> str:
        """The MCP endpoint's path, the same on every replica."""
        return self.all[0].path

    def for_conversation(self, key: str) -> list[Replica]:
        """The replicas to try for a conversation, best first: in service, the one that serves it since its own
        was out (:meth:`served`), then by rendezvous weight; then the others."""
        ranked = self._ranked(key)
        serving = self._moved.get(key)
        if serving is not None:
            ranked.remove(serving)
            ranked.insert(0, serving)
        return self._in_service_first(ranked)

    def served(self, key: str, replica: Replica) -> None:
        """``replica`` answered a request of the conversation ``key``: where its later requests go first, while it
        is in service; remembered only where it is not the conversation's own (its rendezvous first)."""
        if replica is self._ranked(key)[0]:
            self._moved.pop(key, None)
        elif self._moved.get(key) is not replica:
            self._moved[key] = replica
            logger.info("mcp-sessions gateway: a conversation stays on upstream %s, which serves it", replica.url)

    def _ranked(self, key: str) -> list[Replica]:
        """Every replica by its rendezvous weight for the conversation ``key``, highest first."""
        data = key.encode("utf-8", "surrogatepass")

        def weight(replica: Replica) -> bytes:
            return hashlib.blake2b(data, digest_size=8, key=replica.seed).digest()

        return sorted(self.all, key=weight, reverse=True)

    def least_loaded(self) -> list[Replica]:
        """The replicas to try for a request of no conversation: in service by requests in flight, then the others."""
        # Shuffled first: ties spread, not all on the first.
        shuffled = random.sample(self.all, len(self.all))
        ranked = sorted(shuffled, key=lambda replica: replica.in_flight)
        return self._in_service_first(ranked)

    def _in_service_first(self, ranked: list[Replica]) -> list[Replica]:
        """``ranked``, those in service first, each group in its order (``sorted`` is stable)."""
        now = self._clock()
        return sorted(ranked, key=lambda replica: replica.down_until > now)

    def issued(self, replica: Replica, upstream_id: bytes) -> bytes | None:
        """The id the client gets for a transport session ``replica`` issued; ``None`` for one too long to carry."""
        issued = self._ids.sign(replica.tag, upstream_id)
        if issued is not None:
            return issued
        # The client gets no id: the upstream's next answer says it has no session.
        logger.warning(
            "mcp-sessions gateway: upstream %s issued a transport session id the gateway cannot carry "
            "(%d bytes: empty, or longer than %d characters as it is); the client does not get it",
            replica.url,
            len(upstream_id),
            MAX_UPSTREAM_ID,
        )
        return None

    def issuer(self, client_id: bytes) -> tuple[Replica, bytes] | None:
        """The replica that issued a transport session id the gateway gave a client, and the id it issued.

        ``None`` for an id the gateway did not sign (forged, altered, cut, too long) or of a replica it no
        longer has: such an id is never forwarded.
        """
        verified = self._ids.verify(client_id)
        if verified is None:
            return None
        tag, upstream_id = verified
        replica = self._by_tag.get(tag)
        if replica is None:
            return None
        return replica, upstream_id

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

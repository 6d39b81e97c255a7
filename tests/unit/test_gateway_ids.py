"""The transport session ids the gateway gives clients: signed, checked, and of the shape the spec allows.

``TAG~ID~MAC`` (or ``TAG!B64~MAC`` for an upstream id that is not plain visible ASCII): the gateway accepts
back exactly the ids it (or a gateway with the same keys) signed, whole; nothing altered, cut or extended.
"""

from __future__ import annotations

import random

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from mcp_sessions._gateway.http._replicas import MAX_ID, MAX_UPSTREAM_ID, TransportIds
from mcp_sessions._tokens import KeySet, SessionKey

SECRET = "gateway-ids-secret-gateway-ids-secret-0123456"
OTHER = "another-deployment-secret-another-deployment-0"
TAG = b"3f9a04c1"
UPSTREAM = b"7f0c2d9e-5b6a-4d3e-8f1a-0123456789ab"
VISIBLE = bytes(range(0x21, 0x7F))
PLAIN = VISIBLE.replace(b".", b"")


def ids(secret: str = SECRET, **options: str) -> TransportIds:
    return TransportIds(KeySet.from_secret(secret, **options))  # type: ignore[arg-type]


def signed(transport_ids: TransportIds, upstream_id: bytes = UPSTREAM) -> bytes:
    issued = transport_ids.sign(TAG, upstream_id)
    assert issued is not None
    return issued


def test_an_id_the_gateway_signed_names_its_replica_and_the_upstreams_own_id() -> None:
    issued = signed(ids())
    assert issued.startswith(TAG + b"~" + UPSTREAM + b"~")
    assert len(issued) == len(TAG + UPSTREAM) + 2 + 22
    assert ids().verify(issued) == (TAG, UPSTREAM)  # another gateway with the same keys: the same answer
    assert signed(ids()) == issued  # and the same id


def test_every_alteration_cut_or_extension_of_a_signed_id_is_refused() -> None:
    transport_ids = ids()
    issued = signed(transport_ids)
    for position in range(len(issued)):
        for octet in (b"0", b"A", b"~", b"_", b"-"):
            altered = issued[:position] + octet + issued[position + 1 :]
            if altered != issued:
                assert transport_ids.verify(altered) is None, (position, octet)
    for length in range(len(issued)):
        assert transport_ids.verify(issued[:length]) is None
    for extended in (issued + b"A", b"A" + issued, issued + b"~" + issued[-22:]):
        assert transport_ids.verify(extended) is None


@pytest.mark.parametrize(
    "forged",
    [
        UPSTREAM,  # the upstream's own id, which the client sees inside its id
        TAG + b"~" + UPSTREAM,  # the tagged id of the gateway's earlier versions
        TAG + b"~anything",
        TAG + b"~" + UPSTREAM + b"~" + b"A" * 22,
        TAG + b"!" + b"A" * 40 + b"~" + b"A" * 22,
        b"x" * (MAX_ID + 1),
        b"",
    ],
    ids=["upstream-id", "tagged-unsigned", "tag-anything", "zero-mac", "encoded-zero-mac", "too-long", "empty"],
)
def test_a_forged_id_is_refused(forged: bytes) -> None:
    assert ids().verify(forged) is None


def test_other_keys_or_another_audience_do_not_accept_the_ids() -> None:
    issued = signed(ids())
    assert ids(OTHER).verify(issued) is None
    assert ids(audience="tenant-b").verify(issued) is None


def test_a_rotation_keeps_the_ids_of_every_key_the_set_still_holds() -> None:
    old, new = SessionKey.from_secret(SECRET, kid="old"), SessionKey.from_secret(OTHER, kid="new")
    issued = signed(TransportIds(KeySet([old])))
    assert TransportIds(KeySet([old, new], signer="new")).verify(issued) == (TAG, UPSTREAM)  # new signs, old checks
    assert TransportIds(KeySet([new])).verify(issued) is None  # the old key retired: its ids with it


def test_asymmetric_keys_sign_too_and_verify_only_keys_are_no_use() -> None:
    private = ed25519.Ed25519PrivateKey.generate()
    signing = KeySet([SessionKey.from_private_key(private, kid="ed")])
    issued = signed(TransportIds(signing))
    assert TransportIds(signing).verify(issued) == (TAG, UPSTREAM)
    verify_only = KeySet([SessionKey.from_public_key(private.public_key(), kid="ed")])
    with pytest.raises(ValueError, match="a key that can sign"):
        TransportIds(verify_only)


@pytest.mark.parametrize(
    "upstream_id",
    [
        b"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",  # a JWT as transport session id: two dots
        b"one.dot",
        b"with space",
        "n\u00e9e".encode(),
        b"\x7f",
    ],
)
def test_an_upstream_id_that_is_not_plain_travels_encoded(upstream_id: bytes) -> None:
    issued = signed(ids(), upstream_id)
    assert issued.startswith(TAG + b"!")
    assert all(octet in VISIBLE for octet in issued)
    assert b"." not in issued
    assert ids().verify(issued) == (TAG, upstream_id)


def test_the_ids_are_visible_ascii_without_a_dot_and_at_most_256_characters() -> None:
    transport_ids, draw = ids(), random.Random(1)
    for alphabet, longest, form, end in ((PLAIN, MAX_UPSTREAM_ID, b"~", b""), (bytes(range(256)), 168, b"!", b".")):
        for _ in range(300):
            upstream_id = bytes(draw.choice(alphabet) for _ in range(draw.randint(1, longest - len(end)))) + end
            issued = signed(transport_ids, upstream_id)
            assert issued[len(TAG) : len(TAG) + 1] == form  # a dot at the end: never plain
            assert all(octet in VISIBLE for octet in issued)
            assert b"." not in issued
            assert len(issued) <= MAX_ID
            assert transport_ids.verify(issued) == (TAG, upstream_id)
    assert transport_ids.verify(signed(transport_ids, b"~!~")) == (TAG, b"~!~")  # the separators, as they are


def test_an_upstream_id_too_long_to_carry_gets_no_id() -> None:
    transport_ids = ids()
    assert len(signed(transport_ids, b"u" * MAX_UPSTREAM_ID)) == MAX_ID
    assert transport_ids.sign(TAG, b"u" * (MAX_UPSTREAM_ID + 1)) is None
    assert len(signed(transport_ids, b"." * 168)) <= MAX_ID  # encoded: 4 characters for 3 bytes
    assert transport_ids.sign(TAG, b"." * 169) is None
    assert transport_ids.sign(TAG, b"") is None

"""The handle format and the pure check: length, shape, MAC, expiry, keys and rotation, and fuzzing."""

from __future__ import annotations

import asyncio
import base64
import re
import string
import time
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_sessions import KeySet, SessionKey
from mcp_sessions.handles import MAX_HANDLE_CHARS, HandleError, HandleKind, Handles
from mcp_sessions.handles import _format as fmt
from mcp_sessions.stores import MemoryStore

SECRET = "unit-test-secret-for-handles-0123456789abcdef"
OTHER_SECRET = "another-unit-test-secret-for-handles-98765"
URL_SAFE = set(string.ascii_letters + string.digits + "-_")
BASKET = HandleKind("basket", prefix="bsk")
ORDER = HandleKind("order", prefix="ordr")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def registry(secret: str = SECRET, *kinds: HandleKind) -> Handles:
    return Handles(KeySet.from_secret(secret), MemoryStore(), kinds=kinds or (BASKET, ORDER))


@pytest.fixture
def handles() -> Handles:
    return registry()


def mint(handles: Handles, kind: Any = BASKET, **options: Any) -> str:
    token: str = run(handles.mint(kind, **options))
    return token


def refusal(handles: Handles, value: Any, **options: Any) -> HandleError:
    with pytest.raises(HandleError) as raised:
        run(handles.verify(value, **options))
    return raised.value


# -- length and shape ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["b", "z9", "bsk", "ordr", "a000", "zzzz"])
def test_every_allowed_prefix_keeps_the_handle_within_40_url_safe_characters(prefix: str) -> None:
    kind = HandleKind("thing", prefix=prefix)
    handles = registry(SECRET, kind)
    for options in ({}, {"principal": "alice"}, {"session_id": "sid-1"}, {"ttl": 10 * 365 * 24 * 3600}):
        token = mint(handles, kind, **options)
        assert len(token) == len(prefix) + 1 + 35 <= MAX_HANDLE_CHARS == 40
        assert token.startswith(prefix + "_")
        assert set(token) <= URL_SAFE
        assert re.fullmatch(kind.pattern, token)
        assert kind.length == len(token)


@pytest.mark.parametrize("prefix", ["", "abcde", "Bsk", "1ab", "b-k", "b_k", "bsk ", "é"])
def test_a_prefix_that_could_break_the_format_is_refused_at_declaration(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        HandleKind("thing", prefix=prefix)


def test_names_and_prefixes_are_unique_per_registry(handles: Handles) -> None:
    with pytest.raises(ValueError, match="already"):
        handles.register(HandleKind("basket", prefix="bas"))
    with pytest.raises(ValueError, match="already belongs"):
        handles.register(HandleKind("bucket", prefix="bsk"))
    assert handles.register(BASKET) is BASKET  # registering the same kind again changes nothing


def test_handles_minted_together_share_no_visible_structure(handles: Handles) -> None:
    tokens = [mint(handles) for _ in range(50)]
    assert len(set(tokens)) == 50
    # The random part comes first and the rest is masked: no two share their first 4 payload characters.
    assert len({token[4:8] for token in tokens}) >= 45


def test_the_encoding_is_canonical() -> None:
    """The last character carries two unused bits: only the one with them at zero is accepted."""
    payload = "A" * 34
    accepted = [c for c in string.ascii_letters + string.digits + "-_" if fmt.decode(payload + c) is not None]
    assert "".join(sorted(accepted)) == "".join(sorted(fmt.LAST_CHARS))
    assert fmt.decode("A" * 35 + "A") is None
    assert fmt.decode("A" * 34) is None
    assert fmt.decode("A" * 33 + "=A") is None


# -- what verifies and what does not --------------------------------------------------------------------------


def test_a_minted_handle_verifies_with_its_kind_id_and_expiry(handles: Handles) -> None:
    before = time.time()
    token = mint(handles, ttl=120)
    handle = run(handles.verify(token, kind="basket"))
    assert handle.kind == "basket"
    assert handle.token == token
    assert before + 120 <= handle.expires_at_timestamp <= time.time() + 121
    assert handle.id not in token
    assert len(handle.id) == 16
    assert token not in repr(handle)
    assert handle.id in repr(handle)
    assert run(handles.verify(token)).id == handle.id  # stable


@pytest.mark.parametrize("position", [4, 5, 20, 30, 37, 38])
def test_one_changed_character_anywhere_is_refused(handles: Handles, position: int) -> None:
    token = mint(handles)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for replacement in alphabet:
        changed = token[:position] + replacement + token[position + 1 :]
        if changed == token:
            continue
        error = refusal(handles, changed)
        assert error.reason in ("forged", "malformed")
        assert changed[4:] not in str(error)
        assert token[4:] not in str(error)


def test_the_errors_name_the_problem_and_never_the_handle(handles: Handles) -> None:
    token = mint(handles)
    cases = {
        "malformed": token[:-1],
        "forged": "bsk_" + base64.urlsafe_b64encode(bytes(26)).decode().rstrip("=")[:34] + "A",
        "wrong_kind": mint(handles, ORDER),
        "expired": mint(handles, ttl=1, now=time.time() - 10),
        "other_principal": mint(handles, principal="alice"),
    }
    for reason, value in cases.items():
        error = refusal(handles, value, kind="basket", principal="bob")
        assert error.reason == reason, (reason, error)
        assert value[5:] not in error.message
        assert "create_basket" in error.message
    assert "expired at" in refusal(handles, cases["expired"]).message
    assert "another user" in refusal(handles, cases["other_principal"], principal="bob").message
    # Anonymous use of a principal-bound handle is another principal's use too.
    assert refusal(handles, cases["other_principal"], principal=None).reason == "other_principal"


@pytest.mark.parametrize(
    "value", [None, 42, b"bsk_x", ["bsk_"], "", "bsk", "bsk_", "nope_" + "A" * 35, "bsk-" + "A" * 35]
)
def test_anything_else_is_malformed(handles: Handles, value: Any) -> None:
    assert refusal(handles, value).reason == "malformed"


def test_a_handle_of_another_deployment_or_audience_is_forged(handles: Handles) -> None:
    stranger = mint(registry(OTHER_SECRET))
    assert refusal(handles, stranger).reason == "forged"
    other_audience = Handles(KeySet.from_secret(SECRET, audience="elsewhere"), MemoryStore(), kinds=[BASKET])
    assert refusal(handles, mint(other_audience)).reason == "forged"


def test_a_principal_bound_handle_verifies_only_for_that_principal(handles: Handles) -> None:
    token = mint(handles, principal="alice")
    assert run(handles.verify(token, principal="alice")).principal_bound
    assert refusal(handles, token, principal="bob").reason == "other_principal"
    open_token = mint(handles, principal=None)
    for who in ("alice", "bob", None):
        assert not run(handles.verify(open_token, principal=who)).principal_bound


def test_revoke_ends_a_handle_and_drops_its_data(handles: Handles) -> None:
    token = mint(handles, data={"items": ["a"]})
    handle = run(handles.verify(token))
    assert run(handle.data.get("items")) == ["a"]
    assert run(handles.revoke(token)) is True
    assert refusal(handles, token).reason == "revoked"
    assert run(handle.data.items()) == {}
    assert run(handles.revoke(token)) is False
    assert run(handles.revoke(handle)) is False


def test_idle_expiry_ends_an_unused_handle() -> None:
    kind = HandleKind("cart", prefix="crt", idle_ttl=5)
    handles = registry(SECRET, kind)
    now = time.time()
    token = mint(handles, kind, now=now)
    assert run(handles.verify(token, now=now + 4)).kind == "cart"
    assert run(handles.verify(token, now=now + 8)).kind == "cart"  # used 4 s ago
    error = refusal(handles, token, now=now + 14)
    assert (error.reason, "unused" in error.message) == ("expired", True)


def test_a_handle_tied_to_a_session_ends_with_it(handles: Handles) -> None:
    store = handles.store
    now = time.time()
    token = mint(handles, session_id="session-1", session_expires_at=now + 60)
    handle = run(handles.verify(token))
    assert handle.session_id == "session-1"
    assert handle.expires_at_timestamp <= now + 61  # capped by the session's expiry
    run(handle.data.set("items", ["a"]))
    run(store.revoke("session-1", expires_at=now + 600))
    error = refusal(handles, token)
    assert (error.reason, "session ended" in error.message) == ("revoked", True)
    assert run(handle.data.items()) == {}  # the handle ended with its session, and its data with it


def test_a_handle_minted_under_an_old_key_verifies_while_the_key_set_holds_it() -> None:
    old, new = SessionKey.from_secret(SECRET, kid="old"), SessionKey.from_secret(OTHER_SECRET, kid="new")
    store = MemoryStore()
    before = Handles(KeySet([old]), store, kinds=[BASKET])
    during = Handles(KeySet([old, new], signer="new"), store, kinds=[BASKET])
    after = Handles(KeySet([new]), store, kinds=[BASKET])
    old_token, new_token = mint(before), mint(during)
    assert run(during.verify(old_token)).kind == "basket"
    assert run(during.verify(new_token)).kind == "basket"
    assert run(after.verify(new_token)).kind == "basket"
    assert refusal(after, old_token).reason == "forged"
    assert refusal(before, new_token).reason == "forged"


def test_asymmetric_private_keys_derive_a_handle_key_and_public_keys_cannot() -> None:
    es = SessionKey.from_private_key(ec.generate_private_key(ec.SECP256R1()), kid="es")
    ed = SessionKey.from_private_key(ed25519.Ed25519PrivateKey.generate(), kid="ed")
    for key in (es, ed):
        handles = Handles(KeySet([key]), MemoryStore(), kinds=[BASKET])
        assert run(handles.verify(mint(handles))).kind == "basket"
    public = SessionKey.from_public_key(ed25519.Ed25519PrivateKey.generate().public_key(), kid="pub")
    with pytest.raises(ValueError, match="secret material"):
        Handles(KeySet([public]), MemoryStore())


def test_configuration_errors_say_what_to_do(handles: Handles) -> None:
    with pytest.raises(KeyError, match="register"):
        run(handles.mint("nothing"))
    with pytest.raises(ValueError, match="not registered"):
        run(handles.mint(HandleKind("loose", prefix="lse")))
    with pytest.raises(ValueError, match="ttl"):
        run(handles.mint(BASKET, ttl=0))
    with pytest.raises(ValueError, match="ttl"):
        HandleKind("x", prefix="x", ttl=-1)
    with pytest.raises(TypeError, match="KeySet"):
        Handles("secret", MemoryStore())  # type: ignore[arg-type]


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SHAPED = st.builds(
    lambda prefix, body, last: f"{prefix}_{body}{last}",
    st.sampled_from(["bsk", "ordr"]),
    st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", min_size=34, max_size=34),
    st.sampled_from(list(fmt.LAST_CHARS)),
)
FUZZ_HANDLES = registry()
MINTED = [mint(FUZZ_HANDLES, kind, principal=who) for kind in (BASKET, ORDER) for who in (None, "alice")]


def accepted(value: Any, principal: str | None = "alice") -> bool:
    digest = None if principal is None else FUZZ_HANDLES.principal_digest(principal)
    try:
        FUZZ_HANDLES.authenticate(value, digest)
    except HandleError:
        return False
    return True


@FUZZ
@given(SHAPED)
def test_no_random_string_of_the_right_shape_verifies(value: str) -> None:
    assert value in MINTED or not accepted(value)


@FUZZ
@given(st.sampled_from(MINTED), st.data())
def test_no_mutation_of_a_minted_handle_verifies(token: str, data: st.DataObject) -> None:
    chars = list(token)
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["replace", "delete", "insert", "swap"]))
        index = data.draw(st.integers(0, len(chars) - 1))
        char = data.draw(st.sampled_from(sorted(URL_SAFE)))
        if action == "replace":
            chars[index] = char
        elif action == "delete" and len(chars) > 1:
            del chars[index]
        elif action == "insert":
            chars.insert(index, char)
        elif index + 1 < len(chars):
            chars[index], chars[index + 1] = chars[index + 1], chars[index]
    mutated = "".join(chars)
    assert mutated in MINTED or not accepted(mutated)


@FUZZ
@given(st.one_of(st.text(max_size=80), st.binary(max_size=60), st.integers(), st.none(), SHAPED, st.lists(st.text())))
def test_the_verifier_raises_only_handle_errors(value: Any) -> None:
    for principal in (None, "alice"):
        try:
            accepted(value, principal)
            run(FUZZ_HANDLES.verify(value, principal=principal))
        except HandleError as exc:
            assert exc.reason in ("malformed", "forged", "wrong_kind", "expired", "revoked", "other_principal")
            if isinstance(value, str) and len(value) >= 20:
                assert value[4:] not in exc.message


# -- check_call, the function the session middleware will call ------------------------------------------------


def test_check_call_verifies_every_handle_in_the_arguments(handles: Handles) -> None:
    from mcp_sessions.handles import check_call

    basket, order = mint(handles), mint(handles, ORDER, principal="alice")
    alice = handles.principal_digest("alice")
    verified: dict[str, Any] = {}
    params = {"name": "t", "arguments": {"basket": basket, "deep": {"orders": [order]}, "note": "bsk_ is short"}}
    assert run(check_call(handles, params, alice, verified=verified)) is None
    assert {handle.kind for handle in verified.values()} == {"basket", "order"}
    not_params: object
    for not_params in (None, [], "x", {"name": "t"}, {"arguments": "bsk_" + "A" * 35}):
        assert run(check_call(handles, not_params, None)) is None

    errors: list[HandleError] = []
    result = run(check_call(handles, params, None, errors=errors))
    assert result is not None
    assert result["isError"] is True
    [content] = result["content"]
    assert content["text"].startswith("argument 'deep.orders[0]': order handle ordr_… belongs to another user")
    assert [error.reason for error in errors] == ["other_principal"]

    crowded = {"arguments": {f"b{i}": basket for i in range(handles.max_handles_per_call + 1)}}
    too_many = run(check_call(handles, crowded, None))
    assert too_many is not None
    assert "at most 16" in too_many["content"][0]["text"]


def test_a_refused_mint_is_the_sdks_error_where_the_sdk_is_installed() -> None:
    from mcp.shared.exceptions import MCPError

    from mcp_sessions.handles import HandleLimitExceeded
    from mcp_sessions.handles._registry import raised_limit_exceeded

    raised = raised_limit_exceeded()("no handle was created: over; retry in 3 s", retry_after=3)
    assert isinstance(raised, HandleLimitExceeded)
    assert isinstance(raised, MCPError)
    assert (raised.code, raised.data, raised.retry_after) == (-32011, {"retryAfter": 3}, 3)
    assert str(raised) == raised.message == "no handle was created: over; retry in 3 s"

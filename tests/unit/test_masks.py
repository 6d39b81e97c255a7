"""The parts of ``--process-env-mask`` that need no process (``_masks``, ``_network``'s rules): the placeholder's
shape, the flag's one-line refusals, and the rules' place for the proxy and the masked hosts."""

from __future__ import annotations

import base64
import json
import string

import pytest

from mcp_sessions._gateway.sealed._masks import Mask, placeholder
from mcp_sessions._gateway.sealed._network import AllowedHost, EgressRules


def _segment(claims: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")


JWT = f"{_segment({'alg': 'RS256', 'typ': 'JWT'})}.{_segment({'sub': 'alice', 'exp': 2000000000})}.{'s1G-n_' * 40}"


def _classes(text: str) -> list[str]:
    alphabets = (string.ascii_lowercase, string.ascii_uppercase, string.digits)
    return [next((alphabet for alphabet in alphabets if char in alphabet), char) for char in text]


@pytest.mark.parametrize(
    "value",
    ["ghp_" + "a1B2" * 9, "github_pat_11ABCDEFG0_" + "x" * 59, "xoxb-123-456-abcDEF", "sk-proj-Ab9", "7"],
    ids=["github", "fine-grained", "slack", "short", "one-digit"],
)
def test_a_placeholder_has_the_value_s_length_and_classes_and_is_never_it(value: str) -> None:
    made = {placeholder(value) for _ in range(20)}
    assert value not in made
    assert all(_classes(each) == _classes(value) for each in made)
    assert len(made) > 1  # random, each time


def test_a_jwt_s_placeholder_keeps_its_header_and_claims_and_has_a_random_signature() -> None:
    made = placeholder(JWT)
    header, claims, signature = made.split(".")
    assert f"{header}.{claims}." == JWT.rpartition(".")[0] + "."
    assert len(signature) == len(JWT.rpartition(".")[2]) and signature != JWT.rpartition(".")[2]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("GITHUB_TOKEN", "--process-env-mask takes NAME=HOST[:PORT][,HOST[:PORT]...]: 'GITHUB_TOKEN'"),
        ("OTHER=api.github.com", "--process-env-mask OTHER: no --process-env OTHER=SOURCE gives it"),
        ("GITHUB_TOKEN=api github.com", "--process-env-mask GITHUB_TOKEN: 'api github.com' is not HOST[:PORT]"),
        ("GITHUB_TOKEN=api.github.com:0", "--process-env-mask GITHUB_TOKEN: 'api.github.com:0' is not HOST[:PORT]"),
    ],
    ids=["no-hosts", "not-given", "bad-name", "bad-port"],
)
def test_a_mask_the_gateway_cannot_keep_is_one_line(given: str, said: str) -> None:
    with pytest.raises(ValueError) as raised:
        Mask.parsed(given, {"GITHUB_TOKEN"})
    assert str(raised.value).startswith(said)
    assert "\n" not in str(raised.value)


def test_a_mask_s_hosts_are_on_443_unless_a_port_is_given() -> None:
    mask = Mask.parsed("GITHUB_TOKEN=API.github.com,uploads.github.com:8443", {"GITHUB_TOKEN"})
    assert mask.hosts == {("api.github.com", 443), ("uploads.github.com", 8443)}


def test_the_rules_grant_the_proxy_and_refuse_the_masked_hosts_before_any_grant() -> None:
    rules = EgressRules(1000, 1001, proxy=4567, masked=(AllowedHost("api.github.com", 443),))
    text = rules.text()
    proxy = text.index("ip daddr 127.0.0.1 tcp dport 4567 accept")
    masked = text.index("ip daddr . th dport @maskedports4 reject")
    assert proxy < masked < text.index("fib daddr type local reject")
    assert "set maskedports6 { type ipv6_addr . inet_service; flags timeout; }" in text
    assert "maskedports" not in EgressRules(1000, 1001).text()


def test_a_renewed_value_replaces_the_old_under_the_same_placeholder_and_an_ended_process_s_is_forgotten() -> None:
    from mcp_sessions._gateway.sealed._masks import Masks

    masks = Masks((Mask.parsed("TOKEN=api.test", {"TOKEN"}),), authority=None)  # type: ignore[arg-type]
    given, token = masks.give({"TOKEN": "first-value-0001", "OTHER": "kept"})
    masks.renew(token, {"TOKEN": "second-value-002", "OTHER": "kept"})
    (swap,) = masks.swaps[str(token)]
    masks.drop(token)
    assert (given["TOKEN"], given["OTHER"]) == (swap.placeholder, "kept")
    assert (swap.value, swap.hosts) == ("second-value-002", frozenset({("api.test", 443)}))
    assert given["HTTPS_PROXY"].endswith(f":{token}@169.254.1.1:0") and masks.swaps == {}

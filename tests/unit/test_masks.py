"""The parts of ``--process-env-mask`` that need no process (``_masks``, ``_network``'s rules): the placeholder's
shape, the flag's one-line refusals, and the rules' place for the proxy and the masked hosts."""

from __future__ import annotations

import base64
import json
import socket
import string
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from _authorities import PEM, authority, written_key
from mcp_sessions._gateway.sealed._edge import Edge
from mcp_sessions._gateway.sealed._masks import Authority, Mask, Masks, placeholder
from mcp_sessions._gateway.sealed._network import AllowedHost, EgressPolicy, EgressRules


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
    assert len(signature) == len(JWT.rpartition(".")[2])
    assert signature != JWT.rpartition(".")[2]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (
            "GITHUB_TOKEN",
            "--process-env-mask takes NAME=[http://]HOST[:PORT][,[http://]HOST[:PORT]...]: 'GITHUB_TOKEN'",
        ),
        ("OTHER=api.github.com", "--process-env-mask OTHER: no --process-env OTHER=SOURCE gives it"),
        (
            "GITHUB_TOKEN=api github.com",
            "--process-env-mask GITHUB_TOKEN: 'api github.com' is not [http://]HOST[:PORT]",
        ),
        (
            "GITHUB_TOKEN=api.github.com:0",
            "--process-env-mask GITHUB_TOKEN: 'api.github.com:0' is not [http://]HOST[:PORT]",
        ),
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
    assert mask.plain == frozenset()


def test_plain_http_is_a_host_s_only_where_the_mask_names_it_with_http_and_then_the_process_has_http_proxy() -> None:
    from mcp_sessions._gateway.sealed._masks import Masks

    mask = Mask.parsed("TOKEN=api.test,http://api.test,http://wiki.test:8080", {"TOKEN"})
    other = Mask.parsed("OTHER=api.test", {"OTHER"})
    masks = Masks((mask, other), authority=None)  # type: ignore[arg-type]
    given, _ = masks.give({"TOKEN": "value-0001"})
    alone, _ = masks.give({"OTHER": "value-0002"})
    assert mask.hosts == {("api.test", 443)}
    assert mask.plain == {("api.test", 80), ("wiki.test", 8080)}
    assert masks.hosts == {("api.test", 443), ("api.test", 80), ("wiki.test", 8080)}  # each refused directly
    assert given["HTTP_PROXY"] == given["http_proxy"] == given["HTTPS_PROXY"]
    assert "HTTP_PROXY" not in alone
    assert "http_proxy" not in alone


def test_the_rules_grant_the_proxy_and_refuse_the_masked_hosts_before_any_grant() -> None:
    rules = EgressRules(EgressPolicy(1000, 1001, proxy=4567, masked=(AllowedHost("api.github.com", 443),)))
    text = rules.text()
    proxy = text.index("ip daddr 127.0.0.1 tcp dport 4567 accept")
    masked = text.index("ip daddr . th dport @maskedports4 reject")
    assert proxy < masked < text.index("fib daddr type local goto refuse")
    assert "set maskedports6 { type ipv6_addr . inet_service; flags timeout; }" in text
    assert "maskedports" not in EgressRules(EgressPolicy(1000, 1001)).text()


def test_a_renewed_value_replaces_the_old_under_the_same_placeholder_and_an_ended_process_s_is_forgotten() -> None:
    from mcp_sessions._gateway.sealed._masks import Masks

    masks = Masks((Mask.parsed("TOKEN=api.test", {"TOKEN"}),), authority=None)  # type: ignore[arg-type]
    given, token = masks.give({"TOKEN": "first-value-0001", "OTHER": "kept"})
    masks.renew(token, {"TOKEN": "second-value-002", "OTHER": "kept"})
    (swap,) = masks.swaps[str(token)]
    masks.drop(token)
    assert (given["TOKEN"], given["OTHER"]) == (swap.placeholder, "kept")
    assert (swap.value, swap.hosts) == ("second-value-002", frozenset({("api.test", 443)}))
    assert given["HTTPS_PROXY"].endswith(f":{token}@169.254.1.1:0")
    assert masks.swaps == {}


def _operator_authority(
    directory: Path, *, ca: bool = True, cert_sign: bool = True, days: int = 30, key: Any = None
) -> tuple[Path, Path]:
    """An operator's authority (its certificate, its key: 0600) as ``--process-env-mask-ca`` reads them, each part
    of it as a test asks (no CA, no keyCertSign, expired, another kind of key)."""
    key, certificate = authority("operator authority", key=key, ca=ca, cert_sign=cert_sign, days=days)
    (directory / "ca.pem").write_bytes(certificate.public_bytes(PEM))
    return directory / "ca.pem", written_key(key, directory / "ca.key")


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("missing", "{dir}/absent.pem cannot be read (No such file or directory)"),
        ("open", "{dir}/ca.key is open to others (mode 644): chmod 600 it"),
        ("no-certificate", "{dir}/ca.key holds no PEM certificate"),
        ("no-ca", "{dir}/ca.pem is no certificate authority's (no basicConstraints CA:TRUE)"),
        ("no-cert-sign", "{dir}/ca.pem's keyUsage does not let it sign certificates (keyCertSign)"),
        ("expired", "{dir}/ca.pem expired on "),
        ("encrypted", "{dir}/ca.key's key is encrypted: the gateway takes it unencrypted"),
        ("no-key", "{dir}/ca.pem holds no PEM private key"),
        ("ed25519", "{dir}/ca.key's key is neither RSA nor EC"),
        ("another-key", "{dir}/other.key's key is not {dir}/ca.pem's certificate's"),
        ("one-file", "{dir}/both.pem's key is not {dir}/both.pem's certificate's"),  # both read from one file
    ],
)
def test_an_operator_s_authority_the_gateway_cannot_use_is_one_line_without_its_key(
    tmp_path: Path, case: str, said: str
) -> None:
    from cryptography.hazmat.primitives import serialization

    certificate, key = _operator_authority(
        tmp_path,
        ca=case != "no-ca",
        cert_sign=case != "no-cert-sign",
        days=-1 if case == "expired" else 30,
        key=ed25519.Ed25519PrivateKey.generate() if case == "ed25519" else None,
    )
    secret = key.read_text()
    given = {
        "missing": f"{tmp_path}/absent.pem,{key}",
        "no-certificate": f"{key}",
        "no-key": f"{certificate},{certificate}",
        "another-key": f"{certificate},{tmp_path}/other.key",
        "one-file": f"{tmp_path}/both.pem",
    }.get(case, f"{certificate},{key}")
    if case == "open":
        key.chmod(0o644)
    if case == "no-key":
        certificate.chmod(0o600)
    if case in ("another-key", "one-file"):  # a key of no certificate's, alone or in one file with it
        other = written_key(ec.generate_private_key(ec.SECP256R1()), tmp_path / "other.key")
        (tmp_path / "both.pem").write_bytes(other.read_bytes() + certificate.read_bytes())
        (tmp_path / "both.pem").chmod(0o600)
    if case == "encrypted":
        encrypted = serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pass")
        key.write_bytes(serialization.load_pem_private_key(key.read_bytes(), None).private_bytes(PEM, *encrypted))
    with pytest.raises(ValueError) as raised:
        Authority.given(given)
    message = str(raised.value)
    assert message.startswith("--process-env-mask-ca CERT.pem[,KEY.pem]: " + said.format(dir=tmp_path)), message
    assert "\n" not in message
    assert secret.splitlines()[1] not in message


@pytest.mark.anyio
async def test_a_proxy_connection_that_fails_unforeseen_ends_alone_and_its_message_is_never_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever the proxy did not foresee in one connection (here its handling raises, with a value in the message)
    ends that connection alone: the proxy serves the next, and the log names the exception's kind and place, never
    its message. An exception the handler did not list ended the listener's task group, and the gateway with it."""

    async def failing(self: Edge, client: anyio.abc.SocketStream) -> None:
        raise RuntimeError("ghp_the-value")

    monkeypatch.setattr(Edge, "_connection", failing)
    masks = Masks((), Authority.made(["api.test"]))
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(Edge(masks, listening).serve)
            for _ in range(2):
                async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                    await stream.send(b"CONNECT api.test:443 HTTP/1.1\r\n\r\n")
                    with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                        await stream.receive()
            tasks.cancel_scope.cancel()
    finally:
        masks.close()
        listening.close()
    ended = [record.getMessage() for record in caplog.records if "ended on" in record.getMessage()]
    where = f"test_masks.py:{failing.__code__.co_firstlineno + 1}"  # its raise
    assert ended == [f"the credentials' proxy: a connection ended on RuntimeError ({where})"] * 2
    assert "ghp_the-value" not in caplog.text

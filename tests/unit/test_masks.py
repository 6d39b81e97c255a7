"""The parts of ``--process-env-mask`` that need no process (``_masks``, ``_network``'s rules): the placeholder's
shape, the flag's one-line refusals, and the rules' place for the proxy and the masked hosts."""

from __future__ import annotations

import base64
import json
import socket
import string
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from _authorities import PEM, authority, taken_leaf, written_key
from _waits import WITHIN
from mcp_sessions._gateway.sealed._edge import ASKING, ASKING_PER_ADDRESS, Edge, _swapped
from mcp_sessions._gateway.sealed._masks import Authority, Mask, Masks, placeholder
from mcp_sessions._gateway.sealed._network import TUNNEL_MARK, AllowedHost, EgressPolicy, EgressRules


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
            "--process-env-mask takes NAME=[http://]HOST[:PORT][,[http://]HOST[:PORT]...][,header=HEADER]: "
            "'GITHUB_TOKEN'",
        ),
        (
            "GITHUB_TOKEN=header=X-Api-Key",
            "--process-env-mask GITHUB_TOKEN: no host to put the value in for: 'GITHUB_TOKEN=header=X-Api-Key'",
        ),
        (
            "GITHUB_TOKEN=api.github.com,header=Host",
            "--process-env-mask GITHUB_TOKEN: 'header=Host' names no header a credential goes in (header=X-Api-Key)",
        ),
        (
            "GITHUB_TOKEN=api.github.com,header=Proxy-Authorization",
            "--process-env-mask GITHUB_TOKEN: 'header=Proxy-Authorization' names no header a credential goes in",
        ),
        (
            "GITHUB_TOKEN=api.github.com,header=Content-Length",
            "--process-env-mask GITHUB_TOKEN: 'header=Content-Length' names no header a credential goes in",
        ),
        (
            "GITHUB_TOKEN=api.github.com,header=X Key",
            "--process-env-mask GITHUB_TOKEN: 'header=X Key' names no header a credential goes in",
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
    ids=[
        "no-hosts",
        "headers-alone",
        "host",
        "proxy-header",
        "framing",
        "no-token",
        "not-given",
        "bad-name",
        "bad-port",
    ],
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
    assert mask.headers == {b"authorization"}


def test_a_mask_puts_its_value_in_authorization_and_the_headers_it_names_alone() -> None:
    """``header=NAME`` adds a header the value goes in (an API's key header); a placeholder in any other header
    stays one: the proxy once swapped it in every header, an echoed or logged one among them."""
    mask = Mask.parsed("KEY=api.test,header=X-Api-Key", {"KEY"})
    masks = Masks((mask,), authority=None)  # type: ignore[arg-type]
    given, token = masks.give({"KEY": "value-0001"})
    (swap,) = masks.swaps[str(token)]
    held = given["KEY"].encode()
    sent = {
        name: _swapped(name, b"Bearer " + held, (swap,))
        for name in (b"authorization", b"x-api-key", b"x-other", b"cookie", b"proxy-authorization")
    }
    basic = _swapped(b"authorization", b"Basic " + base64.b64encode(b"user:" + held), (swap,))
    assert mask.headers == {b"authorization", b"x-api-key"}
    assert sent == {
        b"authorization": b"Bearer value-0001",
        b"x-api-key": b"Bearer value-0001",
        b"x-other": b"Bearer " + held,
        b"cookie": b"Bearer " + held,
        b"proxy-authorization": b"Bearer " + held,
    }
    assert base64.b64decode(basic.removeprefix(b"Basic ")) == b"user:value-0001"


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
    assert f"meta mark != {TUNNEL_MARK:#x} meta l4proto tcp ip daddr . th dport @maskedports4" in text  # a tunnel's
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

    async def failing(self: Edge, *asked: Any) -> None:
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
                    await stream.send(b"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n")
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


@pytest.mark.parametrize(
    ("masked", "taken", "refused"),
    [
        (["api.test"], ["api.test", "API.test"], ["sub.api.test", "a.b.api.test", "10.0.0.1", "::1", "xapi.test"]),
        (["127.0.0.9"], ["127.0.0.9"], ["127.0.0.8", "::1", "api.test", "localhost"]),
        (["api.test", "127.0.0.9"], ["api.test", "127.0.0.9"], ["sub.api.test", "10.0.0.1", "::1", "other.test"]),
        (["api.test", "eu.api.test"], ["api.test", "eu.api.test"], ["other.test", "eu.other.test", "10.0.0.1"]),
        ([], [], ["invalid", "api.test", "10.0.0.1"]),
    ],
    ids=["names", "addresses", "both", "nested", "plain-alone"],
)
def test_the_made_authority_constrains_names_and_addresses_both_and_no_subdomain(
    masked: list[str], taken: list[str], refused: list[str]
) -> None:
    """RFC 5280 leaves a form no subtree lists unconstrained, and a name's subtree permits its subdomains: an
    authority permitting ``api.test`` alone once had OpenSSL take its leaf for ``10.0.0.1`` and ``sub.api.test``."""
    authority = Authority.made(masked)
    try:
        pem = authority.certificate.public_bytes(PEM).decode()
        outcome = {host: taken_leaf(pem, authority.context(host), host) for host in taken + refused}
    finally:
        authority.close()
    assert outcome == {**dict.fromkeys(taken, True), **dict.fromkeys(refused, False)}


@pytest.mark.parametrize(
    ("target", "host", "sent"),
    [
        (b"/v1?q=1", b"api.test", (b"/v1?q=1", b"api.test")),
        (b"/", b"API.test.", (b"/", b"api.test")),
        (b"/", b"api.test:443", (b"/", b"api.test")),
        (b"https://api.test/v1?q=1", b"api.test", (b"/v1?q=1", b"api.test")),
        (b"https://API.test:443", b"api.test", (b"/", b"api.test")),
        (b"/", b"other.test", None),
        (b"/", b"api.test:8443", None),
        (b"/", b"api.test:99999", None),
        (b"/", b"user@api.test", None),
        (b"/", b"[api.test", None),
        (b"https://other.test/", b"api.test", None),
        (b"https://api.test:8443/", b"api.test", None),
        (b"http://api.test/", b"api.test", None),
        (b"api.test:443", b"api.test", None),
    ],
)
def test_a_request_in_a_masked_tunnel_goes_in_origin_form_to_its_host_or_is_refused(
    target: bytes, host: bytes, sent: tuple[bytes, bytes] | None
) -> None:
    """The tunnel to ``api.test:443`` takes a request for that site alone, whichever way it names it, and sends it
    on in origin form with the tunnel's ``Host``; another authority (421) never reaches it."""
    import h11

    from mcp_sessions._gateway.sealed._edge import _bound

    asked = h11.Request(method=b"GET", target=target, headers=[(b"host", host), (b"authorization", b"Bearer x")])
    bound = _bound(asked, "api.test", 443)
    assert (None if bound is None else (bound.target, dict(bound.headers)[b"host"])) == sent
    assert bound is None or list(bound.headers)[1:] == [(b"authorization", b"Bearer x")]


def test_a_tunnel_s_own_port_is_in_its_host_and_an_options_asterisk_and_a_host_less_http_1_0_request_go_on() -> None:
    import h11

    from mcp_sessions._gateway.sealed._edge import _bound

    options = _bound(
        h11.Request(method=b"OPTIONS", target=b"*", headers=[(b"host", b"api.test:8443")]), "api.test", 8443
    )
    old = _bound(h11.Request(method=b"GET", target=b"/", headers=[], http_version=b"1.0"), "api.test", 8443)
    star = _bound(h11.Request(method=b"GET", target=b"*", headers=[(b"host", b"api.test:8443")]), "api.test", 8443)
    assert options is not None and (options.target, list(options.headers)) == (b"*", [(b"host", b"api.test:8443")])
    assert old is not None and list(old.headers) == [(b"host", b"api.test:8443")]
    assert star is None


REFUSED_PASSWORD = b"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\nProxy-Authorization: Basic bWNwOng=\r\n\r\n"
"""A whole proxy request with a password no process has (``mcp:x``): a connection the proxy waits on answers it 407."""


async def _answer(stream: anyio.abc.SocketStream) -> bytes:
    """What the proxy sends ``stream`` until it closes it (b"" for a connection closed unanswered), bounded."""
    received = b""
    with anyio.fail_after(WITHIN):
        while True:
            try:
                received += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return received


@pytest.mark.anyio
async def test_connections_before_their_password_are_bounded_per_address_and_in_all_and_closed_as_accepted() -> None:
    """Before a connection's password is seen, an address (a process: each has its own on its link) has 64
    waited on at once and all together 256: one past either is closed as it is accepted, unanswered, while those
    held are still served (407 for a password no process has). A process held 2,500 idle connections for 30 s
    each, every one a descriptor of the gateway's."""
    masks = Masks((), Authority.made(["api.test"]))
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    edge = Edge(masks, listening, asking_within=WITHIN * 10)  # a close seen here is the bound's, never the timeout's
    answers: dict[str, list[bytes]] = {}
    try:
        async with anyio.create_task_group() as tasks, AsyncExitStack() as held:
            tasks.start_soon(edge.serve)

            async def opened(source: str) -> anyio.abc.SocketStream:
                return await held.enter_async_context(await anyio.connect_tcp("127.0.0.1", port, local_host=source))

            # the proxy counts each as it is accepted, in the order of their connect (asyncio runs them in turn)
            first = [await opened("127.0.0.1") for _ in range(ASKING_PER_ADDRESS)]
            answers["65th of one address"] = [await _answer(await opened("127.0.0.1"))]
            others = [await opened(f"127.0.0.{host}") for host in (2, 3, 4) for _ in range(ASKING_PER_ADDRESS)]
            answers["257th of all"] = [await _answer(await opened("127.0.0.5"))]
            for stream in first + others:
                await stream.send(REFUSED_PASSWORD)
            answers["held"] = sorted({(await _answer(stream)).partition(b"\r\n")[0] for stream in first + others})
            fresh = await opened("127.0.0.5")  # those answered are waited on no more
            await fresh.send(REFUSED_PASSWORD)
            answers["after"] = [(await _answer(fresh)).partition(b"\r\n")[0]]
            tasks.cancel_scope.cancel()
    finally:
        masks.close()
        listening.close()
    assert ASKING_PER_ADDRESS * 4 == ASKING
    assert answers == {
        "65th of one address": [b""],
        "257th of all": [b""],
        "held": [b"HTTP/1.1 407 "],
        "after": [b"HTTP/1.1 407 "],
    }
    assert edge.waiting == {}


@pytest.mark.anyio
async def test_a_connection_whose_proxy_request_is_not_whole_in_time_is_answered_400_and_closed() -> None:
    """A connection idle after accept, or sending its head a byte at a time, is closed once its time is up
    (``asking_within``: 10 s by default, as nginx's ``client_header_timeout`` bounds a head), and counted no more."""
    masks = Masks((), Authority.made(["api.test"]))
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    edge = Edge(masks, listening, asking_within=0.5)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(edge.serve)
            async with (
                await anyio.connect_tcp("127.0.0.1", port) as idle,
                await anyio.connect_tcp("127.0.0.1", port) as partial,
            ):
                await partial.send(REFUSED_PASSWORD[:20])
                started = anyio.current_time()
                said = [(await _answer(stream)).partition(b"\r\n")[0] for stream in (idle, partial)]
                waited = anyio.current_time() - started
            tasks.cancel_scope.cancel()
    finally:
        masks.close()
        listening.close()
    assert said == [b"HTTP/1.1 400 "] * 2
    assert 0.4 <= waited < WITHIN
    assert edge.waiting == {}

"""Credentials that never enter a process (``--process-env-mask NAME=HOST[:PORT],...``, issue 95).

A masked ``--process-env`` variable reaches the process as a placeholder of the value's shape (:func:`placeholder`); the
value stays in the gateway, in :class:`Masks`, under a token of that process's own, and is gone when the process ends
(:meth:`Masks.drop`). The process's HTTPS clients reach the world through the gateway's proxy (``_edge``), named in its
``HTTPS_PROXY`` with that token as the proxy's password: the proxy knows whose connection it serves by a secret only
that process was given, never by an address or a port a neighbour could reach too (as Codex's broker and srt bind a
proxy's grant to its sandbox). For a masked credential's own hosts, the proxy terminates TLS with a certificate of the
gateway's certificate authority (:class:`Authority`: made at startup, its key never written anywhere, or the operator's,
read once; its certificate handed to the process through ``SSL_CERT_FILE`` and its peers, beside the host's roots), and
puts the value where the placeholder is in the request's credential headers (``Authorization``, and those the mask
names: :class:`Mask`). The process's direct connections to those hosts are refused by its rules
(``_network.EgressRules``), so the swap happens only where the proxy sends the answer back through TLS it verified
itself. The certificates are made with ``cryptography`` (what PyJWT's ``crypto`` extra installs).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import fcntl
import glob
import ipaddress
import json
import os
import re
import secrets
import shutil
import ssl
import string
import tempfile
from collections.abc import Callable, Collection, Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeAlias
from urllib.parse import urlsplit

from .._keys import private_key
from ._grants import Grant
from ._kernel import RUNTIME
from ._network import GATEWAY, AllowedHost

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    IssuerKey: TypeAlias = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey

CA_IN_PROCESS: Final = "/run/mcp-sessions-ca"
"""Where a process finds the gateway's certificates (a read-only grant): ``ca.pem``, and ``bundle.pem`` (the host's
roots and it)."""
PROXY_USER: Final = "mcp"
SHARED: Final = RUNTIME
"""Where each gateway's certificates are (``--runtime-directory``'s default), in a directory of its own (``ca-*``:
:func:`held_directory`)."""
_JWT_ALPHABET: Final = string.ascii_letters + string.digits + "-_"


CARRIERS: Final = frozenset({b"authorization"})
"""The headers a masked value is put in unless its mask names others (``header=NAME``): the credential's own."""
_NEVER_CARRIERS: Final = frozenset(
    {"host", "connection", "keep-alive", "te", "trailer", "upgrade", "transfer-encoding", "content-length"}
)
"""Headers the proxy builds, drops or frames with: no value goes in them (``Proxy-*`` neither: never forwarded)."""
_TOKEN: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110's field name


@dataclass(frozen=True)
class Mask:
    """One ``--process-env-mask NAME=HOST[:PORT],...[,header=HEADER]``: the variable, the hosts (port 443 unless
    given) where the proxy puts its value back in HTTPS requests, those (``http://HOST[:PORT]``, port 80 unless
    given) where it does in plain HTTP ones too, as the operator opts each in, and the headers it puts it in
    (``Authorization`` and those named: an API's ``X-Api-Key``); a placeholder anywhere else stays one."""

    name: str
    hosts: frozenset[tuple[str, int]]
    plain: frozenset[tuple[str, int]] = frozenset()
    headers: frozenset[bytes] = CARRIERS

    @classmethod
    def parsed(cls, given: str, env: set[str]) -> Mask:
        """``GITHUB_TOKEN=api.github.com,uploads.github.com:443``, ``API_TOKEN=http://api.internal:8080``,
        ``API_KEY=api.example.com,header=X-Api-Key``; ``ValueError`` in one line, else. ``env``: the names
        ``--process-env`` gives."""
        name, equals, listed = given.partition("=")
        if not equals or not listed:
            raise ValueError(
                f"--process-env-mask takes NAME=[http://]HOST[:PORT][,[http://]HOST[:PORT]...][,header=HEADER]: "
                f"{given!r}"
            )
        if name not in env:
            raise ValueError(f"--process-env-mask {name}: no --process-env {name}=SOURCE gives it")
        hosts: set[tuple[str, int]] = set()
        plain: set[tuple[str, int]] = set()
        headers = set(CARRIERS)
        for entry in listed.split(","):
            if entry.lower().startswith("header="):
                header = entry.partition("=")[2]
                if not _TOKEN.fullmatch(header) or header.lower() in _NEVER_CARRIERS or header.lower()[:6] == "proxy-":
                    raise ValueError(
                        f"--process-env-mask {name}: {entry!r} names no header a credential goes in (header=X-Api-Key)"
                    )
                headers.add(header.lower().encode())
                continue
            host = entry.removeprefix("http://")
            port = ("80" if host != entry else "443") if ":" not in host else host.rpartition(":")[2]
            try:
                each = AllowedHost.parsed(host if ":" in host else f"{host}:{port}")
            except ValueError:
                raise ValueError(
                    f"--process-env-mask {name}: {entry!r} is not [http://]HOST[:PORT] (api.github.com, "
                    "api.example.com:8443, http://api.internal:8080)"
                ) from None
            (plain if host != entry else hosts).add((each.name, each.port))
        if not hosts | plain:
            raise ValueError(f"--process-env-mask {name}: no host to put the value in for: {given!r}")
        return cls(name, frozenset(hosts), frozenset(plain), frozenset(headers))


def placeholder(value: str) -> str:
    """A stand-in for ``value`` of its shape: as long, each letter a random letter of its case, each digit a random
    digit, the rest kept (``ghp_`` stays ``???_``, separators stay); a JWT keeps its header and claims, which a client
    may read (its expiry), and gets a random signature of the same length: no use to anyone but as a placeholder.
    Never ``value`` itself."""
    while True:
        parts = value.split(".")
        if len(parts) == 3 and _jwt_header(parts[0]):
            made = f"{parts[0]}.{parts[1]}." + "".join(secrets.choice(_JWT_ALPHABET) for _ in parts[2])
        else:
            made = "".join(_like(char) for char in value)
        if made != value or not any(char.isalnum() for char in value):
            return made


def _like(char: str) -> str:
    for alphabet in (string.ascii_lowercase, string.ascii_uppercase, string.digits):
        if char in alphabet:
            return secrets.choice(alphabet)
    return char


def _jwt_header(text: str) -> bool:
    try:
        header = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, binascii.Error):
        return False
    return isinstance(header, dict) and "alg" in header


@dataclass(frozen=True)
class Swap:
    """One process's masked value: its variable's ``name``, its ``placeholder``, the ``value``, the hosts it is
    put back for (``plain``: in plain HTTP), and the headers it is put in (lower-case)."""

    name: str
    placeholder: str
    value: str
    hosts: frozenset[tuple[str, int]]
    plain: frozenset[tuple[str, int]] = frozenset()
    headers: frozenset[bytes] = CARRIERS


@dataclass
class Masks:
    """The gateway's masked credentials: the flags (``masks``), its :class:`Authority`, the proxy's ``port`` on
    this host's loopback, and each live process's swaps by its proxy token."""

    masks: tuple[Mask, ...]
    authority: Authority
    port: int = 0
    swaps: dict[str, tuple[Swap, ...]] = field(default_factory=dict)
    uids: dict[str, int] = field(default_factory=dict)  # each placed process's uid, by its proxy token

    @property
    def hosts(self) -> frozenset[tuple[str, int]]:
        """Every masked credential's hosts (:func:`masked_hosts`)."""
        return masked_hosts(self.masks)

    @property
    def grant(self) -> Grant:
        """The gateway's certificates, read-only in every process at :data:`CA_IN_PROCESS`."""
        return Grant(self.authority.shared, CA_IN_PROCESS, writable=False)

    def give(self, values: dict[str, str]) -> tuple[dict[str, str], str | None]:
        """What a process started with ``values`` is given instead: each masked value's placeholder, the proxy's
        variables (``NODE_USE_ENV_PROXY``, for Node's ``fetch``, among them) and the certificates'; and its proxy token
        (None where no value is masked: nothing to add)."""
        masked = [mask for mask in self.masks if mask.name in values]
        if not masked:
            return values, None
        token = secrets.token_urlsafe(32)
        swaps = tuple(
            Swap(mask.name, placeholder(values[mask.name]), values[mask.name], mask.hosts, mask.plain, mask.headers)
            for mask in masked
        )
        self.swaps[token] = swaps
        proxy = f"http://{PROXY_USER}:{token}@{GATEWAY}:{self.port}"
        # plain HTTP through the proxy only where a credential opted a host in: the rest goes out as it did
        plain = ("HTTP_PROXY", "http_proxy") if any(mask.plain for mask in masked) else ()
        bundle = f"{CA_IN_PROCESS}/bundle.pem"
        ca = f"{CA_IN_PROCESS}/ca.pem"
        given = {
            **values,
            **{mask.name: swap.placeholder for mask, swap in zip(masked, swaps, strict=True)},
            **dict.fromkeys(("HTTPS_PROXY", "https_proxy", *plain), proxy),
            "NODE_USE_ENV_PROXY": "1",  # Node's own fetch reads them (from 22.21 and 24.5)
            **dict.fromkeys(("NO_PROXY", "no_proxy"), "localhost,127.0.0.1,::1"),
            **dict.fromkeys(("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"), bundle),
            "NODE_EXTRA_CA_CERTS": ca,
        }
        return given, token

    def renew(self, token: str | None, values: dict[str, str]) -> None:
        """A live process's values as its conversation's latest request gives them (an exchanged token renewed by
        the gateway): its placeholders stay, the proxy puts the new values in."""
        if token is not None and (swaps := self.swaps.get(token)) is not None:
            self.swaps[token] = tuple(replace(swap, value=values.get(swap.name, swap.value)) for swap in swaps)

    def placed(self, environ: Mapping[str, str], uid: int | None) -> None:
        """The uid the process given ``environ`` (by :meth:`give`) runs as, once its place is made; None as it leaves
        it, before the uid is given back: the proxy's opaque tunnels of that process are made as that uid, under its
        rules (``_edge``), and none once it is not the process's."""
        token = urlsplit(environ.get("HTTPS_PROXY", "")).password
        if token is not None and token in self.swaps and uid is not None:
            self.uids[token] = uid
        elif token is not None:
            self.uids.pop(token, None)

    def drop(self, token: str | None) -> None:
        """A process's values forgotten, as it ends."""
        if token is not None:
            self.swaps.pop(token, None)
            self.uids.pop(token, None)

    def close(self) -> None:
        self.authority.close()


def masked_hosts(masks: Collection[Mask]) -> frozenset[tuple[str, int]]:
    """Every host of ``masks``, plain HTTP's too: the process's rules refuse its direct connections to them."""
    return frozenset(host for mask in masks for host in mask.hosts | mask.plain)


class Authority:
    """The gateway's certificate authority: its ``key`` (in the gateway's memory alone) and ``certificate``, made at
    startup (:meth:`made`) or the operator's (:meth:`given`), and the certificate of each masked host it signs, on
    first use. ``shared``: a directory every process may read (``ca.pem``, the authority's certificate alone, and
    ``bundle.pem``, the host's roots and it), held while the gateway lives (:func:`held_directory`). The leaves' key
    and certificates reach ``ssl`` through a memory file, never a file on disk."""

    def __init__(
        self, key: IssuerKey, certificate: x509.Certificate, roots: str | None = None, runtime: str = SHARED
    ) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        self.key = key
        self.certificate = certificate
        try:  # a verifier matches a leaf's issuer by this identifier where it has one: the operator's may be any
            known = certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
            self.identifier = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(known)
        except x509.ExtensionNotFound:
            self.identifier = x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key())
        self.leaf_key = ec.generate_private_key(ec.SECP256R1())
        pem = certificate.public_bytes(serialization.Encoding.PEM)
        roots = roots or ssl.get_default_verify_paths().cafile or ""
        host_roots = Path(roots).read_bytes() if roots and os.path.isfile(roots) else b""
        self.shared, self.lock = held_directory(runtime)
        os.chmod(self.shared, 0o755)  # noqa: S103 - certificates, every process reads them
        for file, text in (("ca.pem", pem), ("bundle.pem", host_roots.rstrip() + b"\n" + pem)):
            Path(self.shared, file).write_bytes(text)
            os.chmod(os.path.join(self.shared, file), 0o644)
        self.contexts: dict[str, ssl.SSLContext] = {}

    @classmethod
    def made(cls, hosts: Collection[str], roots: str | None = None, runtime: str = SHARED) -> Authority:
        """An authority of the gateway's own, made now (a P-256 key, a name no other gateway's has), whose
        certificate permits ``hosts`` alone (RFC 5280's name constraints, critical: :func:`constraints`): a leaf it
        signed for any other name or address fails every client's verification, whoever made it."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"mcp-sessions gateway {secrets.token_hex(4)}")])
        permitted, excluded = constraints(hosts)
        constrained = x509.NameConstraints(permitted_subtrees=permitted, excluded_subtrees=excluded)
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(*(False,) * 5, True, True, False, False), critical=True)
            .add_extension(constrained, critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, certificate, roots, runtime)

    @classmethod
    def given(cls, files: str, roots: str | None = None, runtime: str = SHARED) -> Authority:
        """The operator's authority, ``--process-env-mask-ca CERT.pem[,KEY.pem]`` (one file may hold both), read
        once; ``ValueError`` in one line (never a byte of the key) for a file that cannot be read, a key others may
        read, a certificate that is no authority's or has expired, or a key that is not its."""
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        flag = "--process-env-mask-ca CERT.pem[,KEY.pem]"
        certificate_file, _, key_file = files.partition(",")
        key_file = key_file or certificate_file
        key = private_key(key_file, flag)
        try:
            text = Path(certificate_file).read_bytes()
        except OSError as exc:
            raise ValueError(f"{flag}: {exc.filename} cannot be read ({exc.strerror})") from None
        try:
            certificate = x509.load_pem_x509_certificate(text)
        except ValueError:
            raise ValueError(f"{flag}: {certificate_file} holds no PEM certificate") from None
        extensions = {type(each.value): each.value for each in certificate.extensions}
        basic = extensions.get(x509.BasicConstraints)
        usage = extensions.get(x509.KeyUsage)
        if not isinstance(basic, x509.BasicConstraints) or not basic.ca:
            raise ValueError(f"{flag}: {certificate_file} is no certificate authority's (no basicConstraints CA:TRUE)")
        if isinstance(usage, x509.KeyUsage) and not usage.key_cert_sign:
            raise ValueError(f"{flag}: {certificate_file}'s keyUsage does not let it sign certificates (keyCertSign)")
        if certificate.not_valid_after_utc <= datetime.datetime.now(datetime.UTC):
            raise ValueError(f"{flag}: {certificate_file} expired on {certificate.not_valid_after_utc:%Y-%m-%d}")
        spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        if key.public_key().public_bytes(*spki) != certificate.public_key().public_bytes(*spki):
            raise ValueError(f"{flag}: {key_file}'s key is not {certificate_file}'s certificate's")
        return cls(key, certificate, roots, runtime)

    def context(self, host: str) -> ssl.SSLContext:
        """A server context whose certificate names ``host``, signed by this authority (made once a host), whose
        handshake a client that names another server refuses (:func:`_named`)."""
        if (found := self.contexts.get(host)) is not None:
            return found
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        # an address's leaf names it in its alternative name alone (critical, RFC 5280 4.2.1.6): a verifier takes a
        # common name that looks like a host name for one, which a name constraint of an address does not permit
        try:
            alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
            subject = x509.Name([])
        except ValueError:
            alt = x509.DNSName(host)
            subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
        now = datetime.datetime.now(datetime.UTC)
        leaf = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.certificate.subject)
            .public_key(self.leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(min(now + datetime.timedelta(days=90), self.certificate.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName([alt]), critical=not subject)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(self.identifier, critical=False)
            .sign(self.key, hashes.SHA256())
        )
        key = self.leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        pem = serialization.Encoding.PEM
        chain = leaf.public_bytes(pem) + self.certificate.public_bytes(pem)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        held = os.memfd_create("mcp-sessions-leaf", os.MFD_CLOEXEC)  # the key in memory alone, never in a file
        try:
            os.write(held, chain + key)
            context.load_cert_chain(f"/proc/self/fd/{held}")
        finally:
            os.close(held)
        context.set_alpn_protocols(["http/1.1"])
        context.sni_callback = _named(host.lower().removesuffix("."))
        self.contexts[host] = context
        return context

    def close(self) -> None:
        shutil.rmtree(self.shared, ignore_errors=True)
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None


def _named(host: str) -> Callable[[ssl.SSLObject, str | None, ssl.SSLContext], int | None]:
    """An ``sni_callback`` refusing a client whose TLS server name is not ``host``: a tunnel to a masked host is
    that site's alone, and a request in it that names another (a CDN's, a load balancer's) would get the value.
    RFC 6066 section 3's ``unrecognized_name``, as a server does for a name it does not serve: the handshake ends
    before any request (anyio's TLS stream closes the connection without sending the alert). A client that sends
    no name (as for an address) goes on, and its ``Host`` is checked (``_edge._bound``)."""

    def named(connection: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> int | None:
        if name is not None and name.lower().removesuffix(".") != host:
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        return None

    return named


def held_directory(parent: str = SHARED) -> tuple[str, int | None]:
    """A new directory of this gateway's under ``parent`` (``ca-*``), and the descriptor that holds a lock on it
    (``flock``) while the gateway lives, as each gateway's nftables table is held (``_network``); first, the ``ca-*``
    directories whose lock no one holds, a SIGKILLed gateway's, removed. It is made under another name and renamed
    once locked, so that no other gateway's start takes it for a dead one's meanwhile."""
    os.makedirs(parent, mode=0o755, exist_ok=True)
    for left in glob.glob(os.path.join(parent, "ca-*")):
        with suppress(OSError):  # BlockingIOError among them: its gateway lives
            held = os.open(left, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(left)
            finally:
                os.close(held)
    made = tempfile.mkdtemp(prefix=".ca-", dir=parent)
    lock = os.open(made, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    shared = os.path.join(parent, os.path.basename(made).removeprefix("."))
    os.rename(made, shared)
    return shared, lock


def constraints(hosts: Collection[str]) -> tuple[list[x509.GeneralName], list[x509.GeneralName]]:
    """The permitted and excluded subtrees of an authority for ``hosts`` alone (names and IPv4 addresses). RFC 5280
    leaves a form no subtree lists unconstrained, and a name's subtree permits every name under it: so every
    address is excluded where no address is masked (``0.0.0.0/0``, ``::/0``), every name where no name is (the
    empty name, which OpenSSL, GnuTLS and Go match to every name), and the names under each masked name
    (``.NAME``, which matches those alone), unless another masked name lies under it (an excluded subtree wins
    over a permitted one: its other names stay permitted then)."""
    from cryptography import x509

    names = []
    addresses = []
    for host in sorted(set(hosts)):
        try:
            addresses.append(ipaddress.ip_network(host))
        except ValueError:
            names.append(host)
    permitted: list[x509.GeneralName] = [x509.DNSName(name) for name in names]
    permitted += [x509.IPAddress(address) for address in addresses]
    excluded: list[x509.GeneralName] = [
        x509.DNSName(f".{name}") for name in names if not any(other.endswith(f".{name}") for other in names)
    ]
    if not names:
        excluded.append(x509.DNSName(""))
    if not addresses:
        excluded += [x509.IPAddress(ipaddress.ip_network("0.0.0.0/0")), x509.IPAddress(ipaddress.ip_network("::/0"))]
    if not permitted:  # masks of plain HTTP hosts alone: a name no host has (RFC 2606), so that it vouches for none
        permitted.append(x509.DNSName("invalid"))
    return permitted, excluded

"""Certificate authorities of the tests' and benchmarks' own, made with ``cryptography``: the stand-in servers' (a
"real" HTTPS API's, for the masked credentials' proxy to verify) and an operator's for ``--process-env-mask-ca``, in
the shapes a test asks for (no CA, no ``keyCertSign``, expired, another kind of key)."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

PEM = serialization.Encoding.PEM
_PRIVATE = serialization.PrivateFormat.PKCS8, serialization.NoEncryption()


def authority(
    name: str, *, key: Any = None, ca: bool = True, cert_sign: bool = True, days: int = 1
) -> tuple[Any, x509.Certificate]:
    """A self-signed authority named ``name`` (a P-256 key unless ``key``), valid from a day before now to ``days``
    after it: its key and certificate."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(x509.KeyUsage(not cert_sign, *(False,) * 4, cert_sign, cert_sign, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256())
    )
    return key, certificate


def stand_in_server(directory: Path, names: Sequence[str]) -> tuple[str, str, str]:
    """An authority of a stand-in server's own and the server's certificate for ``names`` (host names or
    addresses), written in ``directory``: the authority's file (the gateway's ``SSL_CERT_FILE``), the server's chain
    and its key."""
    key, root = authority("stand-in authority")
    server_key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(root.subject)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([_general_name(each) for each in names]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    files = directory / "authority.pem", directory / "chain.pem", directory / "key.pem"
    files[0].write_bytes(root.public_bytes(PEM))
    files[1].write_bytes(server.public_bytes(PEM) + root.public_bytes(PEM))
    files[2].write_bytes(server_key.private_bytes(PEM, *_PRIVATE))
    return str(files[0]), str(files[1]), str(files[2])


def written_key(key: Any, path: Path) -> Path:
    """``key`` in ``path`` (PEM, unencrypted), mode 0600, as an operator keeps it."""
    path.write_bytes(key.private_bytes(PEM, *_PRIVATE))
    path.chmod(0o600)
    return path


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def taken_leaf(authority: str, leaf: ssl.SSLContext, host: str) -> bool:
    """Whether OpenSSL (Python's ``ssl``, as a process's client), trusting ``authority`` (PEM) alone, takes the
    certificate the server context ``leaf`` shows for ``host``: a handshake between memory buffers."""
    trusting = ssl.create_default_context(cadata=authority)
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client = trusting.wrap_bio(client_in, client_out, server_hostname=host)
    server = leaf.wrap_bio(server_in, server_out, server_side=True)
    for _ in range(4):  # TLS 1.3: two flights each way
        for ends, inbox, outbox in ((client, client_in, server_out), (server, server_in, client_out)):
            inbox.write(outbox.read())
            try:
                ends.do_handshake()
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLCertVerificationError:
                return False
    return client.version() is not None

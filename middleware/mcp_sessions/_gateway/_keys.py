"""The operator's private keys, read once at startup: the masks' certificate authority's (``--process-env-mask-ca``)
and the gateway's own as an OAuth client (``--exchange-client-key-file``, ``--id-jag-client-key-file``:
``private_key_jwt``).

One reading for both, so that a key file is refused the same way wherever it is given: one that others may read
(the processes read the host's files, each as a uid and groups of its own), an encrypted one (the gateway has no one
to ask for its pass phrase), one that holds no key, or a key neither RSA nor EC. Each refusal is one line that names
the flag and the file, never a byte of the key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    PrivateKey: TypeAlias = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


def private_key(path: str, flag: str) -> PrivateKey:
    """The unencrypted RSA or EC key in the PEM file ``path`` (mode 0600 or stricter), given by ``flag``;
    ``ValueError`` in one line otherwise."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    try:
        mode = os.stat(path).st_mode & 0o777
        text = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"{flag}: {exc.filename} cannot be read ({exc.strerror})") from None
    if mode & 0o077:
        raise ValueError(f"{flag}: {path} is open to others (mode {mode:o}): chmod 600 it")
    try:
        key = serialization.load_pem_private_key(text, password=None)
    except TypeError:
        raise ValueError(f"{flag}: {path}'s key is encrypted: the gateway takes it unencrypted") from None
    except (ValueError, UnsupportedAlgorithm):
        raise ValueError(f"{flag}: {path} holds no PEM private key") from None
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise ValueError(f"{flag}: {path}'s key is neither RSA nor EC")
    return key

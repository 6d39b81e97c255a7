"""Whether a ``--stdio`` server run by Node reaches masked hosts through the gateway's proxy: Node's own ``fetch``
reads ``HTTPS_PROXY`` only from 22.21 (and 24.5 in its 24 line), under ``NODE_USE_ENV_PROXY=1``, which the gateway
sets (``sealed._masks``); an older one connects directly, and the egress rules refuse it. What the startup says of
it, from ``node --version`` run once: the same file the processes run (the first ``node`` on the ``PATH`` they are
given), run as the gateway's user."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Final

from .._wire import printable

PROXIED: Final = ((22, 21), (24, 5))
"""The first release of each line whose ``fetch`` takes the proxy from the environment; every line after 24 does."""
_VERSION: Final = re.compile(r"v(\d+)\.(\d+)\.\d+")


def node_without_proxy(command: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """One line for the startup's log where ``command`` runs ``node`` (or ``npx``, whose ``node`` is the ``PATH``'s)
    older than :data:`PROXIED`: which one, and that its ``fetch`` misses the masked hosts; None otherwise (another
    program, a Node that reads the proxy, or one that does not say its version within 5 s)."""
    program = os.path.basename(command[0]) if command else ""
    if program not in ("node", "npx"):
        return None
    node = shutil.which("node" if program == "npx" else command[0], path=environ.get("PATH", os.defpath))
    if node is None:
        return None
    try:
        said = subprocess.run([node, "--version"], capture_output=True, timeout=5, check=False)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = _VERSION.fullmatch(said.stdout.decode("ascii", "replace").strip())
    if found is None:
        return None
    version = (int(found[1]), int(found[2]))
    if version >= (25, 0) or any(first <= version < (first[0] + 1, 0) for first in PROXIED):
        return None
    return (
        f"the server's Node is {found[0]} ({printable(node)}): its own fetch ignores HTTPS_PROXY before 22.21 (24.5 in "
        "the 24 line), so it cannot reach the masked hosts (its direct connection is refused); run it on a "
        "later Node, or set undici's EnvHttpProxyAgent as its dispatcher"
    )

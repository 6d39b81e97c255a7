"""``mcp-sessions gateway --stdio``'s sealed processes hold nothing of the gateway's or the host's that they were not
given, and no more of what is shared than their bounds (issue 92, items 5 and 7): no descriptor of the gateway's, a
hostname of their own, no socket file of the host's under ``/run``, ptys of their own devpts, and socket buffers and
directories counted in their memory. A real gateway process, run as root, in front of the hostile server of
``e2e._sealed``.

What a test needs of the host it says through :func:`needs`: skipped without it, failed under ``CI=true``.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from e2e._sealed import UIDS, call, client, gateway, hostile, needs, text

CONTAINMENTS = ["bwrap", "unshare"]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The hostile server's command (:func:`hostile`)."""
    with hostile() as command:
        yield command


@pytest.mark.parametrize("containment", CONTAINMENTS)
def test_a_process_holds_no_descriptor_of_the_gateways_and_has_a_hostname_of_its_own(
    server: str, containment: str
) -> None:
    """The server's open descriptors are its stdin, stdout and stderr (and the one it lists them by): the memfd that
    held its environment (fd 14) reached it; its hostname is a neutral one of its own UTS namespace, not the host's."""
    needs("root", containment)
    sealed = ("--process-containment", containment, "--process-uids", UIDS)
    with gateway(server, *sealed) as process:
        mcp = client(process)
        session = mcp.create_session()
        held = json.loads(text(call(mcp, "fds", session)))
        hostname = text(call(mcp, "hostname", session))

    listing = [fd for fd, target in held.items() if target.endswith("/fd")]
    assert sorted(set(held) - set(listing), key=int) == ["0", "1", "2"], held
    assert hostname == "localhost" != socket.gethostname()

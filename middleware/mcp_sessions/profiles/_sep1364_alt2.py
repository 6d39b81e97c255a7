"""The wire profile "sep1364-alt2": SEP-1364's second alternative, ``initialize`` opens the session.

``initialize`` may be called many times and carries a top-level ``sessionId``
(the SEP's table): ``null`` opens a new session, a valid id resumes it, an
invalid one is an error; the response carries the id at its top level. An
``initialize`` without the member is an ordinary one and is left alone.
Requests then carry the top-level ``sessionId`` (removed before the server sees
them); ``terminate`` ends the session. ``Mcp-Session-Id`` mirrors it; on a
stateful 2025-era server the middleware maps it to the server's own transport
session (see ``docs/profiles.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ._base import SESSIONLESS, Capability, LocalMethod, WireProfile
from ._carriers import TopLevelCarrier
from ._draft import SESSION_NOT_FOUND, SESSION_REQUIRED
from ._echo_shapes import TopLevelEcho
from ._sep1364_alt1 import SESSION_ID_MEMBER, end_named

if TYPE_CHECKING:
    from ._local import LocalCall

METHOD_OPEN: Final = "initialize"
METHOD_TERMINATE: Final = "terminate"


async def terminate(call: LocalCall) -> dict[str, object]:
    """``terminate``: end the named session; an unknown or already ended one is "not found"."""
    return await end_named(call, "terminate")


SEP1364_ALT2: Final = WireProfile(
    name="sep1364-alt2",
    carrier=TopLevelCarrier(member=SESSION_ID_MEMBER, opening_methods=frozenset({METHOD_OPEN})),
    echo=TopLevelEcho(member=SESSION_ID_MEMBER),
    # The SEP gives this alternative no capability: initialize with a null sessionId is the probe.
    capability=Capability(per_request=(), handshake=()),
    advertised_per_request=frozenset(),
    advertised_handshake=frozenset(),
    methods={METHOD_TERMINATE: LocalMethod(needs_session=False, answer=terminate)},
    sessionless=SESSIONLESS | {METHOD_OPEN, METHOD_TERMINATE},
    not_found=SESSION_NOT_FOUND,
    required=SESSION_REQUIRED,
    required_data={"open": METHOD_OPEN},
    required_hint=(
        f'call {METHOD_OPEN} with "{SESSION_ID_MEMBER}": null and send the sessionId it returns'
        f' as the top-level "{SESSION_ID_MEMBER}" of each request'
    ),
    not_found_hint=f"the session ended or is not this caller's; call {METHOD_OPEN} with a null sessionId for a new one",
    create_method=METHOD_OPEN,
    header_every_era=True,
)
"""SEP-1364 alternative 2 (``initialize`` with a top-level ``sessionId``, ``terminate``)."""

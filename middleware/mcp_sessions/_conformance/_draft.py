"""The scenario ``sessions-draft``: the data-layer sessions draft (transports-wg PR #20, 2026-03-13).

The fixture it needs from the server: the quickstart's tools (``count``,
``set_mode``, ``get_mode``, ``countdown``), each needing a session except
``countdown``. A check whose tool is missing fails as not testable.
"""

from __future__ import annotations

from ._draft_checks import (
    check_capability,
    check_context,
    check_create,
    check_echo,
    check_ids,
    check_legacy_header,
    check_required,
    check_sessionless,
)
from ._draft_context import Draft
from ._draft_errors import (
    check_batches,
    check_create_refusals,
    check_delete,
    check_errors_carry_no_session,
    check_http_status,
    check_malformed,
    check_mismatch,
    check_not_found,
    check_not_found_data,
    check_state,
)
from ._exchange import tool_names
from ._model import LEGACY, Recorder
from ._peer import Peer

__all__ = ["run_draft"]


def run_draft(peer: Peer, rec: Recorder) -> None:
    """Every check of the draft wire, in an order where each finds what it needs."""
    draft = Draft(peer, rec)
    if peer.era == LEGACY:
        peer.handshake()
    check_capability(draft)
    first = check_create(draft)
    _, second = draft.create()
    check_ids(draft, first, second)
    listed = check_legacy_header(draft, first)
    draft.tools = tool_names(listed)
    sessionless = check_sessionless(draft)
    check_echo(draft, listed, sessionless, first)
    check_context(draft, first, second)
    check_required(draft)
    check_not_found(draft, first)
    check_malformed(draft)
    check_create_refusals(draft, first)
    check_mismatch(draft, first)
    check_state(draft, first, second)
    check_errors_carry_no_session(draft, first)
    if second is not None:
        check_delete(draft, second)
    else:
        for check in ("sessions-draft-delete", "sessions-draft-deleted-session", "sessions-draft-delete-unknown"):
            rec.untestable(check, "a second sessions/create returned no session to delete")
    check_batches(draft)
    check_not_found_data(draft)
    check_http_status(draft)

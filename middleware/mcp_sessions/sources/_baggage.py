"""W3C Baggage, read for one member: the conversation a host or gateway puts in ``gen_ai.conversation.id``.

The format is the W3C Baggage Recommendation (https://www.w3.org/TR/baggage/):
comma-separated ``key=value`` members, each optionally followed by
``;``-separated properties, optional whitespace around every delimiter,
values percent-encoded. Baggage longer than 8192 bytes, with more than 180
members, or not following the grammar is ignored as a whole: it names no
conversation, and it is never an error (the client merely asserted it).
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote

__all__ = ["CONVERSATION_MEMBER", "MAX_BAGGAGE_BYTES", "MAX_BAGGAGE_MEMBERS", "baggage_member"]

CONVERSATION_MEMBER: Final = "gen_ai.conversation.id"
"""The baggage member that names a conversation (the OpenTelemetry GenAI conventions' attribute)."""
MAX_BAGGAGE_BYTES: Final = 8192
MAX_BAGGAGE_MEMBERS: Final = 180

_OWS: Final = r"[ \t]*"
_KEY: Final = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_VALUE: Final = r"[!#-+\--:<-\[\]-~]*"  # baggage-octet: printable ASCII but space, '"', ',', ';' and '\'
# One list-member: its key and raw value captured, its properties (``;key`` or ``;key=value``) checked only.
_MEMBER: Final = re.compile(
    rf"{_OWS}({_KEY}){_OWS}={_OWS}({_VALUE}){_OWS}(?:;{_OWS}{_KEY}{_OWS}(?:={_OWS}{_VALUE}{_OWS})?)*"
)


def baggage_member(baggage: str, key: str = CONVERSATION_MEMBER) -> str | None:
    """The decoded value of ``baggage``'s first member named ``key``, or ``None``.

    ``None`` too when the baggage is oversized or malformed anywhere (not only in
    that member), so a value is read only from baggage a conforming propagator
    would have kept whole. A request without the key costs one substring search.
    """
    if key not in baggage or len(baggage) > MAX_BAGGAGE_BYTES or not baggage.isascii():
        return None
    members = baggage.split(",")
    if len(members) > MAX_BAGGAGE_MEMBERS:
        return None
    found: str | None = None
    for member in members:
        match = _MEMBER.fullmatch(member)
        if match is None:
            return None
        if found is None and match[1] == key:
            found = match[2]
    # Invalid UTF-8 in a percent-encoded value becomes U+FFFD, as the Recommendation says.
    return None if found is None else unquote(found, errors="replace")

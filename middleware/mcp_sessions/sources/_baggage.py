"""W3C Baggage, read for one member: the conversation a host or gateway puts in ``gen_ai.conversation.id``.

The format is the W3C Baggage Recommendation (https://www.w3.org/TR/baggage/): comma-separated ``key=value``
members, each optionally followed by ``;``-separated properties, optional whitespace around every delimiter,
values percent-encoded. Baggage longer than 8192 bytes, with more than 180 members or a member longer than
4096 bytes (OpenTelemetry's propagator's limits), or not following the grammar is ignored as a whole: it names
no conversation, and it is never an error (the client merely asserted it).

Read with ``split``, ``partition`` and ``strip``, each one pass over its part, so in time linear in the
baggage whatever it holds (a regular expression with optional whitespace on both sides of an empty value
backtracks quadratically).
"""

from __future__ import annotations

from typing import Final
from urllib.parse import unquote

CONVERSATION_MEMBER: Final = "gen_ai.conversation.id"
"""The baggage member that names a conversation (the OpenTelemetry GenAI conventions' attribute)."""
MAX_BAGGAGE_BYTES: Final = 8192
MAX_BAGGAGE_MEMBERS: Final = 180
MAX_MEMBER_BYTES: Final = 4096

_OWS: Final = " \t"
_KEY_CHARS: Final = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
# baggage-octet: printable ASCII but space, '"', ',', ';' and '\'
_VALUE_CHARS: Final = frozenset(map(chr, range(0x21, 0x7F))) - frozenset('",;\\')


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
        parsed = _member(member)
        if parsed is None:
            return None
        if found is None and parsed[0] == key:
            found = parsed[1]
    # Invalid UTF-8 in a percent-encoded value becomes U+FFFD, as the Recommendation says.
    return None if found is None else unquote(found, errors="replace")


def _member(member: str) -> tuple[str, str] | None:
    """A list-member's key and raw value, or ``None`` if it breaks the grammar (its properties are checked only).

    ``OWS key OWS "=" OWS value OWS *( ";" OWS key OWS [ "=" OWS value OWS ] )``: a key has no ``=`` and
    no value has a ``;``, so the first ``=`` ends the key and every ``;`` starts a property.
    """
    if len(member) > MAX_MEMBER_BYTES:
        return None
    name, equals, rest = member.partition("=")
    value, *properties = rest.split(";")
    name, value = name.strip(_OWS), value.strip(_OWS)
    if not equals or not _is_key(name) or not _VALUE_CHARS.issuperset(value):
        return None
    for prop in properties:
        prop_name, _, prop_value = prop.partition("=")  # a key alone has an empty value
        if not _is_key(prop_name.strip(_OWS)) or not _VALUE_CHARS.issuperset(prop_value.strip(_OWS)):
            return None
    return name, value


def _is_key(text: str) -> bool:
    return bool(text) and _KEY_CHARS.issuperset(text)

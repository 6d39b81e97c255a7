"""Host conversation ids: the ids real MCP hosts already send with every request.

Each host puts its id in a ``_meta`` key or a header (:data:`BUILT_IN_HOSTS`, then the configured keys);
failing all of those, the ``gen_ai.conversation.id`` member of W3C baggage (the ``baggage`` header, else
``_meta["baggage"]``) names it. The client asserts these ids and nothing verifies them, so by default they
name the conversation in telemetry only; ``conversation_data`` opts into per-conversation data.

Baggage is read for one member, as the W3C Baggage Recommendation (https://www.w3.org/TR/baggage/) writes it:
comma-separated ``key=value`` members, each optionally followed by ``;``-separated properties, optional
whitespace around every delimiter, values percent-encoded. Baggage longer than 8192 bytes, with more than 180
members or a member longer than 4096 bytes (OpenTelemetry's propagator's limits), or not following the grammar
is ignored as a whole: it names no conversation, and it is never an error (the client merely asserted it). It
is read with ``split``, ``partition`` and ``strip``, each one pass over its part, so in time linear in the
baggage whatever it holds (a regular expression with optional whitespace on both sides of an empty value
backtracks quadratically).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Final
from urllib.parse import unquote

from starlette.types import Scope

from .._bounded import BoundedDict
from .._session import Quota, caller_of
from .._wire import jsonrpc
from .._wire.protocol import CONVERSATION_MEMBER as CONVERSATION_MEMBER
from .._wire.protocol import conversation_id as conversation_id
from ._base import (
    DEFAULT_MAX_CONVERSATIONS_PER_CALLER,
    TOO_MANY_SESSIONS_MESSAGE,
    Conversation,
    ConversationData,
    HostKey,
)

if TYPE_CHECKING:
    from .._session import Session
    from ._base import CallView, RequestView, SourceContext, SourceDigests, SourceSessions

_HEADER_NAME: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


BUILT_IN_HOSTS: Final = (
    HostKey("openai", "meta", "openai/session"),
    HostKey("vscode", "meta", "vscode.conversationId"),
    HostKey("goose", "header", "agent-session-id"),
    HostKey("goose", "meta", "agent-session-id"),
    HostKey("opencode", "meta", "sessionID"),
    HostKey("codex", "meta", "x-codex-turn-metadata", "thread_id"),
    HostKey("codex", "meta", "x-codex-turn-metadata", "session_id"),  # a root thread's, shared by its sub-agents
    HostKey("codex", "meta", "threadId"),
)
"""The hosts recognised without configuration, in the order they are tried."""

# What some hosts send beside the conversation (a _meta key, and a member of the object there): the user
# (ChatGPT's anonymized user, telemetry's user.id).
USER_KEYS: Final = {"openai": ("openai/subject", None)}
TURN_KEYS: Final = (
    ("x-codex-turn-metadata", "turn_id"),  # Codex's turn of a thread
    ("claudecode/toolUseId", None),  # Claude Code's tool call, over HTTP its only id (a new one every call)
    ("vscode.requestId", None),  # VS Code's chat request
)
"""Where hosts name the turn of a conversation a call is part of, tried in order: a span attribute, never a
conversation (each changes within one)."""


def host_keys_from_config(config: str | Iterable[str]) -> tuple[HostKey, ...]:
    """User-defined host keys from ``meta:KEY`` and ``header:NAME`` entries (a list, or one comma-separated text)."""
    keys: list[HostKey] = []
    for entry in config.split(",") if isinstance(config, str) else list(config):
        if not isinstance(entry, str):
            raise TypeError(f"conversation_keys: each entry is a 'meta:KEY' or 'header:NAME' string, got {entry!r}")
        if not (text := entry.strip()):
            continue
        place, _, key = text.partition(":")
        place, key = place.strip().lower(), key.strip()
        if place == "meta" and any(key == turn for turn, member in TURN_KEYS if member is None):
            raise ValueError(f"conversation_keys: {key!r} names a turn of a conversation (each call its own), not one")
        if place == "meta" and key:
            keys.append(HostKey(f"meta:{key}", "meta", key))
        elif place == "header" and _HEADER_NAME.fullmatch(key):
            keys.append(HostKey(f"header:{key.lower()}", "header", key.lower()))
        else:
            raise ValueError(
                f"conversation_keys: {text!r} is not 'meta:KEY' or 'header:NAME' (e.g. meta:acme/chat,header:x-chat)"
            )
    return tuple(keys)


def turn_of(meta: object) -> str | None:
    """The turn a call's ``_meta`` names (:data:`TURN_KEYS`), or ``None``."""
    if not isinstance(meta, dict):
        return None
    for key, member in TURN_KEYS:
        if (found := conversation_id(member_of(meta, key, member))) is not None:
            return found
    return None


def member_of(meta: dict[str, object], key: str, member: str | None) -> object:
    """``meta[key]``, or with ``member`` that member of the object there (``None`` if absent)."""
    value = meta.get(key)
    if member is None or value is None:
        return value
    return value.get(member) if isinstance(value, dict) else None


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
    would have kept whole.
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


_MAX_KNOWN: Final = 100_000  # conversations remembered as started (so counted once); the oldest forgotten first
_DATA_OFF: Final = (
    "conversation data is off, so the host's conversation id ({source}) names this conversation in traces only; "
    'to keep data per conversation set conversation_data="anonymous" or "principal" '
    "(MCP_SESSIONS_CONVERSATION_DATA)"
)


def _meta_of(call: CallView) -> object:
    return jsonrpc.meta(call.message.get("params"))


class HostConversationSource:
    """The conversation a host names, first matching host key first; an unusable id is ignored, never an error.

    With data on, a conversation this process has not seen in its lifetime (``ttl``) is new: it is
    counted against its caller's create limit (a new conversation is a session created) and at most
    ``max_per_caller`` conversations with data at once. Over either, it gets no data, and
    ``no_data`` says why; conversations already started keep theirs.
    """

    name = "host"
    """The source's name, in telemetry (a conversation's own source is the host's name)."""

    def __init__(
        self,
        keys: Iterable[HostKey],
        *,
        sessions: SourceSessions,
        digests: SourceDigests,
        data: ConversationData = "off",
        max_per_caller: int | None = DEFAULT_MAX_CONVERSATIONS_PER_CALLER,
    ) -> None:
        self._keys = tuple(dict.fromkeys(keys))
        self._sessions = sessions
        self._digests = digests
        self._data = data
        self._quota = None if max_per_caller is None else Quota(max_per_caller)
        self._known: BoundedDict[str, float] = BoundedDict(_MAX_KNOWN)  # started conversations: when each ends

    @classmethod
    def from_context(cls, context: SourceContext) -> HostConversationSource:
        """The source in a middleware's chain (see ``sources=``): its hosts, ``conversation_data`` and budget."""
        return cls(
            context.host_keys,
            sessions=context.sessions,
            digests=context.digests,
            data=context.conversation_data,
            max_per_caller=context.max_conversations_per_caller,
        )

    @property
    def data(self) -> ConversationData:
        """The ``conversation_data`` mode: ``off``, ``principal`` or ``anonymous``."""
        return self._data

    def find(self, headers: Mapping[bytes, bytes], meta: object) -> Conversation | None:
        """The conversation the first matching host key names, else the one in baggage, or ``None``."""
        named = meta if isinstance(meta, dict) else {}
        for key in self._keys:
            if key.place == "header":
                raw = headers.get(key.key.encode("latin-1"))
                found = None if raw is None else conversation_id(raw.decode("latin-1"))
            else:
                found = conversation_id(member_of(named, key.key, key.member))
            if found is not None:
                user = USER_KEYS.get(key.name)
                return Conversation(
                    found,
                    key.name,
                    user=None if user is None else conversation_id(member_of(named, *user)),
                    turn=turn_of(named),
                )
        return self._in_baggage(headers, named)

    @staticmethod
    def _in_baggage(headers: Mapping[bytes, bytes], meta: dict[str, object]) -> Conversation | None:
        """The conversation baggage names: the header's (as on HTTP trace context wins), else ``_meta``'s.

        Only ``gen_ai.conversation.id`` is read: a ``session.id`` member is what this
        middleware tells the application, never what a client tells the middleware.
        """
        raw = headers.get(b"baggage")
        for text in (None if raw is None else raw.decode("latin-1"), meta.get("baggage")):
            if type(text) is str and (found := conversation_id(baggage_member(text))) is not None:
                return Conversation(found, "baggage", turn=turn_of(meta))
        return None

    async def session_for(self, scope: Scope, call: CallView, request: RequestView) -> Session | None:
        """Record the call's host conversation; with data on, its session."""
        if self._data == "off" and not request.traced:
            return None  # without data and without telemetry, a conversation id changes nothing
        conversation = self.find(request.headers, _meta_of(call))
        if conversation is None:
            return None
        call.conversation = conversation
        if self._data == "off":
            return None
        principal = None
        if self._data == "principal":
            principal = await self._sessions.principal_of(scope)
            if principal is None:
                conversation.no_data = (
                    "conversation data is kept per authenticated user, and this request is not authenticated"
                )
                return None
        session_id = self._digests.conversation(conversation.source, conversation.id, principal)
        find = partial(self._with_data, scope, conversation.source, session_id, principal)
        found = await request.once((self.name, session_id), find)
        if found is None:
            conversation.no_data = TOO_MANY_SESSIONS_MESSAGE
            return None
        adopted, conversation.no_data = found
        return adopted

    async def _with_data(
        self, scope: Scope, source: str, session_id: str, principal: str | None
    ) -> tuple[Session | None, str | None]:
        """The conversation's session, or ``None`` and why it gets no data (over the create limit or its maximum)."""
        now = time.time()
        ends = self._known.get(session_id)
        sessions, quota = self._sessions, self._quota
        if (ends is None or ends <= now) and (sessions.limits_creation or quota is not None):
            # A new conversation (a started one is counted until its record ends).
            if principal is None and self._data == "anonymous":
                principal = await sessions.principal_of(scope)  # an authenticated caller is counted as itself
            caller = caller_of(scope, principal)
            if quota is not None and (wait := quota.wait(caller, now)) > 0:
                return None, (
                    f"this caller already has {quota.count} conversations with data, its maximum; "
                    f"retry in {math.ceil(wait)} s"
                )
            if sessions.limits_creation and (wait := sessions.wait_to_create(scope, principal)) > 0:
                return None, (
                    "this caller started new conversations faster than the create limit allows; "
                    f"retry in {math.ceil(wait)} s"
                )
            # The store keeps the conversation's records until ttl (and the leeway) after its first request.
            ends = now + sessions.kept_for
            if quota is not None:
                quota.add(caller, ends)
            self._known[session_id] = ends
        return await sessions.adopt(scope, session_id, source), None


def data_off_explainer(source: HostConversationSource) -> Callable[[CallView, RequestView], str | None] | None:
    """For a chain whose host source keeps no data: what a refused call that names a host's id is told.

    Real clients show an error's message and drop its ``data``, so the "session required" message
    itself says that the host's id gives tracing only, and how to turn conversation data on. Asked
    only when a call is refused.
    """
    if source.data != "off":
        return None  # with data on, a host's id gets a session, or its no_data says why not

    def explain(call: CallView, request: RequestView) -> str | None:
        conversation = call.conversation or source.find(request.headers, _meta_of(call))  # found already if traced
        return None if conversation is None else _DATA_OFF.format(source=conversation.source)

    return explain

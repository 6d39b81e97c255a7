"""Host conversation ids: the ids real MCP hosts already send with every request.

ChatGPT puts ``_meta["openai/session"]`` on each call, VS Code
``_meta["vscode.conversationId"]``, Goose the ``agent-session-id`` header (and
the same ``_meta`` key), opencode ``_meta["sessionID"]``, Codex its thread in
``_meta["x-codex-turn-metadata"]`` (and ``_meta["threadId"]``). Failing all of
those (and the configured keys), the ``gen_ai.conversation.id`` member of W3C
baggage (the ``baggage`` header, else ``_meta["baggage"]``) names it. The
client asserts these ids and nothing verifies them, so by default they name
the conversation in telemetry only; ``conversation_data`` opts into
per-conversation data.
"""

from __future__ import annotations

import math
import re
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final, Literal, NamedTuple, cast

from starlette.types import Scope

from .._plan import Conversation
from .._session import Quota, SessionService, caller_of
from .._tokens import IdDigests
from .._wire import Refusal
from ._baggage import baggage_member
from ._base import DEFAULT_MAX_CONVERSATIONS_PER_CALLER, MAX_SESSIONS_PER_REQUEST, Trust

if TYPE_CHECKING:
    from .._plan import Call, Plan
    from .._session import Session
    from ._base import SourceContext

__all__ = [
    "BAGGAGE_SOURCE",
    "BUILT_IN_HOSTS",
    "DEFAULT_MAX_CONVERSATIONS_PER_CALLER",
    "MAX_CONVERSATION_ID_LENGTH",
    "ConversationData",
    "HostConversationSource",
    "HostKey",
    "host_keys_from_config",
]

ConversationData = Literal["off", "principal", "anonymous"]
CONVERSATION_DATA_MODES: Final = ("off", "principal", "anonymous")

MAX_CONVERSATION_ID_LENGTH: Final = 256
_MAX_KNOWN: Final = 100_000  # conversations remembered as started (so counted once); the oldest forgotten first
# Printable ASCII without space, quotes, backslash, comma and semicolon: safe in an attribute,
# a log line and a baggage value; anything else is not a conversation id and is ignored.
_CONVERSATION_ID: Final = re.compile(rf"[!#-+\--:<-\[\]-~]{{1,{MAX_CONVERSATION_ID_LENGTH}}}")
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class HostKey(NamedTuple):
    """Where one host puts its conversation id: a ``_meta`` key or an HTTP header, and the source's name.

    With ``member``, the id is that member of the object at ``_meta[key]`` (Codex's turn metadata).
    """

    name: str
    place: Literal["meta", "header"]
    key: str
    member: str | None = None


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

BAGGAGE_SOURCE: Final = "baggage"
"""The source name of a conversation found in W3C baggage, tried after every host key."""
_BAGGAGE_HEADER: Final = b"baggage"

# A user id some hosts send beside the conversation (ChatGPT's anonymized user): telemetry's user.id.
_SUBJECT_KEYS: Final = {"openai": "openai/subject"}
# The turn some hosts name beside the conversation (an object in _meta, and its member): a span attribute.
_TURN_KEYS: Final = {"codex": ("x-codex-turn-metadata", "turn_id")}


def host_keys_from_config(config: str | Iterable[str], *, source: str = "conversation_keys") -> tuple[HostKey, ...]:
    """User-defined host keys from ``meta:KEY`` and ``header:NAME`` entries (a list, or one comma-separated text)."""
    entries = config.split(",") if isinstance(config, str) else list(config)
    keys: list[HostKey] = []
    for entry in entries:
        if not isinstance(entry, str):
            raise TypeError(f"{source}: each entry is a 'meta:KEY' or 'header:NAME' string, got {entry!r}")
        text = entry.strip()
        if not text:
            continue
        place, _, key = text.partition(":")
        place = place.strip().lower()
        key = key.strip()
        if place == "meta" and key:
            keys.append(HostKey(f"meta:{key}", "meta", key))
        elif place == "header" and _HEADER_NAME.fullmatch(key):
            keys.append(HostKey(f"header:{key.lower()}", "header", key.lower()))
        else:
            raise ValueError(
                f"{source}: {text!r} is not 'meta:KEY' or 'header:NAME' (e.g. meta:acme/chat,header:x-chat)"
            )
    return tuple(keys)


def _member(meta: dict[str, object], key: str, member: str | None) -> object:
    """``meta[key]``, or with ``member`` that member of the object there (``None`` if absent)."""
    value = meta.get(key)
    if member is None or value is None:
        return value
    return value.get(member) if isinstance(value, dict) else None


def _in_baggage(headers: Mapping[bytes, bytes], meta: dict[str, object] | None) -> Conversation | None:
    """The conversation baggage names: the header's (as on HTTP trace context wins), else ``_meta``'s.

    Only ``gen_ai.conversation.id`` is read: a ``session.id`` member is what this
    middleware tells the application, never what a client tells the middleware.
    """
    raw = headers.get(_BAGGAGE_HEADER)
    for text in (None if raw is None else raw.decode("latin-1"), None if meta is None else meta.get("baggage")):
        if type(text) is str and (found := conversation_id(baggage_member(text))) is not None:
            return Conversation(found, BAGGAGE_SOURCE)
    return None


def conversation_id(value: object) -> str | None:
    """``value`` if it can be a conversation id (a bounded string of safe characters), else ``None``."""
    if type(value) is str and _CONVERSATION_ID.fullmatch(value):
        return value
    return None


class HostConversationSource:
    """The conversation a host names, first matching host key first.

    Built once: the keys are split into ``_meta`` keys and header names, so a
    request that carries none costs one lookup in the headers per header name
    and one set intersection test with ``_meta``'s keys. An id that is not
    a bounded string of safe characters is ignored, never an error: the host
    merely asserted it.

    With data on, a conversation this process has not seen in its lifetime
    (``ttl``) is new: it is counted against its caller's budget, the create
    limit (a new conversation is a session created) and at most
    ``max_per_caller`` conversations with data at once. Over either, it gets
    no data, and ``no_data`` says why; conversations already started keep
    theirs.
    """

    name = "host"
    trust = Trust.ASSERTED

    __slots__ = ("_data", "_digests", "_headers", "_known", "_meta", "_meta_keys", "_quota", "_sessions")

    def __init__(
        self,
        keys: Iterable[HostKey],
        *,
        sessions: SessionService,
        digests: IdDigests,
        data: ConversationData = "off",
        max_per_caller: int | None = DEFAULT_MAX_CONVERSATIONS_PER_CALLER,
    ) -> None:
        if data not in CONVERSATION_DATA_MODES:
            raise ValueError(f"conversation_data must be one of {', '.join(CONVERSATION_DATA_MODES)}, got {data!r}")
        ordered = tuple(dict.fromkeys(keys))
        self._meta = tuple(
            (rank, key.key, key.member, key.name) for rank, key in enumerate(ordered) if key.place == "meta"
        )
        # "baggage" too: a request with none of them costs one disjointness test.
        self._meta_keys = frozenset((*(key for _, key, _, _ in self._meta), "baggage"))
        self._headers = tuple(
            (rank, key.key.encode("latin-1"), key.name) for rank, key in enumerate(ordered) if key.place == "header"
        )
        self._sessions = sessions
        self._digests = digests
        self._data = data
        self._quota = None if max_per_caller is None else Quota(max_per_caller)
        self._known: OrderedDict[str, float] = OrderedDict()  # started conversations: when each one's record ends

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
        best: tuple[int, str, str] | None = None
        for rank, header, name in self._headers:
            raw = headers.get(header)
            if raw is not None and (found := conversation_id(raw.decode("latin-1"))) is not None:
                best = (rank, found, name)
                break
        named = meta if isinstance(meta, dict) and not self._meta_keys.isdisjoint(meta) else None
        if named is not None:
            for rank, key, member, name in self._meta:
                if best is not None and rank > best[0]:
                    break
                if (found := conversation_id(_member(named, key, member))) is not None:
                    best = (rank, found, name)
                    break
        if best is None:
            return _in_baggage(headers, named)
        _, found, name = best
        if named is None:
            return Conversation(found, name)
        subject_key, turn_key = _SUBJECT_KEYS.get(name), _TURN_KEYS.get(name)
        user = None if subject_key is None else conversation_id(named.get(subject_key))
        turn = None if turn_key is None else conversation_id(_member(named, *turn_key))
        return Conversation(found, name, user=user, turn=turn)

    async def session_for(self, scope: Scope, call: Call, plan: Plan) -> Session | None:
        """Record the call's host conversation; with data on, its session."""
        if self._data == "off" and not plan.traced:
            return None  # without data and without telemetry, a conversation id changes nothing
        params = call.message.get("params")  # a call with a method is a dict
        meta = params.get("_meta") if type(params) is dict else None
        conversation = self.find(plan.headers, meta)
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
        if plan.batch:
            return await self._in_batch(scope, conversation, session_id, principal, plan)
        if (refused := await self._over_budget(scope, session_id, principal)) is not None:
            conversation.no_data = refused
            return None
        return await self._sessions.adopt(scope, session_id, conversation.source)

    async def _in_batch(
        self, scope: Scope, conversation: Conversation, session_id: str, principal: str | None, plan: Plan
    ) -> Session | None:
        """A batch element's conversation: each distinct one counted and touched once, at most
        ``MAX_SESSIONS_PER_REQUEST`` (one more gets no data)."""
        named = plan.named = plan.named or {}
        key = (self.name, session_id)
        found = named.get(key)
        if found is None:
            if len(named) >= MAX_SESSIONS_PER_REQUEST:
                conversation.no_data = f"a request may name at most {MAX_SESSIONS_PER_REQUEST} sessions"
                return None
            try:
                refused = await self._over_budget(scope, session_id, principal)
                adopted = None if refused else await self._sessions.adopt(scope, session_id, conversation.source)
                found = named[key] = (adopted, refused)
            except Refusal as refusal:
                named[key] = refusal
                raise
        if isinstance(found, Refusal):
            raise found
        adopted, conversation.no_data = cast("tuple[Session | None, str | None]", found)
        return adopted

    async def _over_budget(self, scope: Scope, session_id: str, principal: str | None) -> str | None:
        """Why a new conversation gets no data (its caller is over the create limit or its maximum), or ``None``."""
        now = time.time()
        ends = self._known.get(session_id)
        if ends is not None and ends > now:
            return None  # started already: its record is counted until it ends
        sessions, quota = self._sessions, self._quota
        if sessions.limit is None and quota is None:
            return None
        if principal is None and self._data == "anonymous":
            principal = await sessions.principal_of(scope)  # an authenticated caller is counted as itself
        caller = caller_of(scope, principal)
        if quota is not None and (wait := quota.wait(caller, now)) > 0:
            return (
                f"this caller already has {quota.count} conversations with data, its maximum; "
                f"retry in {math.ceil(wait)} s"
            )
        if sessions.limit is not None and (wait := sessions.limit.take(caller)) > 0:
            return (
                "this caller started new conversations faster than the create limit allows; "
                f"retry in {math.ceil(wait)} s"
            )
        # The store keeps the conversation's records until ttl (and the leeway) after its first request.
        ends = now + sessions.ttl + sessions.keys.leeway
        if quota is not None:
            quota.add(caller, ends)
        self._known[session_id] = ends
        self._known.move_to_end(session_id)
        if len(self._known) > _MAX_KNOWN:
            self._known.popitem(last=False)
        return None

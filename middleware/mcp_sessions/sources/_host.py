"""Host conversation ids: the ids real MCP hosts already send with every request.

Each host puts its id in a ``_meta`` key or a header (:data:`BUILT_IN_HOSTS`, then the configured keys);
failing all of those, the ``gen_ai.conversation.id`` member of W3C baggage (the ``baggage`` header, else
``_meta["baggage"]``) names it. The client asserts these ids and nothing verifies them, so by default they
name the conversation in telemetry only; ``conversation_data`` opts into per-conversation data.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Final, Literal

from starlette.types import Scope

from .._plan import Conversation
from .._session import Quota, SessionService, caller_of
from .._tokens import IdDigests
from ._baggage import baggage_member
from ._base import DEFAULT_MAX_CONVERSATIONS_PER_CALLER, TOO_MANY_SESSIONS, once_per_request
from ._host_keys import TURN_KEYS, USER_KEYS, HostKey, conversation_id, member_of

if TYPE_CHECKING:
    from .._plan import Call, Plan
    from .._session import Session
    from ._base import SourceContext

ConversationData = Literal["off", "principal", "anonymous"]
"""Whether a host's conversation gets data: ``off`` (tracing only), or keyed by the ``principal``'s conversation
(unauthenticated requests get none), or ``anonymous`` (by the host's id alone)."""
CONVERSATION_DATA_MODES: Final = ("off", "principal", "anonymous")
"""The values ``conversation_data`` takes."""

_MAX_KNOWN: Final = 100_000  # conversations remembered as started (so counted once); the oldest forgotten first
_DATA_OFF: Final = (
    "conversation data is off, so the host's conversation id ({source}) names this conversation in traces only; "
    'to keep data per conversation set conversation_data="anonymous" or "principal" '
    "(MCP_SESSIONS_CONVERSATION_DATA)"
)


def _meta_of(call: Call) -> object:
    params = call.message.get("params")  # a call with a method is a dict
    return params.get("_meta") if type(params) is dict else None


class HostConversationSource:
    """The conversation a host names, first matching host key first; an unusable id is ignored, never an error.

    With data on, a conversation this process has not seen in its lifetime (``ttl``) is new: it is
    counted against its caller's create limit (a new conversation is a session created) and at most
    ``max_per_caller`` conversations with data at once. Over either, it gets no data, and
    ``no_data`` says why; conversations already started keep theirs.
    """

    name = "host"
    """The source's name, in telemetry (a conversation's own source is the host's name)."""

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
        ranked = list(enumerate(dict.fromkeys(keys)))
        self._meta = tuple((rank, key.key, key.member, key.name) for rank, key in ranked if key.place == "meta")
        # "baggage" too: a request with none of them costs one disjointness test.
        self._meta_keys = frozenset((*(key for _, key, _, _ in self._meta), "baggage"))
        self._headers = tuple(
            (rank, key.key.encode("latin-1"), key.name) for rank, key in ranked if key.place == "header"
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
                if (found := conversation_id(member_of(named, key, member))) is not None:
                    best = (rank, found, name)
                    break
        if best is None:
            return self._in_baggage(headers, named)
        _, found, name = best
        if named is None:
            return Conversation(found, name)
        user, turn = USER_KEYS.get(name), TURN_KEYS.get(name)
        return Conversation(
            found,
            name,
            user=None if user is None else conversation_id(member_of(named, *user)),
            turn=None if turn is None else conversation_id(member_of(named, *turn)),
        )

    @staticmethod
    def _in_baggage(headers: Mapping[bytes, bytes], meta: dict[str, object] | None) -> Conversation | None:
        """The conversation baggage names: the header's (as on HTTP trace context wins), else ``_meta``'s.

        Only ``gen_ai.conversation.id`` is read: a ``session.id`` member is what this
        middleware tells the application, never what a client tells the middleware.
        """
        raw = headers.get(b"baggage")
        for text in (None if raw is None else raw.decode("latin-1"), None if meta is None else meta.get("baggage")):
            if type(text) is str and (found := conversation_id(baggage_member(text))) is not None:
                return Conversation(found, "baggage")
        return None

    async def session_for(self, scope: Scope, call: Call, plan: Plan) -> Session | None:
        """Record the call's host conversation; with data on, its session."""
        if self._data == "off" and not plan.traced:
            return None  # without data and without telemetry, a conversation id changes nothing
        conversation = self.find(plan.headers, _meta_of(call))
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
            find = partial(self._with_data, scope, conversation.source, session_id, principal)
            found = await once_per_request(plan, (self.name, session_id), find)
            if found is None:
                conversation.no_data = TOO_MANY_SESSIONS
                return None
        else:
            found = await self._with_data(scope, conversation.source, session_id, principal)
        adopted, conversation.no_data = found
        return adopted

    async def _with_data(
        self, scope: Scope, source: str, session_id: str, principal: str | None
    ) -> tuple[Session | None, str | None]:
        """The conversation's session, or ``None`` and why it gets no data (over the create limit or its maximum)."""
        now = time.time()
        ends = self._known.get(session_id)
        sessions, quota = self._sessions, self._quota
        if (ends is None or ends <= now) and (sessions.limit is not None or quota is not None):
            # A new conversation (a started one is counted until its record ends).
            if principal is None and self._data == "anonymous":
                principal = await sessions.principal_of(scope)  # an authenticated caller is counted as itself
            caller = caller_of(scope, principal)
            if quota is not None and (wait := quota.wait(caller, now)) > 0:
                return None, (
                    f"this caller already has {quota.count} conversations with data, its maximum; "
                    f"retry in {math.ceil(wait)} s"
                )
            if sessions.limit is not None and (wait := sessions.limit.take_for(scope, principal)) > 0:
                return None, (
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
        return await sessions.adopt(scope, session_id, source), None


def data_off_explainer(source: HostConversationSource) -> Callable[[Call, Plan], str | None] | None:
    """For a chain whose host source keeps no data: what a refused call that names a host's id is told.

    Real clients show an error's message and drop its ``data``, so the "session required" message
    itself says that the host's id gives tracing only, and how to turn conversation data on. Asked
    only when a call is refused.
    """
    if source.data != "off":
        return None  # with data on, a host's id gets a session, or its no_data says why not

    def explain(call: Call, plan: Plan) -> str | None:
        conversation = call.conversation or source.find(plan.headers, _meta_of(call))  # found already if traced
        return None if conversation is None else _DATA_OFF.format(source=conversation.source)

    return explain

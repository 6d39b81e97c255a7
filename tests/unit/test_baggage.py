"""W3C baggage read for ``gen_ai.conversation.id``, and Codex's thread ids: pure, no server."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_sessions.sources import HostKey, host_keys_from_config, turn_of
from mcp_sessions.sources._host import MAX_BAGGAGE_BYTES, MAX_BAGGAGE_MEMBERS, MAX_MEMBER_BYTES, baggage_member
from unit._conversations import hosts

MEMBER = "gen_ai.conversation.id"


@pytest.mark.parametrize(
    ("baggage", "key", "value"),
    [
        # The Recommendation's own examples (https://www.w3.org/TR/baggage/#examples-of-http-headers).
        ("key1=value1,key2=value2", "key2", "value2"),
        ("key1 = value1, key2 = value2", "key1", "value1"),
        ("key1=value1;property1;property2, key2 = value2, key3=value3; propertyKey=propertyValue", "key3", "value3"),
        ("key1=value1;property1;property2, key2 = value2, key3=value3; propertyKey=propertyValue", "key1", "value1"),
        ("userId=alice,serverNode=DF%2028,isProduction=false", "serverNode", "DF 28"),
        ("userId=Am%C3%A9lie,serverNode=DF%2028", "userId", "Am\u00e9lie"),
        # The conversation member among others, with tabs, properties and encodings.
        (f"{MEMBER}=conv-1", MEMBER, "conv-1"),
        (f"\tuser.id=u-1 ,\t{MEMBER} =\tconv%2F2 ;ttl=60;sampled", MEMBER, "conv/2"),
        (f"{MEMBER}=first,{MEMBER}=second", MEMBER, "first"),
        (f"{MEMBER}=a%zz", MEMBER, "a%zz"),  # not an escape: kept as sent
        (f"{MEMBER}=%FF", MEMBER, "\ufffd"),  # not UTF-8: the replacement character, as the Recommendation says
        (f"{MEMBER}=", MEMBER, ""),
        # Absent: another key, a property of that name, a longer key.
        ("session.id=s-1", MEMBER, None),
        (f"k=v;{MEMBER}=conv-1", MEMBER, None),
        (f"{MEMBER}.x=conv-1", MEMBER, None),
    ],
)
def test_the_first_member_of_a_key_is_read_decoded(baggage: str, key: str, value: str | None) -> None:
    assert baggage_member(baggage, key) == value


@pytest.mark.parametrize(
    "baggage",
    [
        f"{MEMBER}=conv-1,",  # an empty member
        f",{MEMBER}=conv-1",
        f"{MEMBER}=conv-1,,k=v",
        f"{MEMBER}=conv 1",  # whitespace inside a value
        f'{MEMBER}="conv-1"',  # quotes are not baggage-octets
        f"{MEMBER}=conv-1,k",  # a member without a value
        f"{MEMBER}=conv-1,k=v;",  # an empty property
        f"{MEMBER}=conv-1,(k)=v",  # not a token
        f"{MEMBER}=conv-1,k=caf\u00e9",  # not ASCII
        f"{MEMBER}=conv\\1",
        f"{MEMBER}=conv-1," + "k=" + "v" * MAX_BAGGAGE_BYTES,  # oversized
        f"{MEMBER}=conv-1" + ",k=v" * MAX_BAGGAGE_MEMBERS,  # 181 members
        f"{MEMBER}=conv-1,k=" + "v" * (MAX_MEMBER_BYTES - 1),  # a member of MAX_MEMBER_BYTES + 1
    ],
)
def test_malformed_or_oversized_baggage_is_ignored_whole(baggage: str) -> None:
    assert baggage_member(baggage) is None


def test_the_limits_themselves_are_kept() -> None:
    members = f"{MEMBER}=conv-1" + ",k=v" * (MAX_BAGGAGE_MEMBERS - 1)
    assert baggage_member(members) == "conv-1"
    longest = ",k=" + "v" * (MAX_MEMBER_BYTES - 2)  # a comma, and a member of MAX_MEMBER_BYTES
    padded = f"{MEMBER}=conv-1{longest},k=" + "v" * (MAX_BAGGAGE_BYTES - len(MEMBER) - 10 - len(longest))
    assert len(padded) == MAX_BAGGAGE_BYTES
    assert baggage_member(padded) == "conv-1"


@given(st.text(), st.sampled_from(["", f"{MEMBER}=", f"k=v,{MEMBER}=c;p,"]))
def test_the_parser_never_raises(text: str, prefix: str) -> None:
    result = baggage_member(prefix + text)
    assert result is None or isinstance(result, str)


@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=300))
def test_the_parser_never_raises_on_ascii(text: str) -> None:
    result = baggage_member(f"{MEMBER}={text}")
    assert result is None or isinstance(result, str)


# -- the source: Codex's keys, then baggage after every host key -------------------------------------


@pytest.mark.parametrize(
    ("meta", "conversation", "turn"),
    [
        ({"x-codex-turn-metadata": {"session_id": "root", "thread_id": "th-1", "turn_id": "t-9"}}, "th-1", "t-9"),
        ({"x-codex-turn-metadata": {"session_id": "root", "turn_id": "t-9"}, "threadId": "th-1"}, "root", "t-9"),
        ({"x-codex-turn-metadata": {"thread_id": 7, "turn_id": "t-9"}, "threadId": "th-1"}, "th-1", "t-9"),
        ({"x-codex-turn-metadata": "th-2", "threadId": "th-1"}, "th-1", None),  # not an object: no member in it
        ({"threadId": "th-1"}, "th-1", None),
        ({"x-codex-turn-metadata": {"thread_id": "th-1", "turn_id": "bad turn"}}, "th-1", None),
    ],
)
def test_codex_names_its_thread_and_turn(meta: dict[str, Any], conversation: str, turn: str | None) -> None:
    found = hosts().find({}, meta)
    assert found is not None
    assert (found.source, found.id, found.turn) == ("codex", conversation, turn)


@pytest.mark.parametrize(
    ("meta", "conversation", "turn"),
    [
        # Claude Code names only its tool call (over HTTP, behind mcp-sessions connect's baggage)...
        ({"baggage": f"{MEMBER}=cc-1", "claudecode/toolUseId": "toolu_01"}, ("baggage", "cc-1"), "toolu_01"),
        # ...and VS Code its chat request, beside its conversation.
        ({"vscode.conversationId": "vs-1", "vscode.requestId": "req-7"}, ("vscode", "vs-1"), "req-7"),
        ({"claudecode/toolUseId": "toolu_01"}, None, "toolu_01"),  # a turn alone names no conversation
        ({"vscode.requestId": "req-7"}, None, "req-7"),
    ],
)
def test_a_turn_is_recorded_as_a_turn_never_as_a_conversation(
    meta: dict[str, Any], conversation: tuple[str, str] | None, turn: str
) -> None:
    found = hosts().find({}, meta)
    assert (found and (found.source, found.id)) == conversation
    assert turn_of(meta) == turn
    assert found is None or found.turn == turn


@pytest.mark.parametrize("key", ["claudecode/toolUseId", "vscode.requestId"])
def test_a_turn_s_key_is_refused_as_a_conversation_key(key: str) -> None:
    with pytest.raises(ValueError, match="names a turn"):
        host_keys_from_config(f"meta:{key}")


@pytest.mark.parametrize(
    ("headers", "meta", "expected"),
    [
        ({b"baggage": f"k=v, {MEMBER}=conv-h".encode()}, None, ("baggage", "conv-h")),
        ({}, {"baggage": f"{MEMBER}=conv-m"}, ("baggage", "conv-m")),
        ({b"baggage": f"{MEMBER}=conv-h".encode()}, {"baggage": f"{MEMBER}=conv-m"}, ("baggage", "conv-h")),
        ({b"baggage": b"k=v"}, {"baggage": f"{MEMBER}=conv-m"}, ("baggage", "conv-m")),
        ({b"baggage": f"{MEMBER}=bad%20id".encode()}, {"baggage": f"{MEMBER}=conv-m"}, ("baggage", "conv-m")),
        # Every host key, built in or configured, wins over baggage.
        ({b"baggage": f"{MEMBER}=conv-h".encode()}, {"sessionID": "oc-1"}, ("opencode", "oc-1")),
        ({b"baggage": f"{MEMBER}=conv-h".encode(), b"agent-session-id": b"g-1"}, None, ("goose", "g-1")),
        ({}, {"baggage": f"{MEMBER}=conv-m", "threadId": "th-1"}, ("codex", "th-1")),
        ({b"baggage": f"{MEMBER}=conv-h".encode(), b"x-chat": b"x-1"}, None, ("header:x-chat", "x-1")),
    ],
)
def test_baggage_names_a_conversation_after_every_host_key(
    headers: dict[bytes, bytes], meta: dict[str, Any] | None, expected: tuple[str, str]
) -> None:
    found = hosts(HostKey("header:x-chat", "header", "x-chat")).find(headers, meta)
    assert found is not None
    assert (found.source, found.id) == expected


@pytest.mark.parametrize(
    ("headers", "meta"),
    [
        ({b"baggage": b"session.id=cv-stolen"}, None),
        ({}, {"baggage": "session.id=cv-stolen"}),
        ({b"baggage": f"{MEMBER}=conv-1,".encode()}, None),  # malformed: ignored whole
        ({}, {"baggage": [f"{MEMBER}=conv-1"]}),  # not a string
        ({b"baggage": b"x"}, None),
        ({}, {"x-codex-turn-metadata": {"turn_id": "t-1"}}),  # Codex's turn metadata without an id
    ],
)
def test_baggage_without_a_usable_conversation_names_none(
    headers: dict[bytes, bytes], meta: dict[str, Any] | None
) -> None:
    assert hosts().find(headers, meta) is None

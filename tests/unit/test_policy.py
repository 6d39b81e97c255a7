"""The require_session policy, compiled once into a predicate: every documented form."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_sessions._config import compile_policy
from mcp_sessions.profiles import DRAFT

EXEMPT = DRAFT.sessionless
CALL_COUNT = {"name": "count", "arguments": {}}
CALL_WHOAMI = {"name": "whoami", "arguments": {}}


@pytest.mark.parametrize(
    ("policy", "tools", "method", "params", "expected"),
    [
        (False, (), "tools/call", CALL_COUNT, False),
        (True, (), "tools/call", CALL_COUNT, True),
        (True, (), "resources/read", {"uri": "x"}, True),
        (True, (), "initialize", {}, False),
        (True, (), "server/discover", {}, False),
        (True, (), "ping", None, False),
        (True, (), "sessions/create", None, False),
        (True, (), "notifications/progress", {}, False),
        (["tools/call"], (), "tools/call", CALL_COUNT, True),
        (["tools/call"], (), "tools/list", {}, False),
        (frozenset({"prompts/get"}), (), "prompts/get", {"name": "p"}, True),
        (("tools/call", "initialize"), (), "initialize", {}, False),
        (False, ["count"], "tools/call", CALL_COUNT, True),
        (False, ["count"], "tools/call", CALL_WHOAMI, False),
        (False, ["count"], "tools/call", None, False),
        (False, ["count"], "tools/call", ["count"], False),
        (False, ["count"], "prompts/get", {"name": "count"}, False),
        (lambda method, params: method.startswith("resources/"), (), "resources/read", {}, True),
        (lambda method, params: method.startswith("resources/"), (), "tools/call", CALL_COUNT, False),
        (lambda method, params: True, (), "ping", None, False),
        (lambda method, params: params == CALL_WHOAMI, ["count"], "tools/call", CALL_WHOAMI, True),
        (lambda method, params: False, ["count"], "tools/call", CALL_COUNT, True),
    ],
    ids=["off", "all", "all-other-method", "all-initialize-exempt", "all-discover-exempt", "all-ping-exempt",
         "all-create-exempt", "all-notification-exempt", "list", "list-other", "frozenset", "list-exempt-wins",
         "tools", "tools-other-tool", "tools-no-params", "tools-params-list", "tools-only-tools-call",
         "callable-yes", "callable-no", "callable-exempt-wins", "callable-and-tools", "tools-and-callable"],
)  # fmt: skip
def test_policy(policy: Any, tools: Any, method: str, params: Any, expected: bool) -> None:
    assert compile_policy(policy, tools, EXEMPT)(method, params) is expected


def test_the_callable_sees_method_and_params() -> None:
    seen: list[tuple[str, Any]] = []

    def never(method: str, params: Any) -> bool:
        seen.append((method, params))
        return False

    requires = compile_policy(never, (), EXEMPT)
    assert requires("tools/list", {"cursor": "c"}) is False
    assert seen == [("tools/list", {"cursor": "c"})]

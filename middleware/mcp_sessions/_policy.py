"""Which requests require a session: the ``require_session`` options, compiled once into a predicate."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

RequirePolicy = bool | Collection[str] | Callable[[str, Any], bool]
Requires = Callable[[str, Any], bool]


def never(method: str, params: Any) -> bool:
    """The policy that requires no session anywhere (the middleware skips calling it)."""
    return False


def compile_policy(require_session: RequirePolicy, require_tools: Collection[str], exempt: Collection[str]) -> Requires:
    """``requires(method, params)``: whether a request must carry a session.

    ``require_session`` is ``True`` (every request), a collection of method
    names, or a callable ``(method, params) -> bool``; ``require_tools`` names
    tools whose ``tools/call`` requires one. ``exempt`` methods and
    notifications never do, whatever the policy says.
    """
    if isinstance(require_session, str):
        raise TypeError("require_session takes a collection of method names, not one string")
    if isinstance(require_tools, str):
        raise TypeError("require_session_tools takes a collection of tool names, not one string")
    require_all = require_session is True
    methods: frozenset[str] = frozenset()
    predicate: Requires | None = None
    if callable(require_session):
        predicate = require_session
    elif not isinstance(require_session, bool):
        methods = frozenset(require_session)
    tools = frozenset(require_tools)
    exempt = frozenset(exempt)
    if not (require_all or methods or tools or predicate):
        return never

    def requires(method: str, params: Any) -> bool:
        if method in exempt or method.startswith("notifications/"):
            return False
        if require_all or method in methods:
            return True
        if tools and method == "tools/call" and isinstance(params, dict) and params.get("name") in tools:
            return True
        return predicate is not None and bool(predicate(method, params))

    return requires

"""JSON-RPC 2.0 frames, shared by the middleware and the client: parse, dump, build results and errors, and
the refusal, the one way any part of the package says "no" to a call.

Pure: building a refusal sends nothing; the pipeline answers it (``_asgi``'s senders).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter
from typing import Any, Final

from .protocol import INVALID_REQUEST, SESSION_STORE_UNAVAILABLE

logger = logging.getLogger("mcp_sessions")
WARNING_INTERVAL: Final = 10.0

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


class _Repeated(dict[str, object]):
    """A JSON object that repeated member names (``repeated``); the last value of each is kept."""

    def __init__(self, pairs: list[tuple[str, Any]], repeated: set[str]) -> None:
        super().__init__(pairs)
        self.repeated = repeated


def _object(pairs: list[tuple[str, Any]]) -> dict[str, object]:
    members = dict(pairs)
    if len(members) == len(pairs):
        return members
    counts = Counter(name for name, _ in pairs)
    return _Repeated(pairs, {name for name, count in counts.items() if count > 1})


_decoder = json.JSONDecoder(object_pairs_hook=_object)
_answer_decoder = json.JSONDecoder()


def loads(body: bytes | str, *, answer: bool = False) -> Any:
    """The parsed body, or ``None`` when it is not JSON (the app answers those).

    In a request, an object that repeats a member name is parsed as a dict that records the names it
    repeated (``repeated``), so that reading a session from a path through it can refuse it: this parser
    and the server's could otherwise read two sessions from one body. An ``answer`` (what the server
    sent back) names no session to check, so the parser builds its objects without that record. Decoded
    as ``json.loads(bytes)`` decodes (a BOM, UTF-16 and UTF-32, lone surrogates), so that no body the
    server would read as JSON-RPC passes here as "not JSON". Text (an event's data) is parsed as it is.
    """
    try:
        text = body if isinstance(body, str) else body.decode(json.detect_encoding(body), "surrogatepass")
        return (_answer_decoder if answer else _decoder).decode(text)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None


def dumps(message: object) -> bytes:
    """``message`` as compact UTF-8 JSON; a lone surrogate (legal in JSON text as an escape) goes out as its escape."""
    return _encoder.encode(message).encode("utf-8", "backslashreplace")


def error(request_id: object, code: int, message: str, data: object = None) -> dict[str, object]:
    err: dict[str, object] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": err}


def result(request_id: object, value: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def request(request_id: object, method: str, params: dict[str, object] | None = None) -> dict[str, object]:
    """A request frame; ``params`` only when given."""
    message: dict[str, object] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def is_request_or_notification(element: object) -> bool:
    """Whether a parsed element is a JSON-RPC request or notification (``"jsonrpc": "2.0"``, a string method)."""
    return isinstance(element, dict) and element.get("jsonrpc") == "2.0" and isinstance(element.get("method"), str)


def requests_and_notifications(parsed: Any) -> list[dict[str, object]] | None:
    """The requests and notifications of a parsed body (one, or a batch), or ``None`` when it has none."""
    if isinstance(parsed, dict):
        return [parsed] if is_request_or_notification(parsed) else None
    if isinstance(parsed, list):
        return [element for element in parsed if is_request_or_notification(element)] or None
    return None


def is_response(element: object) -> bool:
    """Whether a parsed element is a response (an ``id`` and no ``method``)."""
    return isinstance(element, dict) and "id" in element and "method" not in element


def meta(value: object) -> dict[str, object] | None:
    """``value._meta`` (of a message's ``params`` or ``result``) when both are objects, read leniently (no shape
    is refused); else ``None``."""
    found = value.get("_meta") if isinstance(value, dict) else None
    return found if isinstance(found, dict) else None


def error_code(message: object) -> int | None:
    """The code of an error response, or ``None`` when ``message`` is not one."""
    err = message.get("error") if isinstance(message, dict) else None
    code = err.get("code") if isinstance(err, dict) else None
    return code if type(code) is int else None


def invalid_request(request_id: object, message: str) -> dict[str, object]:
    return error(request_id, INVALID_REQUEST, message)


def request_id_of(element: object) -> Any:
    """The id of a batch element, or None when it has none we can echo."""
    if isinstance(element, dict):
        rid = element.get("id")
        if rid is None or type(rid) in (str, int, float):
            return rid
    return None


def echoable_id(request_id: object) -> str | int | None:
    """``request_id`` if an answer can repeat it (a string or an integer, as the ``mcp`` SDK reads ids), else None."""
    return request_id if isinstance(request_id, str | int) and not isinstance(request_id, bool) else None


def hashable_id(request_id: object) -> Any:
    """A request id as a dict key (JSON-RPC ids are strings or numbers; anything else by its repr)."""
    return request_id if type(request_id) in (str, int, float) or request_id is None else repr(request_id)


class ThrottledWarning:
    """One condition's warning, logged at most once every ``interval`` seconds, with a count of the ones not logged.

    Logging writes synchronously: a warning for each request refused during an outage would add a
    write to every one of them, and bury the first line under hundreds that say the same. Each line
    says how many occurrences were not logged since the one before.
    """

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.interval = WARNING_INTERVAL
        self._last = -math.inf
        self._not_logged = 0

    def warn(self, message: str, *args: object) -> None:
        """Log ``message % args`` as a warning, or only count it when one was logged less than ``interval`` ago."""
        now = time.monotonic()
        if now - self._last < self.interval:
            self._not_logged += 1
            return
        not_logged, self._not_logged, self._last = self._not_logged, 0, now
        self.logger.warning(
            message + " (%d more not logged since the last such message; the next in %.0f s at the earliest)",
            *args,
            not_logged,
            self.interval,
        )


unavailable_warning = ThrottledWarning(logger)  # one outage refuses every request: said once an interval


class Refusal(Exception):
    """A JSON-RPC error the middleware answers itself instead of forwarding.

    ``reason`` is a low-cardinality word for the rejection metric;
    ``session_id`` is the stable id when a token verified but its session was
    refused (deleted, idle, bad state, another principal), so that telemetry
    files the refusal under it.
    """

    def __init__(
        self,
        code: int,
        message: str,
        data: object = None,
        *,
        reason: str = "invalid_request",
        session_id: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.reason = reason
        self.session_id = session_id
        self.retry_after = retry_after  # seconds, for a refusal that says when to try again (429)

    def frame(self, request_id: object) -> dict[str, object]:
        """The JSON-RPC error response to ``request_id``."""
        return error(request_id, self.code, self.message, self.data)


def store_unavailable(exc: BaseException) -> Refusal:
    """The retryable refusal for a store that cannot answer now (never "not found")."""
    unavailable_warning.warn("session store unavailable: %s", exc)
    return Refusal(SESSION_STORE_UNAVAILABLE, "Session store unavailable, retry later", reason="store_unavailable")


def batch_refused(reason: str = "batch refused: another element's session is invalid") -> Refusal:
    return Refusal(INVALID_REQUEST, reason)

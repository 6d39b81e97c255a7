"""JSON-RPC 2.0 frames: parse, classify, read session metadata, build errors."""

from __future__ import annotations

import json
from typing import Any, Final

from ._protocol import INVALID_REQUEST, SESSION_META_KEY

_MAX_ECHOED_ID: Final = 256
# Built once: json.dumps with arguments builds a new encoder on every call.
_decode = json.JSONDecoder().decode
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


# The member names on the path to the session metadata: a body that repeats one
# of them could mean one session to this parser and another to the server's.
_SESSION_KEY_MARKER: Final = b'"' + SESSION_META_KEY.encode() + b'"'


class InvalidSessionMeta(Exception):
    """Session metadata present but of the wrong shape (answered with -32600)."""


class _Repeated(dict[str, Any]):
    """A JSON object that repeated member names (``repeated``); the last value of each is kept."""

    __slots__ = ("repeated",)

    def __init__(self, pairs: list[tuple[str, Any]], repeated: set[str]) -> None:
        super().__init__(pairs)
        self.repeated = repeated


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    names = {name for name, _ in pairs}
    if len(names) == len(pairs):
        return dict(pairs)
    seen: set[str] = set()
    repeated = {name for name, _ in pairs if name in seen or seen.add(name)}  # type: ignore[func-returns-value]
    return _Repeated(pairs, repeated)


_decode_checked = json.JSONDecoder(object_pairs_hook=_object).decode


def loads(body: bytes, *, request: bool = True) -> Any:
    """The parsed body, or ``None`` when it is not JSON (the app answers those).

    A request that could repeat a member name on the path to the session
    metadata (an escape anywhere, or a marker seen twice) is parsed with a
    hook that records repeated names, so that :func:`session_meta` refuses it.
    Responses (``request=False``) come from the application and are parsed plainly.
    """
    try:
        # Decoded as json.loads(bytes) decodes (a BOM, UTF-16 and UTF-32, lone surrogates), so
        # that no body the server would read as JSON-RPC passes here as "not JSON".
        encoding = json.detect_encoding(body)
        text = body.decode(encoding, "surrogatepass")
        if not request:
            return _decode(text)
        if encoding != "utf-8":
            body = text.encode("utf-8", "surrogatepass")  # the repeated-name scan reads this text
        if b"\\" in body:
            return _decode_checked(text)
        if _SESSION_KEY_MARKER in body:
            count = body.count
            if (
                count(_SESSION_KEY_MARKER) > 1
                or count(b'"_meta"') > 1
                or count(b'"params"') > 1
                or count(b'"sessionId"') > 1
                or count(b'"state"') > 1
            ):
                return _decode_checked(text)
        return _decode(text)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None


def _check_unique(obj: dict[str, Any], *names: str) -> None:
    if type(obj) is _Repeated and not obj.repeated.isdisjoint(names):
        raise InvalidSessionMeta("session metadata must not repeat a member name")


def dumps(message: Any) -> bytes:
    # A lone surrogate (legal in JSON text as an escape) goes back out as its escape.
    return _encode(message).encode("utf-8", "backslashreplace")


def session_meta(message: dict[str, Any]) -> dict[str, Any] | None:
    """The session metadata a message carries in ``params._meta``, if any.

    ``null`` counts as absent. Anything else that is not an object with a
    string ``sessionId`` (and, if present, a string ``state``) is invalid.
    """
    _check_unique(message, "params")
    params = message.get("params")
    if not isinstance(params, dict):
        return None
    _check_unique(params, "_meta")
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        return None
    _check_unique(meta, SESSION_META_KEY)
    session = meta.get(SESSION_META_KEY)
    if session is None:
        return None
    if not isinstance(session, dict):
        raise InvalidSessionMeta("session metadata must be an object")
    _check_unique(session, "sessionId", "state")
    if type(session.get("sessionId")) is not str:
        raise InvalidSessionMeta("session metadata needs a string sessionId")
    state = session.get("state")
    if state is not None and type(state) is not str:
        raise InvalidSessionMeta("session state must be a string")
    return session


def error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": err}


def result(request_id: Any, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def request(request_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A request frame; ``params`` only when given."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def is_request_or_notification(element: Any) -> bool:
    """Whether a parsed element is a JSON-RPC request or notification (``"jsonrpc": "2.0"``, a string method)."""
    return isinstance(element, dict) and element.get("jsonrpc") == "2.0" and isinstance(element.get("method"), str)


def requests_and_notifications(parsed: Any) -> list[dict[str, Any]] | None:
    """The requests and notifications of a parsed body (one, or a batch), or ``None`` when it has none."""
    if isinstance(parsed, dict):
        return [parsed] if is_request_or_notification(parsed) else None
    if isinstance(parsed, list):
        return [element for element in parsed if is_request_or_notification(element)] or None
    return None


def is_response(element: Any) -> bool:
    """Whether a parsed element is a response (an ``id`` and no ``method``)."""
    return isinstance(element, dict) and "id" in element and "method" not in element


def params_meta(message: dict[str, Any]) -> dict[str, Any] | None:
    """A message's ``params._meta`` when it is an object, read leniently (no shape is refused)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta if isinstance(meta, dict) else None


def echoed_session(message: dict[str, Any]) -> dict[str, Any] | None:
    """The session echo of a successful response (``result._meta[session key]``) when it is an object."""
    value = message.get("result")
    meta = value.get("_meta") if isinstance(value, dict) else None
    echo = meta.get(SESSION_META_KEY) if isinstance(meta, dict) else None
    return echo if isinstance(echo, dict) else None


def error_code(message: Any) -> int | None:
    """The code of an error response, or ``None`` when ``message`` is not one."""
    err = message.get("error") if isinstance(message, dict) else None
    code = err.get("code") if isinstance(err, dict) else None
    return code if type(code) is int else None


def invalid_request(request_id: Any, message: str) -> dict[str, Any]:
    return error(request_id, INVALID_REQUEST, message)


def echoed_session_id(value: Any) -> Any:
    """What an error's ``data.sessionId`` repeats of what the client sent, bounded."""
    return value[:_MAX_ECHOED_ID] if isinstance(value, str) else None


def request_id_of(element: Any) -> Any:
    """The id of a batch element, or None when it has none we can echo."""
    if isinstance(element, dict):
        rid = element.get("id")
        if rid is None or type(rid) in (str, int, float):
            return rid
    return None

"""JSON-RPC 2.0 frames: parse, classify, read session metadata, build errors."""

from __future__ import annotations

import json
from typing import Any, Final

from ._protocol import INVALID_REQUEST, SESSION_META_KEY

_MAX_ECHOED_ID: Final = 256
# Built once: json.dumps with arguments builds a new encoder on every call.
_decode = json.JSONDecoder().decode
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class InvalidSessionMeta(Exception):
    """Session metadata present but of the wrong shape (answered with -32600)."""


def loads(body: bytes) -> Any:
    """The parsed body, or ``None`` when it is not JSON (the app answers those)."""
    try:
        return _decode(body.decode())
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None


def dumps(message: Any) -> bytes:
    return _encode(message).encode()


def session_meta(message: dict[str, Any]) -> dict[str, Any] | None:
    """The session metadata a message carries in ``params._meta``, if any.

    ``null`` counts as absent. Anything else that is not an object with a
    string ``sessionId`` (and, if present, a string ``state``) is invalid.
    """
    params = message.get("params")
    if type(params) is not dict:
        return None
    meta = params.get("_meta")
    if type(meta) is not dict:
        return None
    session = meta.get(SESSION_META_KEY)
    if session is None:
        return None
    if type(session) is not dict:
        raise InvalidSessionMeta("session metadata must be an object")
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


def invalid_request(request_id: Any, message: str) -> dict[str, Any]:
    return error(request_id, INVALID_REQUEST, message)


def echoed_session_id(value: Any) -> Any:
    """What an error's ``data.sessionId`` repeats of what the client sent, bounded."""
    return value[:_MAX_ECHOED_ID] if isinstance(value, str) else None


def request_id_of(element: Any) -> Any:
    """The id of a batch element, or None when it has none we can echo."""
    if type(element) is dict:
        rid = element.get("id")
        if rid is None or type(rid) in (str, int, float):
            return rid
    return None

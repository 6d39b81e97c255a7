"""JSON-RPC 2.0 frames, shared by the middleware and the client: parse, dump, build results and errors."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Final

from .protocol import INVALID_REQUEST

# Built once: json.dumps with arguments builds a new encoder on every call.
_decode = json.JSONDecoder().decode
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class _Repeated(dict[str, object]):
    """A JSON object that repeated member names (``repeated``); the last value of each is kept."""

    __slots__ = ("repeated",)

    def __init__(self, pairs: list[tuple[str, Any]], repeated: set[str]) -> None:
        super().__init__(pairs)
        self.repeated = repeated


def _object(pairs: list[tuple[str, Any]]) -> dict[str, object]:
    members = dict(pairs)
    if len(members) == len(pairs):  # no name repeated: the plain object, built once
        return members
    counts = Counter(name for name, _ in pairs)
    return _Repeated(pairs, {name for name, count in counts.items() if count > 1})


_decode_checked = json.JSONDecoder(object_pairs_hook=_object).decode


def _decode_utf8(body: bytes) -> Any:
    return _decode(body.decode())


fast_loads: Callable[[bytes], Any]
"""Parse UTF-8 JSON bytes to plain objects, as fast as this process can; ``ValueError`` for anything it
will not read (not JSON, and for pydantic-core a lone surrogate escape too: callers then use :func:`loads`).
pydantic-core's ``from_json`` (what the ``mcp`` SDK's 2025-era transport parses a POST with) where it is
installed, else the standard library. What it reads, it reads as :func:`loads` does: the differential tests
say so."""
try:
    from pydantic_core import from_json as fast_loads
except ImportError:  # pragma: no cover - pydantic-core comes with the mcp SDK and FastAPI
    fast_loads = _decode_utf8


# What Watch.scan says of a request body.
UNMARKED: Final = 0
"""No backslash and no wire's session member: the body names no session (in UTF-8)."""
MARKED: Final = 1
"""A wire's session member is spelled, and no name on the paths is repeated: the plain parser reads it."""
REPEATED: Final = 2
"""A backslash (an escape could spell any name), or a name on the paths seen twice: parsed with the hook."""


class Watch:
    """The member names on the paths to the session metadata of the enabled wires.

    A request that could repeat one of them could mean one session to this
    parser and another to the server's: such a body (an escape anywhere, or a
    name seen twice) is parsed with a hook that records repeated names.
    """

    __slots__ = ("_markers", "_names", "_usual", "marker")  # _names: one pattern that finds every name on the paths

    def __init__(self, markers: Iterable[str], names: Iterable[str]) -> None:
        markers = list(dict.fromkeys(markers))
        names = list(dict.fromkeys(names))
        self._markers = tuple(b'"%s"' % m.encode() for m in markers)
        self.marker = self._markers[0] if len(self._markers) == 1 else None
        """With one wire, its session member's name as a body spells it (escapes aside): a body
        without it names no session. ``None`` with several wires."""
        quoted = [b'"%s"' % name.encode() for name in dict.fromkeys([*markers, *names])]
        self._names = re.compile(b"|".join(re.escape(name) for name in quoted))
        usual = [b'"%s"' % name.encode() for name in names]
        self._usual = usual if self.marker is not None else None
        """With one wire, the names on its path in order, each once: a body that spells a prefix of them
        repeats none."""

    def scan(self, body: bytes) -> int:
        """:data:`UNMARKED`, :data:`MARKED` or :data:`REPEATED`, in one pass over ``body``.

        Without a backslash, every quote in a JSON text delimits a string, so the
        quoted names found cannot overlap: the one scan sees every occurrence the
        text has, the markers among them.
        """
        if 92 in body:  # a backslash
            return REPEATED
        found = self._names.findall(body)
        marker = self.marker
        if not (marker in found if marker is not None else any(m in found for m in self._markers)):
            return UNMARKED
        if (usual := self._usual) is not None and found == usual[: len(found)]:
            return MARKED  # the usual body: the path's names in order, each once (no set to build)
        return REPEATED if len(found) != len(set(found)) else MARKED


def loads(body: bytes, *, watch: Watch | None = None, scan: int | None = None) -> Any:
    """The parsed body, or ``None`` when it is not JSON (the app answers those).

    With ``watch`` (requests), a body that could repeat a name on the path to
    the session metadata keeps a record of repeated names, so that reading the
    session refuses it; ``scan`` is ``watch.scan(body)`` when the caller has it
    already. Responses come from the application and are parsed plainly.
    """
    # The usual body, a UTF-8 object with nothing to check, goes to the fast parser, which reads it as
    # the standard one does; anything else, and anything the fast parser refuses, to the standard one.
    if body[:1] == b"{" and (watch is None or (watch.scan(body) if scan is None else scan) != REPEATED):
        try:
            return fast_loads(body)
        except (ValueError, RecursionError):  # the standard library's, where pydantic-core is not installed
            pass
    try:
        # Decoded as json.loads(bytes) decodes (a BOM, UTF-16 and UTF-32, lone surrogates), so
        # that no body the server would read as JSON-RPC passes here as "not JSON".
        encoding = json.detect_encoding(body)
        text = body.decode(encoding, "surrogatepass")
        if watch is None:
            return _decode(text)
        if encoding != "utf-8":
            body = text.encode("utf-8", "surrogatepass")  # the repeated-name scan reads this text
        return _decode_checked(text) if watch.scan(body) == REPEATED else _decode(text)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None


def dumps(message: object) -> bytes:
    # A lone surrogate (legal in JSON text as an escape) goes back out as its escape.
    return _encode(message).encode("utf-8", "backslashreplace")


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


def params_meta(message: dict[str, object]) -> dict[str, object] | None:
    """A message's ``params._meta`` when it is an object, read leniently (no shape is refused)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta if isinstance(meta, dict) else None


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

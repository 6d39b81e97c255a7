"""Content capture: a ``tools/call``'s arguments and result on its span, redacted and bounded.

Opt-in (``capture_content=True``): the GenAI conventions' ``gen_ai.tool.call.arguments`` and
``gen_ai.tool.call.result`` (opt-in attributes), and the same text under OpenInference's
``input.value`` and ``output.value`` with their ``*.mime_type``: what Phoenix shows as a span's
input and output, what MLflow's OTLP ingestion turns into ``mlflow.spanInputs`` and
``mlflow.spanOutputs`` (its ``OpenInferenceTranslator``, then its ``GenAiTranslator``), and what
Langfuse reads as an observation's input and output.

The arguments are their compact JSON. The result is what a person reads of it (:func:`readable_result`):
the text of its content, else its ``structuredContent`` as JSON; never the protocol's envelope
(``isError``, ``resultType``, ``_meta``). Each value is at most :data:`MAX_CONTENT_BYTES` of UTF-8; a
longer one is cut and ends with :data:`TRUNCATED` (JSON is then ``text/plain``).
Before that, in every string of it (object keys too), every run of token characters
(``A-Z a-z 0-9 _ - .``) of 37 or more that holds ``eyJ`` (a compact JWS: session and state
tokens), a handle (``handles/_format.py``: ``<prefix>_<35 base64url characters>``) or one of the
call's own tokens becomes :data:`REDACTED`, the whole run: no part of a bearer value is recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Final

from opentelemetry.trace import Span

__all__ = [
    "ARGUMENTS_ATTRIBUTE",
    "MAX_CONTENT_BYTES",
    "REDACTED",
    "RESULT_ATTRIBUTE",
    "TRUNCATED",
    "bounded_content",
    "bounded_text",
    "readable_result",
    "record_arguments",
    "record_input_text",
    "record_output_text",
    "record_result",
]

MAX_CONTENT_BYTES: Final = 4096
"""The most UTF-8 bytes each captured value takes, the truncation marker included."""
REDACTED: Final = "[redacted]"
TRUNCATED: Final = "…[truncated]"
ARGUMENTS_ATTRIBUTE: Final = "gen_ai.tool.call.arguments"
RESULT_ATTRIBUTE: Final = "gen_ai.tool.call.result"
_JSON: Final = "application/json"
_TEXT: Final = "text/plain"

# Every character a JWS or a handle is made of: a bearer value is always inside one such run.
_RUN_CHARS: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-."
# The shortest handle: a one-letter prefix, "_", 35 payload characters (handles/_format.py).
_SHORTEST: Final = 37
_RUN: Final = re.compile(r"[A-Za-z0-9_.\-]{37,}")
# A handle's prefix and payload. A compact JWS is found by its "eyJ" ('{"' encoded) with a substring test: a pattern
# that scans on from each eyJ rescans the rest of the run, quadratic in it (tests/unit/test_linear_parsers.py).
_SECRET: Final = re.compile(r"[a-z][a-z0-9]{0,3}_[A-Za-z0-9_-]{34}[AEIMQUYcgkosw048]")


def bounded_content(value: object, known: Collection[str] = ()) -> tuple[str, bool]:
    """``value`` as compact JSON, redacted, at most :data:`MAX_CONTENT_BYTES`; and whether it is whole.

    ``known`` are bearer values of this very call (its session and state tokens), redacted wherever
    they appear even if their shape changes one day.
    """
    try:
        text = json.dumps(_redacted(value, known), ensure_ascii=False, separators=(",", ":"), default=repr)
    except RecursionError:  # nested deeper than Python recurses: nothing of it is recorded
        return TRUNCATED, False
    encoded = text.encode("utf-8", "backslashreplace")  # a lone surrogate, as JSON escapes it
    if len(encoded) <= MAX_CONTENT_BYTES and TRUNCATED not in text:
        return encoded.decode(), True
    room = MAX_CONTENT_BYTES - len(TRUNCATED.encode())
    return encoded[:room].decode("utf-8", "ignore") + TRUNCATED, False


def _redacted(value: object, known: Collection[str]) -> object:
    """``value`` with every string (object keys too) redacted: in the parsed JSON, where no escape hides a run."""
    if type(value) is str:
        return _redacted_text(value, known)
    if isinstance(value, dict):
        return {_redacted_text(str(key), known): _redacted(item, known) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(item, known) for item in value]
    return value


def _redacted_text(text: str, known: Collection[str]) -> str:
    if len(text) > MAX_CONTENT_BYTES:
        # Past the bound anyway: cut outside a run first, so that no part of a token is left at the end.
        text = text[:MAX_CONTENT_BYTES].rstrip(_RUN_CHARS) + TRUNCATED
    if len(text) < _SHORTEST:
        return text
    return _RUN.sub(lambda run: _redacted_run(run.group(), known), text)


def _redacted_run(run: str, known: Collection[str]) -> str:
    if "eyJ" in run or _SECRET.search(run) is not None or any(token in run for token in known):
        return REDACTED
    return run


def bounded_text(text: str, known: Collection[str] = ()) -> str:
    """``text`` redacted as every string of :func:`bounded_content`, at most :data:`MAX_CONTENT_BYTES` of UTF-8."""
    encoded = _redacted_text(text, known).encode("utf-8", "backslashreplace")
    if len(encoded) <= MAX_CONTENT_BYTES:
        return encoded.decode()
    # Redacted already, and cut outside a run if it was longer than the bound in characters: only bytes are left.
    return encoded[: MAX_CONTENT_BYTES - len(TRUNCATED.encode())].decode("utf-8", "ignore") + TRUNCATED


def readable_result(result: Mapping[str, object]) -> tuple[str | None, object]:
    """What a person reads of a ``tools/call`` result: ``(text, None)``, or ``(None, value)`` to record as JSON.

    The text of its ``content`` items, one a line (an item of another type is ``[type]``); else its
    ``structuredContent``; else the result without ``_meta``. Reading stops past the bound.
    """
    parts: list[str] = []
    size = 0
    has_text = False
    content = result.get("content")
    for item in content if type(content) is list else ():
        if size > MAX_CONTENT_BYTES:
            break
        kind = item.get("type") if isinstance(item, dict) else None
        text = item.get("text") if kind == "text" else None
        if type(text) is str:
            has_text = True
        elif type(kind) is str:
            text = f"[{kind}]"
        else:
            continue
        parts.append(text[: MAX_CONTENT_BYTES + 1])  # longer than the bound: bounded_text cuts it outside a run
        size += len(parts[-1]) + 1
    if has_text:
        return "\n".join(parts), None
    structured = result.get("structuredContent")
    if structured is not None:
        return None, structured
    if parts:
        return "\n".join(parts), None
    return None, {key: value for key, value in result.items() if key != "_meta"}


def record_arguments(span: Span, arguments: object, known: Collection[str]) -> None:
    """A ``tools/call``'s arguments on its span (the caller checks that the span records)."""
    text, whole = bounded_content(arguments, known)
    span.set_attributes({ARGUMENTS_ATTRIBUTE: text, "input.value": text, "input.mime_type": _JSON if whole else _TEXT})


def record_result(span: Span, result: Mapping[str, object], known: Collection[str]) -> None:
    """What a person reads of a ``tools/call``'s result, on its span (the caller checks that the span records)."""
    text, value = readable_result(result)
    if text is not None:
        text, mime_type = bounded_text(text, known), _TEXT
    else:
        text, whole = bounded_content(value, known)
        mime_type = _JSON if whole else _TEXT
    span.set_attributes({RESULT_ATTRIBUTE: text, "output.value": text, "output.mime_type": mime_type})


def record_input_text(span: Span, text: str, known: Collection[str] = ()) -> None:
    """A call's input as text (a session's label), bounded and redacted (the caller checks that the span records)."""
    span.set_attributes({"input.value": bounded_text(text, known), "input.mime_type": _TEXT})


def record_output_text(span: Span, text: str) -> None:
    """A call's outcome as text (the caller checks that the span records)."""
    span.set_attributes({"output.value": bounded_text(text), "output.mime_type": _TEXT})

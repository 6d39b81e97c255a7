"""Content capture: a ``tools/call``'s arguments and result on its span, redacted and bounded.

Opt-in (``capture_content=True``): the GenAI conventions' ``gen_ai.tool.call.arguments`` and ``.result``,
and the same text as OpenInference's ``input.value`` and ``output.value`` (with ``*.mime_type``), which
Phoenix shows as a span's input and output, MLflow's OTLP ingestion turns into ``mlflow.spanInputs`` and
``mlflow.spanOutputs``, and Langfuse reads as an observation's input and output.

The arguments are their compact JSON; the result, what a person reads of it (:func:`readable_result`). Each
value is at most :data:`MAX_CONTENT_BYTES` of UTF-8, a longer one cut and ended with :data:`TRUNCATED`.
Before that, in every string of it (object keys too), every run of token characters (``A-Z a-z 0-9 _ - .``)
of 37 or more that holds ``eyJ`` (a compact JWS: session and state tokens), a handle
(``handles/_format.py``) or one of the call's own tokens becomes :data:`REDACTED`, the whole run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping
from typing import Final, Literal

from opentelemetry.trace import Span

MAX_CONTENT_BYTES: Final = 4096
"""The most UTF-8 bytes each captured value takes, the truncation marker included."""
REDACTED: Final = "[redacted]"
TRUNCATED: Final = "…[truncated]"
_JSON: Final = "application/json"
_TEXT: Final = "text/plain"

# Every character a JWS or a handle is made of: a bearer value is always inside one such run.
_RUN_CHARS: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-."
# The runs as long as the shortest handle or longer: a one-letter prefix, "_", 35 payload characters.
_RUN: Final = re.compile(r"[A-Za-z0-9_.\-]{37,}")
# A handle's prefix and payload. A compact JWS is found by its "eyJ" ('{"' encoded) with a substring test: a pattern
# that scans on from each eyJ rescans the rest of the run, quadratic in it (tests/unit/test_linear_parsers.py).
_SECRET: Final = re.compile(r"[a-z][a-z0-9]{0,3}_[A-Za-z0-9_-]{34}[AEIMQUYcgkosw048]")


def redacted(
    text: str, bound: int, kept: int, run_chars: str, runs: re.Pattern[str], redact: Callable[[re.Match[str]], str]
) -> str:
    """``text`` with each of its ``runs`` replaced by what ``redact`` makes of it (:data:`REDACTED` or the run).

    A text longer than ``bound`` characters is first cut to ``kept``, then back to before its last run of
    ``run_chars`` (a run cut short may be the start of a bearer value: it goes whole), and ends with
    :data:`TRUNCATED`. Linear in ``text``: one cut, one scan.
    """
    if len(text) > bound:
        text = text[:kept].rstrip(run_chars) + TRUNCATED
    return runs.sub(redact, text)


def _redacted_text(text: str, known: Collection[str]) -> str:
    """One string of captured content, redacted, and cut outside a run past the bound."""

    def redact(run: re.Match[str]) -> str:
        value = run[0]
        secret = "eyJ" in value or _SECRET.search(value) is not None or any(token in value for token in known)
        return REDACTED if secret else value

    return redacted(text, MAX_CONTENT_BYTES, MAX_CONTENT_BYTES, _RUN_CHARS, _RUN, redact)


def _redacted(value: object, known: Collection[str]) -> object:
    """``value`` with every string (object keys too) redacted: in the parsed JSON, where no escape hides a run."""
    if type(value) is str:
        return _redacted_text(value, known)
    if isinstance(value, dict):
        return {_redacted_text(str(key), known): _redacted(item, known) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(item, known) for item in value]
    return value


def _fitted(text: str) -> str:
    """``text`` in at most :data:`MAX_CONTENT_BYTES` of UTF-8: its strings were redacted, and cut outside a run
    past the bound, already; only bytes are left to cut."""
    encoded = text.encode("utf-8", "backslashreplace")  # a lone surrogate, as JSON escapes it
    if len(encoded) <= MAX_CONTENT_BYTES:
        return encoded.decode()
    return encoded[: MAX_CONTENT_BYTES - len(TRUNCATED.encode())].decode("utf-8", "ignore") + TRUNCATED


def bounded_content(value: object, known: Collection[str] = ()) -> tuple[str, bool]:
    """``value`` as compact JSON, redacted, at most :data:`MAX_CONTENT_BYTES`; and whether it is whole.

    ``known`` are bearer values of this very call (its session and state tokens), redacted wherever
    they appear even if their shape changes one day.
    """
    try:
        text = json.dumps(_redacted(value, known), ensure_ascii=False, separators=(",", ":"), default=repr)
    except RecursionError:  # nested deeper than Python recurses: nothing of it is recorded
        return TRUNCATED, False
    text = _fitted(text)
    return text, TRUNCATED not in text


def bounded_text(text: str, known: Collection[str] = ()) -> str:
    """``text`` redacted as every string of :func:`bounded_content`, at most :data:`MAX_CONTENT_BYTES` of UTF-8."""
    return _fitted(_redacted_text(text, known))


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
    span.set_attributes(
        {"gen_ai.tool.call.arguments": text, "input.value": text, "input.mime_type": _JSON if whole else _TEXT}
    )


def record_result(span: Span, result: Mapping[str, object], known: Collection[str]) -> None:
    """What a person reads of a ``tools/call``'s result, on its span (the caller checks that the span records)."""
    text, value = readable_result(result)
    if text is not None:
        text, whole = bounded_text(text, known), False
    else:
        text, whole = bounded_content(value, known)
    span.set_attributes(
        {"gen_ai.tool.call.result": text, "output.value": text, "output.mime_type": _JSON if whole else _TEXT}
    )


def record_text(span: Span, side: Literal["input", "output"], text: str) -> None:
    """A session method's label (its input) or outcome (its output) as text, bounded and redacted."""
    span.set_attributes({side + ".value": bounded_text(text), side + ".mime_type": _TEXT})

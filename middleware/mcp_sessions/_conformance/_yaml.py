"""The YAML the conformance pack reads: block mappings and sequences of strings, nothing more.

The official suite's expected-failures file (``server:`` and ``client:``, each a
list of ``scenario`` or ``scenario:check-id``) and the pack's own traceability
files are written in this subset, so reading them needs no YAML library:
comments, plain and quoted scalars (``null``, ``~`` and empty are ``None``,
everything else a string), block mappings and sequences (a sequence may sit at
its key's indentation), and the flow sequences ``[]`` and ``[a, "b"]``.
Anything else (anchors, tags, block scalars, flow mappings, several documents)
is refused with its line number, never guessed. Linear in the text; bounded in
size and depth.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

MAX_YAML_BYTES = 1 << 20
"""The largest file read: a baseline or traceability file is a few kilobytes."""
_MAX_DEPTH = 16
# Possessive (``*+``): a quote that cannot close is unterminated, never closed earlier by backtracking.
_QUOTED = re.compile(r"'(?:[^']|'')*+'|\"(?:[^\"\\]|\\.)*+\"")

YamlValue = str | None | list["YamlValue"] | dict[str, "YamlValue"]


class YamlError(ValueError):
    """The text is not in the subset this reader takes; the message names the line."""


class _Line(NamedTuple):
    indent: int
    text: str
    number: int


def loads(text: str) -> YamlValue:
    """The value of one YAML document in the subset (``None`` for a document of comments only)."""
    if len(text) > MAX_YAML_BYTES:
        raise YamlError(f"over {MAX_YAML_BYTES} bytes")
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#") or stripped == "---":
            continue
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise YamlError(f"line {number}: indent with spaces, not tabs")
        lines.append(_Line(len(raw) - len(raw.lstrip(" ")), stripped, number))
    if not lines:
        return None
    value, end = _block(lines, 0, lines[0].indent, 0)
    if end != len(lines):
        raise YamlError(f"line {lines[end].number}: unexpected indentation")
    return value


def _is_item(line: _Line) -> bool:
    return line.text == "-" or line.text.startswith("- ")


def _block(lines: list[_Line], start: int, indent: int, depth: int) -> tuple[YamlValue, int]:
    if depth > _MAX_DEPTH:
        raise YamlError(f"line {lines[start].number}: nested deeper than {_MAX_DEPTH}")
    if _is_item(lines[start]):
        return _sequence(lines, start, indent, depth)
    return _mapping(lines, start, indent, depth)


def _sequence(lines: list[_Line], start: int, indent: int, depth: int) -> tuple[list[YamlValue], int]:
    items: list[YamlValue] = []
    index = start
    while index < len(lines) and lines[index].indent == indent and _is_item(lines[index]):
        line = lines[index]
        rest = line.text[1:].lstrip(" ")
        if not rest:
            value, index = _nested(lines, index + 1, indent, depth, line)
        elif rest == "-" or rest.startswith("- ") or _key_of(rest, line.number) is not None:
            # "- key: value" opens a mapping whose keys sit where "key" sits ("- - x", a sequence).
            inner = indent + len(line.text) - len(rest)
            lines[index] = _Line(inner, rest, line.number)
            value, index = _block(lines, index, inner, depth + 1)
        else:
            value, index = _scalar(rest, line.number), index + 1
        items.append(value)
    return items, index


def _mapping(lines: list[_Line], start: int, indent: int, depth: int) -> tuple[dict[str, YamlValue], int]:
    mapping: dict[str, YamlValue] = {}
    index = start
    while index < len(lines) and lines[index].indent == indent and not _is_item(lines[index]):
        line = lines[index]
        split = _key_of(line.text, line.number)
        if split is None:
            raise YamlError(f"line {line.number}: expected 'key: value'")
        key, rest = split
        if key in mapping:
            raise YamlError(f"line {line.number}: {key!r} appears twice")
        if rest:
            mapping[key], index = _scalar(rest, line.number), index + 1
        else:
            mapping[key], index = _nested(lines, index + 1, indent, depth, line)
    return mapping, index


def _nested(lines: list[_Line], index: int, indent: int, depth: int, parent: _Line) -> tuple[YamlValue, int]:
    """The block under ``parent``: deeper, or a sequence at the same indentation; ``None`` when there is none."""
    if index == len(lines):
        return None, index
    line = lines[index]
    if line.indent > indent or (line.indent == indent and _is_item(line) and not _is_item(parent)):
        return _block(lines, index, line.indent, depth + 1)
    return None, index


def _key_of(text: str, number: int) -> tuple[str, str] | None:
    """``(key, rest)`` when ``text`` is ``key: rest`` or ``key:``; ``None`` when it is a scalar."""
    if text[0] in "'\"":
        key, after = _quoted(text, number)
        after = after.lstrip(" ")
        if after == ":" or after.startswith(": "):
            return key, after[1:].strip()
        return None
    for marker in (": ", ":\t"):
        position = text.find(marker)
        if position > 0:
            return text[:position].rstrip(), text[position + 2 :].strip()
    return (text[:-1].rstrip(), "") if text.endswith(":") and len(text) > 1 else None


def _scalar(text: str, number: int) -> YamlValue:
    if text[0] in "'\"":
        value, after = _quoted(text, number)
        if after.strip() and not after.lstrip().startswith("#"):
            raise YamlError(f"line {number}: text after a quoted string")
        return value
    if text[0] == "[":
        return _flow(text, number)
    if text[0] in "&*!|>{@`%":
        raise YamlError(f"line {number}: {text[0]!r} is outside the YAML subset read here")
    comment = text.find(" #")
    plain = (text[:comment] if comment >= 0 else text).rstrip()
    return None if plain in ("", "~", "null", "Null", "NULL") else plain


def _quoted(text: str, number: int) -> tuple[str, str]:
    """A quoted string at the start of ``text``, and what follows it."""
    match = _QUOTED.match(text)
    if match is None:
        raise YamlError(f"line {number}: unterminated {text[0]} string")
    body, after = match.group()[1:-1], text[match.end() :]
    if text[0] == "'":
        return body.replace("''", "'"), after
    try:
        return str(json.loads(f'"{body}"')), after
    except ValueError:
        raise YamlError(f"line {number}: an escape in this string is outside the subset") from None


def _flow(text: str, number: int) -> list[YamlValue]:
    comment = text.find(" #")
    body = (text[:comment] if comment >= 0 else text).rstrip()
    if not body.endswith("]") or any(mark in body[1:-1] for mark in "[]{}'\""):
        raise YamlError(f"line {number}: only a flow sequence of plain strings ([a, b]) is read here")
    inner = body[1:-1].strip()
    return [_scalar(part.strip(), number) for part in inner.split(",")] if inner else []

"""The pipeline knows wires only through the profile interface; the draft is the one wire registered, and the
retired ones are named as such."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import mcp_sessions
from mcp_sessions._pipeline._response import advertise
from mcp_sessions._wire.protocol import Era
from mcp_sessions.profiles import DRAFT, PROFILES, profiles_from_names

PIPELINE = Path(mcp_sessions.__file__).parent
SEAM_FILES = [PIPELINE / "_middleware.py", PIPELINE / "_plan.py", *sorted((PIPELINE / "_pipeline").glob("*.py"))]
WIRE_NAMES = ("strawman", "sep1364", "header_every_era", "opening_methods", "declared", "unknown_is_no_session")


def names_in(tree: ast.AST) -> set[str]:
    """Every name the code spells: variables, attributes, imports, functions, classes, arguments, keywords."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.update((node.name, node.asname or ""))
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.keyword):
            found.add(node.arg or "")
    return found


@pytest.mark.parametrize("path", SEAM_FILES, ids=lambda path: path.name)
def test_the_pipeline_knows_one_wire_interface(path: Path) -> None:
    """No branch, field or name of a wire other than the interface's in the middleware or the pipeline."""
    names = names_in(ast.parse(path.read_text(encoding="utf-8")))
    assert names  # the file was read
    assert [n for n in names if any(wire in n.lower() for wire in WIRE_NAMES)] == []


def test_the_seam_check_finds_a_wire_name() -> None:
    tree = ast.parse("from .profiles import SEP1364_ALT1\nif call.profile.header_every_era:\n    declared = 1\n")
    assert {"SEP1364_ALT1", "header_every_era", "declared"} <= names_in(tree)


def test_the_draft_advertises_where_its_text_says() -> None:
    result: dict[str, Any] = {"capabilities": {}}
    assert advertise(result, DRAFT, Era.LEGACY, value=DRAFT.capability.value(required=True))
    assert result["capabilities"] == {"sessions": {"required": True}, "experimental": {"sessions": {"required": True}}}
    advertised = [DRAFT.advertises(m, era) for m in ("initialize", "server/discover") for era in Era]
    assert advertised == [True, False, True, True]


def test_the_draft_is_the_one_wire_registered() -> None:
    assert list(PROFILES) == ["draft"]


@pytest.mark.parametrize("name", ["strawman", "sep1364-alt1", "sep1364-alt2"])
def test_a_retired_wire_is_refused_by_name(name: str) -> None:
    with pytest.raises(ValueError, match=f"the session wire profile '{name}' was removed: .*use 'draft'"):
        profiles_from_names(f"draft,{name}")

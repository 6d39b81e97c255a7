"""Every public name, and every public member of a public class, has a docstring.

The API reference (``docs/api.md``, built by ``make docs``) renders these
docstrings and leaves out what has none. Docstrings are read from the source
with griffe, the library the docs site renders them with, so that a
constant's attribute docstring counts and a dataclass's generated
``__doc__`` does not. What is public is found at run time: each module's
``__all__``, and each public class's members through its MRO, skipping the
ones inherited from outside this package (``object``, ``Exception``,
``Enum``, a third-party base). A method that overrides one of this package's
documented methods (``MemoryStore.get`` overriding ``SessionStore.get``)
shares that docstring.
"""

from __future__ import annotations

import re
from pathlib import Path

import griffe
import pytest

import mcp_sessions
from unit._public import PUBLIC_MODULES, public_classes, public_names

SOURCE = Path(mcp_sessions.__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def package() -> griffe.Module:
    loaded = griffe.load("mcp_sessions", search_paths=[SOURCE])
    assert isinstance(loaded, griffe.Module)
    return loaded


def public_members() -> dict[str, list[str]]:
    """Each public member of a public class, as the paths of this package's classes that define it (MRO order)."""
    members: dict[str, list[str]] = {}
    for cls in public_classes():
        for name in dir(cls):
            if name.startswith("_"):
                continue
            owners = [klass for klass in cls.__mro__ if name in vars(klass)]
            if not owners[0].__module__.startswith("mcp_sessions."):
                continue
            paths = [
                f"{k.__module__}.{k.__qualname__}.{name}" for k in owners if k.__module__.startswith("mcp_sessions.")
            ]
            members.setdefault(paths[0], paths)
    return members


def docstring(package: griffe.Module, path: str) -> str:
    obj = package if path == "mcp_sessions" else package[path.removeprefix("mcp_sessions.")]
    return obj.docstring.value.strip() if obj.docstring else ""


def test_there_is_something_to_check() -> None:
    names = set(public_names())
    assert {
        "mcp_sessions.MCPSessionMiddleware",
        "mcp_sessions.stores.RedisStore",
        "mcp_sessions.client.SessionTransport",
    } <= names
    members = public_members()
    assert any(path.endswith(".MCPSessionMiddleware.from_env") for path in members)
    assert any(path.endswith(".SessionStore.incr") for path in members)
    assert len(members) >= 40


@pytest.mark.parametrize("path", [*public_names(), *PUBLIC_MODULES])
def test_public_name_has_a_docstring(package: griffe.Module, path: str) -> None:
    """Each public name, and each public module."""
    assert docstring(package, path), f"{path} has no docstring"


@pytest.mark.parametrize(("path", "owners"), list(public_members().items()))
def test_public_member_has_a_docstring(package: griffe.Module, path: str, owners: list[str]) -> None:
    assert any(docstring(package, owner) for owner in owners), f"{path} has no docstring"


def test_the_api_page_documents_exactly_the_public_modules_whole() -> None:
    page = (SOURCE.parent / "docs" / "api.md").read_text(encoding="utf-8")
    documented = re.findall(r"^::: (\S+)$", page, flags=re.MULTILINE)
    assert sorted(documented) == sorted(PUBLIC_MODULES)
    assert "members:" not in page  # each module's whole __all__, nothing picked

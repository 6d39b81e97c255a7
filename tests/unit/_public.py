"""What is public in the package, found at run time: the unit tests of its face and of its docstrings read it."""

from __future__ import annotations

import importlib
import pkgutil

import mcp_sessions

# Public by name: no part of the dotted path starts with an underscore.
PUBLIC_MODULES = (
    "mcp_sessions",
    *(
        info.name
        for info in pkgutil.walk_packages(mcp_sessions.__path__, prefix="mcp_sessions.", onerror=lambda _: None)
        if not any(piece.startswith("_") for piece in info.name.split("."))
    ),
)


def public_names() -> dict[str, object]:
    """Every name in a public module's ``__all__``, by its dotted path, with its value."""
    return {
        f"{module_name}.{name}": getattr(importlib.import_module(module_name), name)
        for module_name in PUBLIC_MODULES
        for name in importlib.import_module(module_name).__all__
    }


def public_classes() -> list[type]:
    """The public names that are classes."""
    return [value for value in public_names().values() if isinstance(value, type)]

"""The public face stays small: few names per module, the seams typed with public classes, and an import that
loads nothing optional (the SDK, the HTTP clients, uvicorn, Redis, YAML, pydantic)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import typing

import pytest

import mcp_sessions
from mcp_sessions.sources import SessionSource, SourceContext
from unit._public import PUBLIC_MODULES, public_classes, public_names

OPTIONAL = ["mcp", "mcp_types", "httpx", "httpx2", "uvicorn", "redis", "yaml", "pydantic", "pydantic_core"]
# What a module that is about an optional part may load: the modules that part's own import loads.
ABOUT = {"mcp_sessions.subscriptions": "mcp.shared.subscriptions"}


def optional_loaded(statement: str) -> list[str]:
    """The optional top-level packages a fresh interpreter has loaded after ``statement``."""
    code = f"import json, sys; {statement}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return sorted(set(json.loads(out)) & set(OPTIONAL))


def test_the_package_is_few_names_and_none_is_public_twice() -> None:
    assert len(mcp_sessions.__all__) <= 16
    for name in PUBLIC_MODULES[1:]:
        exported = importlib.import_module(name).__all__
        assert len(exported) <= 15, f"{name} exports {len(exported)} names"
    assert {"mcp_sessions.stores", "mcp_sessions.profiles", "mcp_sessions.sources"} <= set(PUBLIC_MODULES)
    # One name per thing: a public name is exported by one public module.
    seen: dict[str, str] = {}
    for module_name in PUBLIC_MODULES:
        for name in importlib.import_module(module_name).__all__:
            assert name not in seen, f"{name} is public in {seen[name]} and {module_name}"
            seen[name] = module_name


def test_import_mcp_sessions_loads_nothing_optional() -> None:
    assert optional_loaded("import mcp_sessions") == []
    # Nor the gateway or the CLI's commands: each is imported when used.
    code = "import sys, mcp_sessions; print([m for m in sys.modules if m.startswith(('mcp_sessions._gateway',"
    code += " 'mcp_sessions._cli'))])"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


@pytest.mark.parametrize("module_name", PUBLIC_MODULES[1:])
def test_a_public_module_loads_only_what_it_is_about(module_name: str) -> None:
    allowed = optional_loaded(f"import {ABOUT[module_name]}") if module_name in ABOUT else []
    assert optional_loaded(f"import {module_name}") == allowed


def package_classes(annotation: object) -> set[type]:
    """The classes of this package an annotation names, through unions and generics."""
    if isinstance(annotation, type):
        return {annotation} if annotation.__module__.startswith("mcp_sessions") else set()
    return {cls for arg in typing.get_args(annotation) for cls in package_classes(arg)}


@pytest.mark.parametrize(
    "seam",
    [
        pytest.param(SessionSource.session_for, id="SessionSource.session_for"),
        pytest.param(SourceContext, id="SourceContext"),
    ],
)
def test_a_seam_is_typed_with_public_classes(seam: object) -> None:
    """What a user implements, or is given, names only public classes (a private one does not even resolve)."""
    by_name = {path.rpartition(".")[2]: value for path, value in public_names().items()}
    hints = typing.get_type_hints(seam, localns=by_name)
    named = {cls for annotation in hints.values() for cls in package_classes(annotation)}
    assert named, "the seam names no class of the package"
    assert named <= set(public_classes()), f"private classes in a public seam: {named - set(public_classes())}"


def test_the_stdio_gateway_loads_no_http_client_until_it_exchanges_a_token() -> None:
    """``gateway --stdio`` needs the SDK (its server, its auth) and uvicorn; httpx only for a token exchange, made
    when one is configured: where rich is installed, httpx's import loads it too (its command line), 50 ms of every
    start."""
    loaded = optional_loaded("import mcp_sessions._gateway._cli, mcp_sessions._gateway.stdio._server")
    assert "httpx" not in loaded
    assert "mcp" in loaded  # what it is about: not a module that loads nothing

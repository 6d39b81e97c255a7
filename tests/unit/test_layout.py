"""The package's layout as docs/architecture.md states it: parts and their order.

A part is a subpackage or a loose top-level module. Parts import one another
only one way (no cycle, ``TYPE_CHECKING`` imports included), never another
part's private names. Sizes are reported (``scripts/count_lines.py``, ruff's complexity rules), never checked here:
code is not split to fit a number (issue 93).
The conformance pack (``conformance/``, a distribution of its own) imports nothing of the package.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "middleware" / "mcp_sessions"
PACK = ROOT / "conformance" / "mcp_sessions_conformance"
NAME = "mcp_sessions"
MAX_CALL_LINES = 40
MAX_ANY_SHARE = 0.05
GATEWAY = f"{NAME}._gateway"
ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc|obj):`~?([\w.]+)(?:\(\))?`")
# ``_serving.CUT``, ``_sandbox``, ``stdio._models.Owner``: a private module's name
MODULE_LIKE = re.compile(r"``((?:auth\.|http\.|sealed\.|stdio\.)?_[a-z]\w*(?:\.\w+)*)``")
NOT_MODULES = {"_meta"}  # MCP's field


@functools.cache
def modules(package: Path = PACKAGE) -> tuple[tuple[str, Path, ast.Module], ...]:
    """Each module's name, path and tree: parsed once for all the tests here, which change no tree."""
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package.parent).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.append((".".join(parts), path, ast.parse(path.read_text(encoding="utf-8"))))
    return tuple(found)


def part_of(module: str) -> str:
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else "__init__"


def imported(module: str, path: Path, tree: ast.Module) -> Iterator[tuple[str, str]]:
    """(module, name) for every ``from X import name`` of the package, resolved to absolute names."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, *([node.module] if node.module else [])])
        else:
            target = node.module or ""
        if target == NAME or target.startswith(NAME + "."):
            for alias in node.names:
                yield target, alias.name


def assert_acyclic(edges: dict[str, set[str]]) -> None:
    """A depth-first search for a back edge, naming the cycle it finds."""
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for dependency in sorted(edges.get(node, ())):
            if state.get(dependency) == 1:
                pytest.fail("import cycle: " + " -> ".join([*trail[trail.index(dependency) :], dependency]))
            if dependency not in state:
                visit(dependency, [*trail, dependency])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


def test_no_import_cycle_between_parts() -> None:
    edges: dict[str, set[str]] = {}
    for module, path, tree in modules():
        source = part_of(module)
        for target, name in imported(module, path, tree):
            dependency = part_of(f"{target}.{name}" if target == NAME else target)
            if source not in ("__init__", dependency):
                edges.setdefault(source, set()).add(dependency)
    assert_acyclic(edges)


@pytest.mark.parametrize("part", ["stores", "subscriptions", "_gateway"])
def test_no_import_cycle_inside_a_part(part: str) -> None:
    """Its modules import one another one way, its ``__init__`` (where the registry is) last of all."""
    names = {module for module, _, _ in modules()}
    edges: dict[str, set[str]] = {}
    for module, path, tree in modules():
        for target, name in imported(module, path, tree):
            dependency = f"{target}.{name}" if f"{target}.{name}" in names else target
            if part_of(module) == part == part_of(dependency) and dependency != module:
                edges.setdefault(module, set()).add(dependency)
    assert_acyclic(edges)


def test_who_is_asking_imports_nothing_of_the_sealing() -> None:
    """Issue 102, item 5: ``auth/`` imported ``loads_code`` from ``sealed/``, which it uses for no process of its
    own: the names no process is given are checked with ``--pass-env``, in ``_process_flags``."""
    gateway = f"{NAME}._gateway"
    found = [
        f"{module}: from {target} import {name}"
        for module, path, tree in modules()
        if module.startswith(f"{gateway}.auth")
        for target, name in imported(module, path, tree)
        if f"{target}.{name}".startswith(f"{gateway}.sealed")
    ]
    assert found == []


def test_no_part_imports_another_parts_private_names() -> None:
    offenders = []
    for module, path, tree in modules():
        for target, name in imported(module, path, tree):
            other = part_of(target) != part_of(module) and target != NAME
            private = name.startswith("_") and not name.startswith("__")
            if other and (private or any(piece.startswith("_") for piece in target.split(".")[2:])):
                offenders.append(f"{module}: from {target} import {name}")
    assert offenders == []


def test_no_module_reads_argparse_s_private_face() -> None:
    """Issue 111, item 7: the gateway's file reader walked ``parser._actions``, tested ``argparse._AppendAction`` and
    rewrote each action's default; the options' one table (``_gateway._options``) says what argparse is told."""
    offenders = []
    for module, _, tree in modules():
        argparse_names = {"argparse"} | {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
            if alias.name == "argparse"
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            of_argparse = isinstance(node.value, ast.Name) and node.value.id in argparse_names
            if of_argparse or node.attr in ("_actions", "_option_string_actions", "_action_groups", "_defaults"):
                offenders.append(f"{module}:{node.lineno}: .{node.attr}")
    assert offenders == []


def test_the_pack_imports_nothing_of_the_package() -> None:
    """Not at the top of a module, not inside a function, not for type checking: the pack installs without it."""
    found = []
    for module, _, tree in modules(PACK):
        for node in ast.walk(tree):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            found += [f"{module}: {name}" for name in names if name == NAME or name.startswith(NAME + ".")]
    assert modules(PACK)
    assert found == []


def test_the_middleware_call_reads_as_the_pipeline() -> None:
    tree = ast.parse((PACKAGE / "_middleware.py").read_text(encoding="utf-8"))
    [call] = [n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef) and n.name == "__call__"]
    assert (call.end_lineno or 0) - call.lineno + 1 <= MAX_CALL_LINES


def test_few_annotations_are_any() -> None:
    annotations = any_count = 0
    for _, _, tree in modules():
        for node in ast.walk(tree):
            found: list[ast.expr] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                arguments = node.args
                every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
                every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
                found = [a.annotation for a in every if a.annotation is not None]
                if node.returns is not None:
                    found.append(node.returns)
            elif isinstance(node, ast.AnnAssign):
                found = [node.annotation]
            annotations += len(found)
            any_count += sum("Any" in ast.unparse(annotation) for annotation in found)
    assert any_count / annotations < MAX_ANY_SHARE, f"{any_count} of {annotations} annotations use Any"


def test_no_test_module_imports_another() -> None:
    """What tests share lives in helper modules (``tests/**/_*.py``) and conftest files, never in a test module."""
    offenders = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.module else [alias.name for alias in node.names]
            else:
                continue
            if any(name.rsplit(".", 1)[-1].startswith("test_") for name in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def public_home(module: str) -> str:
    """The public module a private one belongs to: ``mcp_sessions.sources._base`` is ``mcp_sessions.sources``'s."""
    pieces = module.split(".")
    while any(piece.startswith("_") for piece in pieces[1:]):
        pieces.pop()
    return ".".join(pieces)


def test_no_private_class_in_a_public_all() -> None:
    """A class a public module exports is public at home: defined in that module's package, or exported by the
    public package its own module belongs to (a re-export). No exemption: a seam's types live in its part."""
    offenders = []
    for name, _, _ in modules():
        if public_home(name) != name:
            continue
        module = importlib.import_module(name)
        for exported in getattr(module, "__all__", ()):
            value = getattr(module, exported)
            if not isinstance(value, type) or not value.__module__.startswith(NAME + "."):
                continue
            home = public_home(value.__module__)
            if home != name and exported not in importlib.import_module(home).__all__:
                offenders.append(f"{name}.{exported} is {value.__module__}.{value.__qualname__}")
    assert offenders == []


def folded(tree: ast.Module) -> Iterator[tuple[ast.Assign, list[ast.expr], list[ast.expr]]]:
    """``a, b = x, y``: an assignment of a tuple of names to a tuple of values; with its targets and values."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Tuple):
            continue
        if isinstance(targets := node.targets[0], ast.Tuple):
            yield node, targets.elts, node.value.elts


def test_the_gateway_folds_no_unrelated_values_into_one_line() -> None:
    """Issue 102, item 5: one assignment a line, as httpcore writes them; a tuple line stays where it is one step, a
    swap or a take-and-reset (``start, self._held = self._held, None``), where a value is one of the targets."""
    offenders = []
    for module, path, tree in modules():
        if module.startswith(GATEWAY):
            for node, targets, values in folded(tree):
                if not {ast.unparse(each) for each in targets} & {ast.unparse(each) for each in values}:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert offenders == []


@functools.cache
def source_of(klass: type) -> str:
    """A class of the package's source ("" for another's), once, cut from its module's tree :func:`modules` parsed:
    ``inspect.getsource`` parses the whole module again for each class (seconds over the docstrings' names)."""
    if not klass.__module__.startswith(NAME):
        return ""
    parsed = {module: (path, tree) for module, path, tree in modules()}
    path, tree = parsed.get(klass.__module__, (None, None))
    node: ast.AST | None = tree
    for name in klass.__qualname__.split("."):
        node = next((c for c in getattr(node, "body", ()) if isinstance(c, ast.ClassDef) and c.name == name), None)
    if path is None or not isinstance(node, ast.ClassDef):  # a class made in a function, say: inspect finds it
        return inspect.getsource(klass)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(lines[node.lineno - 1 : node.end_lineno])


def has(owner: object, name: str) -> tuple[bool, object]:
    """Whether ``owner`` has ``name``: an attribute, a class's annotated field or one its methods set on ``self``;
    and its value where it has one at hand."""
    if hasattr(owner, name):
        return True, getattr(owner, name)
    for klass in owner.__mro__ if isinstance(owner, type) else ():
        if name in vars(klass).get("__annotations__", {}):
            return True, None
        if re.search(rf"self\.{name}\b(: [^=]+)? = ", source_of(klass)):
            return True, None
    return False, None


def found(place: str, target: str) -> bool:
    """Whether ``target`` names what exists in ``place`` (a module): its longest module prefix, then each attribute
    in turn; a class or function a module the target names only imports is not found there."""
    pieces = [*place.split("."), *target.split(".")] if place else target.split(".")
    for end in range(len(pieces), 0, -1):
        prefix = ".".join(pieces[:end])
        try:
            if importlib.util.find_spec(prefix) is None:
                continue
        except (ImportError, ValueError):
            continue
        owner: object = importlib.import_module(prefix)
        for piece in pieces[end:]:
            if owner is None:  # an instance attribute's own: not followed
                return True
            there, owner = has(owner, piece)
            if not there:
                return False
            imported = (inspect.isclass(owner) or inspect.isfunction(owner)) and owner.__module__ != prefix
            if piece == pieces[end] and end > len(place.split(".")) and imported:
                return False  # named in a module that imports it
        return True
    return False


def named(target: str, module: str, package: str, klass: str | None) -> bool:
    """Whether a docstring's ``target`` in ``module`` names what exists: with leading dots, relative to ``package``
    as an import is; else in its class, its module, its package, the gateway or one of its parts, the package."""
    if target.startswith("."):
        dots = len(target) - len(target.lstrip("."))
        base = package.split(".")
        return found(".".join(base[: len(base) - dots + 1]), target.lstrip("."))
    places = [f"{module}.{klass}"] if klass else []
    places += [module, package, GATEWAY, *(f"{GATEWAY}.{part}" for part in ("auth", "http", "sealed", "stdio"))]
    return any(found(place, target) for place in [*places, NAME, "builtins"]) or found("", target)


def docstrings(node: ast.AST, klass: str | None = None) -> Iterator[tuple[int, str | None, str]]:
    """Each docstring under ``node`` (a module's, a class's, a function's, an attribute's), its line, and the class
    it is read in."""
    if isinstance(node, ast.ClassDef):
        klass = node.name
    if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        if (text := ast.get_docstring(node, clean=False)) is not None:
            yield getattr(node, "lineno", 1), klass, text
        for assigned, after in itertools.pairwise(node.body):
            said = after.value.value if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) else None
            if isinstance(assigned, ast.Assign | ast.AnnAssign) and isinstance(said, str):
                yield after.lineno, klass, said
    for child in ast.iter_child_nodes(node):
        yield from docstrings(child, klass)


def test_the_gateways_docstrings_name_what_exists() -> None:
    """Issue 102, item 5: ``_auth`` was named where ``auth._users`` is, ``~._process_flags`` where it is
    ``~.._process_flags``. Every Sphinx reference, and every private module's name between double back-quotes,
    names a module, and a name in it, that exists."""
    missing = []
    for module, path, tree in modules():
        if not module.startswith(GATEWAY):
            continue
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for line, klass, text in docstrings(tree):
            targets = ROLE.findall(text) + [name for name in MODULE_LIKE.findall(text) if name not in NOT_MODULES]
            missing += [
                f"{path.relative_to(ROOT)}:{line}: {target}"
                for target in targets
                if not named(target, module, package, klass)
            ]
    assert missing == [], "\n".join(missing)

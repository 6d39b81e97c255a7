"""The configuration pages list what the code reads: every option, every ``MCP_SESSIONS_*`` variable, no more.

The code is the reference: the keys of ``SessionsOptions`` (checked against ``SessionsConfig``'s own
keywords), and the ``MCP_SESSIONS_*`` names in the package's string literals (docstrings aside, so a
stale docstring keeps no variable alive). docs/configuration.md must list each option (a section, and
the options block with its default: tests/e2e/test_docs.py) and each variable (a row with its default and an example);
README's options table must list all of them too. Both ways: a documented name the code no longer
reads fails as well, on any page. And README's status names every wire profile, and every MCP
Inspector command in the docs pins the version scripts/system-deps.sh installs for the tests.
"""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path

from _docs import ROOT
from mcp_sessions import SessionsConfig
from mcp_sessions._config import SessionsOptions
from mcp_sessions._gateway._cli import add_arguments
from mcp_sessions.profiles import PROFILES

PACKAGE = ROOT / "middleware" / "mcp_sessions"
README = (ROOT / "README.md").read_text(encoding="utf-8")
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
_VARIABLE = re.compile(r"\bMCP_SESSIONS_[A-Z0-9_]*[A-Z0-9]\b")
_CODE = re.compile(r"`([^`]+)`")


def options() -> set[str]:
    return set(SessionsOptions.__required_keys__ | SessionsOptions.__optional_keys__)


def docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring nodes of ``tree``: module, classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def variables_in(files: Iterable[Path]) -> set[str]:
    """Every ``MCP_SESSIONS_*`` name in a string literal of ``files`` (f-string parts included)."""
    names: set[str] = set()
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        skip = docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                names.update(_VARIABLE.findall(node.value))
    return names


@functools.cache
def variables_read() -> frozenset[str]:
    """The variables the package reads: its tree parsed once for the four tests that ask, which change no file."""
    return frozenset(variables_in(PACKAGE.rglob("*.py")))


def section(text: str, heading: str) -> str:
    """The text under the line ``heading``, up to the next heading of the same level or higher."""
    level = heading.split(" ")[0]
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    ends = [m.start() for m in re.finditer(r"^#+ ", text[start:], flags=re.M) if len(m.group().strip()) <= len(level)]
    return text[start : start + ends[0]] if ends else text[start:]


def table(text: str, header: str) -> list[dict[str, str]]:
    """The rows of the one Markdown table of ``text`` whose header row starts with ``header``."""
    lines = text.splitlines()
    [start] = [i for i, line in enumerate(lines) if line.startswith(header)]
    columns = [c.strip() for c in lines[start].strip().strip("|").split(" | ")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        assert len(cells) == len(columns), line
        rows.append(dict(zip(columns, cells, strict=True)))
    return rows


def named(cell: str) -> set[str]:
    """The option names ``cell`` writes, each a code span of its own."""
    return {span for span in _CODE.findall(cell) if re.fullmatch(r"[a-z_]+", span)}


def variables(cell: str) -> set[str]:
    """The ``MCP_SESSIONS_*`` names in the code spans of ``cell`` (``MCP_SESSIONS_DEV=1`` names one)."""
    return {name for span in _CODE.findall(cell) for name in _VARIABLE.findall(span)}


def test_the_typed_options_are_the_constructors_keywords() -> None:
    assert options() == set(inspect.signature(SessionsConfig).parameters)


def test_the_package_reads_the_variables_this_test_looks_for() -> None:
    read = variables_read()
    assert {"MCP_SESSIONS_SECRET", "MCP_SESSIONS_ALLOWED_ORIGINS", "MCP_SESSIONS_REDIS_TIMEOUT"} <= read
    assert "MCP_SESSIONS_INSPECTOR_CLI" not in read  # a test's variable, documented in client.md


def test_configuration_has_a_section_for_every_option_and_no_other() -> None:
    headings = re.findall(r"^### (.+)$", section(CONFIGURATION, "## Options"), flags=re.M)
    documented = set().union(*(named(h) for h in headings))
    assert documented == options()


def test_configuration_lists_every_variable_with_a_default_and_an_example() -> None:
    """And the option each variable sets exists."""
    rows = table(CONFIGURATION, "| variable |")
    documented = set().union(*(variables(row["variable"]) for row in rows))
    assert documented == variables_read()
    for row in rows:
        assert row["default"], row
        assert row["what it does"], row
        assert _CODE.search(row["example"]), row  # a value to copy, as code
    assert set().union(*(named(row["option"]) for row in rows)) <= options()


def test_readme_options_table_lists_every_option_and_variable() -> None:
    rows = table(section(README, "## Configuration"), "| option |")
    assert set().union(*(named(row["option"]) for row in rows)) == options()
    documented = set().union(*(variables(row["environment variable"]) for row in rows))
    assert documented == variables_read()


def test_every_variable_a_page_names_is_read_by_the_package_or_the_tests() -> None:
    """A page naming a variable nobody reads any more (the tests read a few of their own, such as the Inspector's)."""
    tests = variables_in(p for p in (ROOT / "tests").rglob("*.py") if p.name != Path(__file__).name)
    pages = [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md"))]
    named_anywhere = {page.name: set(_VARIABLE.findall(page.read_text(encoding="utf-8"))) for page in pages}
    read = variables_read()
    assert {page: names - read - tests for page, names in named_anywhere.items() if names - read - tests} == {}


def test_readme_install_names_every_extra_of_a_command() -> None:
    """Issue 112 (6): ``mcp-sessions gateway`` without its extra asks for ``pip install 'mcp-sessions[gateway]'``,
    which the README's install did not name."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    install = section(README, "## Install")
    for extra in ("redis", "demo", "gateway"):
        assert extra in extras, extra
        assert re.search(rf"^pip install (-e )?'\.\[{extra}\]'", install, re.M), extra


def test_readme_status_names_every_wire_profile() -> None:
    status = section(README, "## Status")
    for name in PROFILES:
        assert f"`{name}`" in status, name


def test_inspector_commands_pin_the_version_the_tests_install() -> None:
    """An unpinned ``npx @modelcontextprotocol/inspector`` gets 0.15.0 on Node < 22, which has no --metadata."""
    pinned = re.search(r'^INSPECTOR_VERSION="([^"]+)"$', (ROOT / "scripts/system-deps.sh").read_text(), flags=re.M)
    assert pinned is not None
    npx = re.compile(r"npx (?:-y |--yes )?@modelcontextprotocol/inspector(@[^\s`]*)?(?=[\s`])")
    commands = {
        page: npx.findall(page.read_text(encoding="utf-8")) for page in [ROOT / "README.md", *ROOT.glob("docs/*.md")]
    }
    assert commands[ROOT / "docs" / "client.md"], "client.md shows the Inspector command"
    for page, versions in commands.items():
        assert all(version == f"@{pinned[1]}" for version in versions), page


def test_help_and_the_docs_say_the_same_default_max_processes() -> None:
    """Issue 112 (4): ``--help`` said "half the host's memory at 64 MiB each, from 16 to 64", docs/gateway.md "less
    --warm's 2 and the shared one" too: two defaults. The default ``--help`` gives is the flags table's."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    said = " ".join(parser.format_help().split())
    default = said.partition("--max-processes N with --stdio:")[2].partition("(default: ")[2].partition(";")[0]
    gateway = (ROOT / "docs" / "gateway.md").read_text(encoding="utf-8")
    [row] = [line for line in gateway.splitlines() if line.startswith("| `--max-processes N` |")]
    assert default.startswith("half the host's memory at 80 MiB each"), default
    assert default in row.replace("`", ""), (default, row)
